"""Build ``build/view``: the ``metashift`` package as it installs, as a tree of links to the sources.

pyproject.toml maps the design card's top-level folders into the package (``package-dir``:
``agent/`` is ``metashift.agent``, ...). Python follows that mapping (setuptools' editable finder),
but the tools that read modules from the file system do not: mypy and import-linter (grimp) find
``metashift.agent`` only where a ``metashift/agent/`` directory is. ``make lint`` builds this view
first and points them at it (mypy's ``mypy_path``; import-linter runs inside it). The view is a
build product (``build/`` is ignored), rebuilt on every run, never installed: the tree and the
wheel hold no link.

    python packaging/source_view.py [build/view]
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (".py", ".pyi")
#: The other roots of import-linter (packages of the checkout, and the lab's): linked whole, so that
#: a tool run inside the view finds them beside ``metashift`` (and no ``metashift`` of the
#: checkout's root, which is not the package as it installs).
BESIDE = {"tests": "tests", "bench": "bench", "metashift_lab": "lab/metashift_lab"}


def source_dir(package: str, mapping: dict[str, str]) -> Path:
    """Where ``package``'s files are: its own mapping, else its nearest mapped parent's folder and
    the rest of its name (as setuptools resolves ``package-dir``)."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in mapping:
            return ROOT / mapping[head] / Path(*parts[n:])
    return ROOT / Path(*parts)


def build(view: Path) -> int:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = settings.get("package-dir", {})
    if view.exists():
        shutil.rmtree(view)
    linked = 0
    for package in settings["packages"]:
        src = source_dir(package, mapping)
        dst = view / Path(*package.split("."))
        dst.mkdir(parents=True, exist_ok=True)
        for entry in sorted(src.iterdir()):
            if entry.is_file() and (entry.suffix in SOURCES or entry.name == "py.typed"):
                (dst / entry.name).symlink_to(entry)
                linked += 1
    for name, folder in BESIDE.items():
        (view / name).symlink_to(ROOT / folder, target_is_directory=True)
    return linked


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "view"
    count = build(target if target.is_absolute() else Path(os.getcwd()) / target)
    print(f"{target}: {count} module links", file=sys.stderr)
