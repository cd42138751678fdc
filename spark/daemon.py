"""The daemon Spark forks its Python workers from: pyspark's own, run with Spark's zips of
pyspark and py4j taken off the path when the installed packages are importable without them.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's) at the head of every worker's
``PYTHONPATH``. Python cannot cache the bytecode of a zip's modules, so each daemon compiled
pyspark from source again (1.0 core-s per context on this machine against 0.3 from the
installed package's cache), and each task's ``importlib.invalidate_caches()`` made every
zipimporter read the zip's directory of 1,485 entries again (0.1-0.2 core-s a task). The
workers fork from this process, so they inherit the path. Set as ``spark.python.daemon.module``
(session.py); where the installed packages are missing (an executor with pyspark only in
Spark's zip), the path is left as Spark made it.
"""

from __future__ import annotations

import importlib.util
import sys

#: The archives Spark adds to the path of its Python processes.
_SPARK_ZIPS = ("pyspark.zip", "-src.zip")


def path_without_spark_zips(path: list[str]) -> list[str]:
    """``path`` less Spark's zips of pyspark and py4j."""
    return [p for p in path if not p.endswith(_SPARK_ZIPS)]


def _use_installed_packages() -> None:
    """Take Spark's zips off ``sys.path`` when pyspark and py4j import without them."""
    kept = list(sys.path)
    sys.path[:] = path_without_spark_zips(kept)
    importlib.invalidate_caches()
    if any(importlib.util.find_spec(name) is None for name in ("pyspark", "py4j")):
        sys.path[:] = kept


if __name__ == "__main__":
    _use_installed_packages()
    from pyspark.daemon import manager

    manager()
