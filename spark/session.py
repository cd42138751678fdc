"""The SparkSession the copy and the verification run on.

``local[*]`` by default; any Spark master URL works. Workers run the project's own interpreter
(``sys.executable``): on a cluster, metashift must be installed at that same path on every worker.
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


def check_master(master: str | None) -> str:
    """``master`` (``DEFAULT_MASTER`` when None), or ``SparkUnavailable`` for a malformed one."""
    master = DEFAULT_MASTER if master is None else master
    if not _MASTER.fullmatch(master):
        raise SparkUnavailable(
            f"not a Spark master URL: {master!r} (local, local[N], local[*], spark://host:port, yarn, k8s://...)"
        )
    return master
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def get_session(master: str | None = None, app_name: str = "metashift") -> Any:
    """The running SparkSession if there is one (tests, the coordinator), else a new one on
    ``master``. Spark's console logging is cut to errors; the UI is off."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = check_master(master)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile={_LOG_CONFIG}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        # a failed task is a store error the job reports itself: never re-run a half-done write
        .config("spark.task.maxFailures", "1")
        .config("spark.driver.memory", os.environ.get("METASHIFT_SPARK_DRIVER_MEMORY", "1g"))
    )
    try:
        session = builder.getOrCreate()
    except Exception as e:  # the JVM did not start, or the master refused us
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SparkUnavailable(f"could not start Spark on {master}: {first}") from e
    session.sparkContext.setLogLevel("ERROR")
    return session


def stop_session() -> None:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
