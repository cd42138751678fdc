"""Regenerate the Python code of ``proto/`` (``make proto``).

The sources live in ``proto/v1/*.proto`` (metashift's gateway) and ``proto/oxia/v1/*.proto`` (the
part of Oxia's client protocol the Oxia store speaks); protoc runs from the repository root through the
``metashift/proto`` symlink, so that the generated modules import each other as
``metashift.proto.v1.…`` and land next to their sources. ``--out DIR`` writes the same tree under
another directory instead (the staleness test compares the two).

    python proto/generate.py [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent
PACKAGE = Path("metashift/proto")


def sources() -> list[Path]:
    """Proto files, relative to ``proto/``."""
    return sorted(p.relative_to(PROTO_DIR) for p in PROTO_DIR.rglob("*.proto"))


def generated_names(source: Path) -> list[Path]:
    stem = source.with_suffix("")
    return [stem.with_name(stem.name + suffix) for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]


def generate(out: Path | None = None) -> list[Path]:
    """Run protoc; return the generated files (relative to ``proto/``)."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    if out is None:
        include = ROOT
        out_dir = ROOT
    else:  # mirror metashift/proto/**/*.proto under ``out`` and generate there
        include = out
        out_dir = out
        for src in sources():
            dest = out / PACKAGE / src
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PROTO_DIR / src, dest)
    proto_include = str(Path(protoc.__file__).parent / "_proto")
    files = [str(PACKAGE / src) for src in sources()]
    args = [
        "grpc_tools.protoc",
        f"-I{include}",
        f"-I{proto_include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *files,
    ]
    import os

    cwd = os.getcwd()
    os.chdir(include)  # protoc names files relative to the include dir it was given
    try:
        code = protoc.main(args)
    finally:
        os.chdir(cwd)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    return [name for src in sources() for name in generated_names(src)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the generated tree under this directory")
    args = parser.parse_args(argv)
    for name in generate(args.out):
        print(PACKAGE / name if args.out is None else args.out / PACKAGE / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
