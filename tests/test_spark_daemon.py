"""Spark's Python workers import pyspark from the installed package, not from Spark's zip
(metashift.spark.daemon)."""

from __future__ import annotations

from typing import Any

from metashift.spark.daemon import path_without_spark_zips
from metashift.spark.session import DAEMON_MODULE


def _where_pyspark_comes_from(_: int) -> tuple[str, str, list[str]]:
    import sys

    import py4j
    import pyspark

    archives = [p for p in sys.path if p.endswith((".zip", ".jar"))]
    return pyspark.__file__ or "", py4j.__file__ or "", archives + (["org"] if "org" in sys.modules else [])


def _frozen_objects(_: int) -> int:
    import gc

    return gc.get_freeze_count()


def test_the_workers_import_pyspark_and_py4j_from_the_installed_packages(spark: Any) -> None:
    assert spark.getConf().get("spark.python.daemon.module") == DAEMON_MODULE
    seen = spark.parallelize(range(4), 4).map(_where_pyspark_comes_from).collect()
    assert len(seen) == 4
    for pyspark_file, py4j_file, zips in seen:
        assert pyspark_file.endswith("site-packages/pyspark/__init__.py"), pyspark_file
        assert py4j_file.endswith("site-packages/py4j/__init__.py"), py4j_file
        assert not [z for z in zips if z.endswith(("pyspark.zip", "-src.zip", ".jar")) or z == "org"], zips


def test_the_workers_talk_over_a_unix_socket_and_freeze_what_their_first_task_imported(spark: Any) -> None:
    assert spark.getConf().get("spark.python.unix.domain.socket.enabled") == "true"
    spark.parallelize(range(4), 4).map(_frozen_objects).collect()  # every worker has run a task
    assert all(n > 10_000 for n in spark.parallelize(range(4), 4).map(_frozen_objects).collect())


def test_only_the_spark_zips_leave_the_path() -> None:
    home = "/opt/spark/python/lib"
    path = ["/app", f"{home}/pyspark.zip", f"{home}/py4j-0.10.9.9-src.zip", "/usr/lib/python311.zip", "/site"]
    assert path_without_spark_zips(path) == ["/app", "/usr/lib/python311.zip", "/site"]
