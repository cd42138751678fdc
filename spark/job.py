"""Running one Spark job over planned partitions, with progress, for the copy and the verification."""

from __future__ import annotations

import functools
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from metashift.copy.rules import Rules
from metashift.stores import InvalidStoreURL, StoreURL, paths
from metashift.stores import parse_url as parse_store_url

from .report import Progress, SameStore
from .session import get_context, spark_context

T = TypeVar("T")
POLL_SECONDS = 0.25


def check_urls(source: str, target: str) -> tuple[StoreURL, StoreURL]:
    """Parse both URLs (``InvalidStoreURL`` before anything is contacted) and refuse a target that
    is the source or overlaps it (one's root inside the other's, on the same servers)."""
    for name, url in (("source", source), ("target", target)):
        if not isinstance(url, str) or not url:
            raise InvalidStoreURL(f"missing {name} store URL")
    src, tgt = parse_store_url(source), parse_store_url(target)
    if (
        src.scheme == tgt.scheme
        and _endpoints(src) & _endpoints(tgt)
        and (paths.is_under(src.root, tgt.root) or paths.is_under(tgt.root, src.root))
    ):
        raise SameStore(f"{src} and {tgt} overlap")
    return src, tgt


def _endpoints(url: StoreURL) -> set[tuple[str, int]]:
    """The (address, port) pairs ``url``'s hosts resolve to, so that ``localhost`` and
    ``127.0.0.1`` are seen as the same server; a name that does not resolve stands for itself."""
    out: set[tuple[str, int]] = set()
    for host, port in url.hosts:
        try:
            out.update((str(info[4][0]), port) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError:
            out.add((host, port))
    return out


class SparkStarter:
    """The SparkContext, started in a thread beside the driver's own work (it takes seconds to
    start: the listing and the copy of the top of the tree run meanwhile)."""

    def __init__(self, master: str | None, spark: Any = None) -> None:
        self.master = master
        self._spark = None if spark is None else spark_context(spark)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.ready_at: float | None = None
        """``time.monotonic()`` when the context was up (None: given, or not yet)."""

    def start(self) -> None:
        if self._spark is None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metashift-spark-start", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._spark = get_context(self.master)
            self.ready_at = time.monotonic()
        except BaseException as e:  # handed over to the caller's thread by get()
            self._error = e

    def parallelism(self) -> int:
        """Spark's default parallelism when it is up; until then what the master URL says, or
        the cores of this machine."""
        if self._spark is not None:
            return int(self._spark.defaultParallelism)
        m = re.fullmatch(r"local\[(\d+)(,\d+)?\]", self.master or "")
        return int(m.group(1)) if m else (1 if self.master == "local" else os.cpu_count() or 1)

    def get(self) -> Any:
        self.start()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._spark


def run_partitions(
    spark: Any,
    parts: list[list[str]],
    task: Callable[..., dict],
    source: str,
    target: str,
    rules: Rules,
    progress: Progress,
    done: tuple[int, int] = (0, 0),
) -> list[dict]:
    """Run ``task`` over each partition as one Spark job; returns the tasks' dicts. ``progress``
    is updated (nodes, bytes, on top of ``done``) as tasks finish."""
    if not parts:
        return []
    sc = spark_context(spark)
    nodes_acc, bytes_acc = sc.accumulator(0), sc.accumulator(0)
    fn = functools.partial(task, source_url=source, target_url=target, rules=rules, progress=(nodes_acc, bytes_acc))
    rdd = sc.parallelize(parts, len(parts)).map(fn)
    box: dict[str, Any] = {}

    def collect() -> None:
        try:
            box["result"] = rdd.collect()
        except BaseException as e:  # handed over to the caller's thread
            box["error"] = e

    worker = threading.Thread(target=collect, name="metashift-spark-job", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_SECONDS)
            progress.update(done[0] + nodes_acc.value, done[1] + bytes_acc.value)
    except BaseException:
        sc.cancelAllJobs()
        raise
    if "error" in box:
        raise box["error"]
    progress.update(done[0] + nodes_acc.value, done[1] + bytes_acc.value)
    return list(box["result"])
