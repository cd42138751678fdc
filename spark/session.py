"""The SparkContext the copy and the verification run on.

``local[*]`` by default; any Spark master URL works. Workers run the project's own interpreter
(``sys.executable``): on a cluster, metashift must be installed at that same path on every worker.

The copy uses Spark's RDD API only, so it starts a bare ``SparkContext``: a ``SparkSession``
would also start Spark SQL's catalog and planner, which cost a local start more than twice the
CPU (12 core-seconds against 5 on this machine's 2 cores). The driver's JVM runs with the client
compiler only and the serial collector: in a metashift job it schedules tasks and forwards small
pickled results, so C2's compile threads and G1's concurrent ones only take CPU from the stores.

A class archive (``METASHIFT_SPARK_CLASS_ARCHIVE``, made once by ``python -m
metashift.spark.class_archive PATH``) lets the driver map Spark's classes instead of loading and verifying them: on this
machine's 2 cores a context and its first job took 3.8-4.1 s and 8.3-8.8 core-seconds without it,
1.6-2.0 s and 4.6-5.6 core-seconds with it. An archive the JVM refuses (another Java, another
Spark, a truncated file) costs one failed start: the context is started again without it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from .report import SparkUnavailable

DEFAULT_MASTER = "local[*]"
#: The master URL forms Spark accepts (checked here, before a JVM starts and prints its stack).
_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s|mesos)://\S+|yarn"
)
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
#: The module Spark's Python workers fork from (daemon.py: pyspark from its installed package).
DAEMON_MODULE = "metashift.spark.daemon"
#: JVM options of the driver (and of the launcher JVM that spark-submit runs before it): a quick
#: start for a JVM that mostly waits (module doc).
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The environment variable naming the driver's class archive (module doc); unset or missing: none.
CLASS_ARCHIVE_ENV = "METASHIFT_SPARK_CLASS_ARCHIVE"
#: Silences the JVM's notes on an archive it cannot use (it then loads classes as without one).
QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def class_archive_options(archive: Path | None) -> str:
    """The driver's JVM options that map the class archive ``archive`` ('' when there is none)."""
    if archive is None or not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET_CDS}"


def configured_class_archive() -> Path | None:
    """The class archive the environment names (``CLASS_ARCHIVE_ENV``), if any."""
    named = os.environ.get(CLASS_ARCHIVE_ENV, "")
    return Path(named) if named else None


def check_master(master: str | None) -> str:
    """``master`` (``DEFAULT_MASTER`` when None), or ``SparkUnavailable`` for a malformed one."""
    master = DEFAULT_MASTER if master is None else master
    if not _MASTER.fullmatch(master):
        raise SparkUnavailable(
            f"not a Spark master URL: {master!r} (local, local[N], local[*], spark://host:port, yarn, k8s://...)"
        )
    return master


def spark_context(spark: Any) -> Any:
    """The SparkContext of ``spark``: a SparkContext itself, or a SparkSession a caller passed."""
    return getattr(spark, "sparkContext", spark)


def get_context(
    master: str | None = None, app_name: str = "metashift", extra_driver_options: str | None = None
) -> Any:
    """The running SparkContext if there is one (tests, the coordinator), else a new one on
    ``master``. Spark's console logging is cut to errors; the UI is off. ``extra_driver_options``
    are further JVM options of the driver; when None, those mapping the configured class archive,
    dropped if the JVM will not start with them."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active
    master = check_master(master)
    if extra_driver_options is not None:
        return _start(master, app_name, extra_driver_options)
    archive_options = class_archive_options(configured_class_archive())
    if archive_options:
        try:
            return _start(master, app_name, archive_options)
        except SparkUnavailable:
            pass  # an archive this JVM refuses: start as without one (module doc)
    return _start(master, app_name, "")


def _start(master: str, app_name: str, extra_driver_options: str) -> Any:
    """A new SparkContext on ``master`` whose driver JVM also takes ``extra_driver_options``."""
    from pyspark import SparkConf, SparkContext

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", LEAN_JVM)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_opts = f"-Dlog4j2.configurationFile={_LOG_CONFIG}"
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName(app_name)
        .set("spark.pyspark.python", sys.executable)
        .set("spark.pyspark.driver.python", sys.executable)
        .set("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .set("spark.driver.extraJavaOptions", f"{log_opts} {LEAN_JVM} {extra_driver_options}".rstrip())
        .set("spark.executor.extraJavaOptions", log_opts)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.python.worker.reuse", "true")
        .set("spark.python.daemon.module", DAEMON_MODULE)
        .set("spark.python.unix.domain.socket.enabled", "true")
        # a failed task is a store error the job reports itself: never re-run a half-done write
        .set("spark.task.maxFailures", "1")
        .set("spark.driver.memory", os.environ.get("METASHIFT_SPARK_DRIVER_MEMORY", "1g"))
    )
    try:
        context = SparkContext.getOrCreate(conf)
    except Exception as e:  # the JVM did not start, or the master refused us
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SparkUnavailable(f"could not start Spark on {master}: {first}") from e
    context.setLogLevel("ERROR")
    return context


def stop_context() -> None:
    """Stop the running SparkContext, if any."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
