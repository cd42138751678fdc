"""The package works installed, not only from the checkout: the wheel holds every file of the package
(code and what the code reads at run time: ``log4j2.properties``, ``.proto``, ``.pyi``, ``py.typed``),
and ``metashift generate`` then ``metashift copy --verify`` (ZooKeeper -> etcd, on Spark) run from a
fresh virtualenv holding that wheel.

The fresh virtualenv sees the project's ``.venv`` for the dependencies (pyspark, grpcio, ... are not
installed again: a ``.pth`` line adds that site-packages after its own), and the wheel is installed
``--no-deps`` into it. A path added by a ``.pth`` line does not run that directory's own ``.pth``
files, so the checkout's editable install stays out; the test checks that ``metashift`` is imported
from the new virtualenv, and runs everything from a directory outside the checkout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metashift.stores import open_store
from metashift_lab.sample_tree import generate

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "metashift"


def _tracked_files() -> list[str]:
    """The checkout's files as a fresh clone would have them (untracked ones not ignored count too,
    so a new module works before it is committed)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the project's files from build leftovers")
    return [f for f in out.decode().split("\0") if f and ((ROOT / f).exists() or (ROOT / f).is_symlink())]


def _source_view() -> Any:
    """``packaging/source_view.py``: how pyproject's packages map to the checkout's folders."""
    spec = importlib.util.spec_from_file_location("source_view", ROOT / "packaging" / "source_view.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_files(tracked: list[str]) -> set[str]:
    """Every file the package holds, by its path in an installed package (``metashift/spark/...``):
    the files of each package's folder (``package-dir`` maps ``agent/`` to ``metashift.agent``, ...)
    that the checkout tracks. A folder with an ``__init__.py`` that pyproject does not list fails."""
    view = _source_view()
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping, packages = settings["package-dir"], settings["packages"]
    folders = {os.path.relpath(view.source_dir(p, mapping), ROOT): p for p in packages}
    out: set[str] = set()
    for f in tracked:
        folder, _, name = f.rpartition("/")
        if folder in folders:
            out.add(f"{folders[folder].replace('.', '/')}/{name}")
        elif name == "__init__.py" and any(folder.startswith(d + "/") for d in folders):
            raise AssertionError(f"{folder} is a package of metashift's folders that pyproject.toml does not list")
    return {f for f in out if "__pycache__" not in f}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the checkout's files (no leftovers of an earlier build in
    ``build/`` can slip in), without build isolation: offline, with the project venv's setuptools."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for f in _tracked_files():
        dest = src / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        assert not (ROOT / f).is_symlink(), f"{f} is a link: the package maps folders, it links none"
        shutil.copy2(ROOT / f, dest)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(work / "dist"), str(src)],
        check=True, cwd=work, timeout=300,
    )  # fmt: skip
    (built,) = (work / "dist").glob("metashift-*.whl")
    return built


def test_the_wheel_holds_every_file_of_the_package(wheel: Path) -> None:
    expected = package_files(_tracked_files())
    assert "metashift/spark/log4j2.properties" in expected and "metashift/proto/v1/gateway.proto" in expected
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        links = [i.filename for i in z.infolist() if (i.external_attr >> 16) & 0o170000 == 0o120000]
    held = {n for n in names if n.startswith(PACKAGE + "/")}
    missing = sorted(expected - held)
    assert not missing, f"not in the wheel (package-data in pyproject.toml?): {missing}"
    # what a node installs: the runtime alone, no lab, no test, no link
    assert not [n for n in names if n.startswith(("metashift_lab", "lab/", "tests/", "bench/"))], names
    assert not [n for n in held if "/sandbox/" in n or "/pulsar_cluster/" in n or "/benchmarks/" in n], held
    assert links == []


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtualenv with the wheel in it and the project venv's packages behind it: its bin/."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    # the project venv's site-packages (where pyspark, grpcio, ... are), after the new venv's own
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "project-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
         "--no-index", "-q", str(wheel)],
        check=True, timeout=300, cwd=venv,
    )  # fmt: skip
    yield venv / "bin"


def run_installed(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )


async def test_copy_and_verify_run_from_the_installed_wheel(
    installed: Path, zk_url: str, etcd_url: str, tmp_path: Path
) -> None:
    where = run_installed(installed, "python", "-c", "import metashift; print(metashift.__file__)", cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    installed_init = Path(where.stdout.strip())
    assert installed_init.is_relative_to(installed.parent), f"metashift imported from {installed_init}, not the wheel"
    site_packages = installed_init.parent.parent
    missing = sorted(f for f in package_files(_tracked_files()) if not (site_packages / f).is_file())
    assert not missing, f"not installed: {missing}"

    # the lab is not in the wheel: a sample tree comes from here, its commands are said to be the lab's
    store = await open_store(zk_url, watch=False)
    try:
        await generate(store, 5, 1)
    finally:
        await store.close()
    lab = run_installed(installed, "metashift", "generate", "--target", zk_url, "--topics", "5", cwd=tmp_path)
    assert lab.returncode == 2 and "a command of metashift's lab" in lab.stderr, lab.stderr

    copied = run_installed(
        installed, "metashift", "copy", "--source", zk_url, "--target", etcd_url, "--verify", "--json",
        "--spark-master", "local[2]", cwd=tmp_path,
    )  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    report = json.loads(copied.stdout)
    assert report["nodes"] > 5 and report["verify"]["ok"], report
    # Spark found metashift's log4j2.properties (without it: its own default profile, said on stderr)
    assert "log4j2-defaults.properties" not in copied.stderr, copied.stderr
