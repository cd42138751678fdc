"""The Spark driver's class archive: mapped when it is good, and never the reason Spark won't start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from metashift.spark.session import CLASS_ARCHIVE_ENV, class_archive_options

#: The archive make setup makes.
MADE = Path(__file__).resolve().parent.parent / ".cache" / "spark" / "driver.jsa"
#: A context's first job, printing its sum and the driver JVM's options as Spark was given them.
_JOB = """
from metashift.spark.session import get_context
context = get_context("local[1]")
print(context.parallelize(range(10), 2).sum())
print(context.getConf().get("spark.driver.extraJavaOptions"))
"""


def _run_job(archive: Path) -> list[str]:
    assert MADE.is_file(), f"{MADE} is missing: make setup makes it"
    env = dict(os.environ, **{CLASS_ARCHIVE_ENV: str(archive)})
    # in the archive's folder: a JVM that refuses the archive leaves its hs_err file there
    done = subprocess.run(
        [sys.executable, "-c", _JOB], env=env, capture_output=True, text=True, timeout=300,
        check=True, cwd=archive.parent,
    )
    return done.stdout.splitlines()[-2:]


def test_no_archive_adds_no_option(tmp_path: Path) -> None:
    assert class_archive_options(None) == ""
    assert class_archive_options(tmp_path / "absent.jsa") == ""


def test_the_archive_setup_made_is_mapped(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    archive.symlink_to(MADE)
    total, options = _run_job(archive)
    assert total == "45"
    assert "-XX:SharedArchiveFile=" in options


def test_a_truncated_archive_is_dropped_and_spark_starts_without_it(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    # an archive cut short after its header: a JVM given it exits at once (one of zeros it ignores)
    with MADE.open("rb") as made:
        archive.write_bytes(made.read(1_000_000))
    total, options = _run_job(archive)
    assert total == "45"
    assert "SharedArchiveFile" not in options
