"""The daemon Spark forks its Python workers from: pyspark's own, run with Spark's zips of
pyspark and py4j taken off the path when the installed packages are importable without them.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's) at the head of every worker's
``PYTHONPATH``. Python cannot cache the bytecode of a zip's modules, so each daemon compiled
pyspark from source again (1.0 core-s per context on this machine against 0.3 from the
installed package's cache), and each task's ``importlib.invalidate_caches()`` made every
zipimporter read its archive's directory again: the zip's 1,485 entries and spark-core's jar
(on the path too, for no Python of its own). The
workers fork from this process, so they inherit the path. Set as ``spark.python.daemon.module``
(session.py); where the installed packages are missing (an executor with pyspark only in
Spark's zip), the path is left as Spark made it.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

#: The archives Spark adds to the path of its Python processes: its zips of pyspark and py4j,
#: and the jar of spark-core (``SparkContext.jarOfObject``), which holds no Python at all.
_SPARK_ARCHIVES = ("pyspark.zip", "-src.zip", ".jar")


def path_without_spark_zips(path: list[str]) -> list[str]:
    """``path`` less Spark's archives."""
    return [p for p in path if not p.endswith(_SPARK_ARCHIVES)]


def _use_installed_packages() -> None:
    """Take Spark's archives off ``sys.path`` when pyspark and py4j import without them."""
    kept = list(sys.path)
    sys.path[:] = path_without_spark_zips(kept)
    if any(importlib.util.find_spec(name) is None for name in ("pyspark", "py4j")):
        sys.path[:] = kept
        return
    # the importers Python made for the archives (and their folders) while it started would be
    # asked to read their directories again by every task's invalidate_caches()
    gone = tuple(p for p in kept if p not in sys.path)
    inside = tuple(f"{g}/" for g in gone)
    for entry in [e for e in sys.path_importer_cache if e in gone or e.startswith(inside)]:
        del sys.path_importer_cache[entry]
    # and the namespace packages found only in them: the jar's ``org``, which the standard
    # library's copy module looks for (Jython's PyStringMap) and which would make its importer again
    for name, module in list(sys.modules.items()):
        found = list(getattr(module, "__path__", None) or [])
        if found and all(p.startswith(inside) for p in found):
            del sys.modules[name]


def _frozen_after_the_first_task(worker: Callable[..., int]) -> Callable[..., int]:
    """``worker`` (pyspark.daemon's, which runs one task), then the first time: a collection and
    ``gc.freeze()``, so that what the first task imported is never traversed again."""
    frozen = False

    def run(*args: Any) -> int:
        nonlocal frozen
        code = worker(*args)
        if not frozen:
            gc.collect()
            gc.freeze()
            frozen = True
        return code

    return run


if __name__ == "__main__":
    _use_installed_packages()
    import pyspark.daemon

    # a reused worker runs gc.collect() after every task: a full collection of every module the
    # tasks imported (the stores' clients, grpc, protobuf), 20 ms of CPU a task on this machine
    pyspark.daemon.worker = _frozen_after_the_first_task(pyspark.daemon.worker)
    pyspark.daemon.manager()
