"""``python -m metashift.spark.class_archive PATH``: make the Spark driver's class archive at PATH.

It starts a context and runs one small job with the JVM told to archive the classes it loaded
(``-XX:ArchiveClassesAtExit``), into a file beside PATH; the archive replaces PATH only once a
context has started with it, so a reader never maps a half-written or unusable one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from .session import CLASS_ARCHIVE_ENV, QUIET_CDS

#: What the archiving run does: a context and the first job's tasks, as a copy starts.
_WARM_UP = """
import sys
from pyspark import SparkContext
from metashift.spark.session import get_context, stop_context
context = get_context("local[*]", "metashift-class-archive", sys.argv[1])
context.parallelize(range(64), 4).map(lambda x: x * 2).sum()
jvm = SparkContext._gateway.proc
stop_context()
jvm.stdin.close()  # the driver JVM exits when its stdin closes, and writes the archive as it does
jvm.wait(timeout=300)
"""


def _run(options: str) -> None:
    """One context and job in a fresh interpreter whose driver JVM takes ``options``."""
    env = {k: v for k, v in os.environ.items() if k != CLASS_ARCHIVE_ENV}
    subprocess.run(
        [sys.executable, "-c", _WARM_UP, options], env=env, check=True, stdout=subprocess.DEVNULL
    )


def make_archive(path: Path) -> None:
    """Write the class archive to ``path`` (made beside it, checked, then moved into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        _run(f"-XX:ArchiveClassesAtExit={partial} {QUIET_CDS}")
        _run(f"-XX:SharedArchiveFile={partial} -Xshare:on {QUIET_CDS}")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    """The command: make the archive, or say in one line why it could not."""
    parser = argparse.ArgumentParser(prog="python -m metashift.spark.class_archive", description=__doc__)
    parser.add_argument("path", type=Path, help="where the archive goes")
    args = parser.parse_args(argv)
    try:
        make_archive(args.path)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"metashift.spark.class_archive: could not make {args.path}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
