"""Regenerate the Python code of the project's ``.proto`` files (``make proto``).

Two trees: ``proto/v1/*.proto`` (metashift's gateway, package ``metashift.proto``) and
``metashift/stores/oxia/proto/*.proto`` (the part of Oxia's client protocol the Oxia store speaks,
package ``metashift.stores.oxia.proto``). protoc names a generated module's imports after the path
of its source below the include directory, so each tree is mirrored at its package's path
(``metashift/proto/...``) in a scratch directory, generated there, and the results copied next to
their sources. ``--out DIR`` writes them under DIR at their package's path instead (the
staleness test compares the two).

    python proto/generate.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: (the folder of the sources in the checkout, the package path they are generated for)
TREES = (
    (ROOT / "proto", Path("metashift/proto")),
    (ROOT / "metashift" / "stores" / "oxia" / "proto", Path("metashift/stores/oxia/proto")),
)
#: What ``main`` prints the generated files relative to (the first tree's, for its callers).
PACKAGE = TREES[0][1]


def sources(folder: Path) -> list[Path]:
    """The ``.proto`` files of ``folder``, relative to it."""
    return sorted(p.relative_to(folder) for p in folder.rglob("*.proto"))


def generated_names(source: Path) -> list[Path]:
    stem = source.with_suffix("")
    return [stem.with_name(stem.name + suffix) for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]


def generate(out: Path | None = None) -> list[Path]:
    """Run protoc over every tree; return the generated files, each at its package's path
    (``metashift/proto/v1/gateway_pb2.py``, ...), written next to their sources or under ``out``."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    proto_include = str(Path(protoc.__file__).parent / "_proto")
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="metashift-proto-") as scratch:
        work = Path(scratch)
        files = []
        for folder, package in TREES:
            for src in sources(folder):
                dest = work / package / src
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(folder / src, dest)
                files.append(str(package / src))
        args = ["grpc_tools.protoc", f"-I{work}", f"-I{proto_include}", f"--python_out={work}",
                f"--pyi_out={work}", f"--grpc_python_out={work}", *files]
        cwd = os.getcwd()
        os.chdir(work)  # protoc names files relative to the include dir it was given
        try:
            code = protoc.main(args)
        finally:
            os.chdir(cwd)
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        for folder, package in TREES:
            for src in sources(folder):
                for name in generated_names(src):
                    dest = (out / package / name) if out is not None else (folder / name)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(work / package / name, dest)
                    made.append(package / name)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the generated tree under this directory")
    args = parser.parse_args(argv)
    for name in generate(args.out):
        print(name if args.out is None else args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
