"""A leader's loss under the store layer (a benchmark, not a test): for each replicated store (a
ZooKeeper ensemble, an etcd cluster, an Oxia cluster of a coordinator and 3 data servers, RF 3,
3 shards; ``metashift_lab.replicated``), a store opened on the URL naming every member writes one
node without pause while its leader (Oxia: the leader of the node's shard) is SIGKILLed, ``--kills``
times (restarted in between). Per kill: the seconds from the SIGKILL until the store layer's next
acknowledged write (of a write sent after the kill), and until the store itself has a new leader
(the lab's ``wait_leader``: the leader as the store tells it, every running member serving; polled
every 50 ms). Also the writes that failed meanwhile and the session events the store's callers
heard. Prints a table, and with ``--json`` the figures.

    .venv/bin/python bench/store_failover.py [--kills 5] [--kinds zk,etcd,oxia] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from metashift.stores import MetadataStoreError, Store, open_store
from metashift_lab.replicated import ReplicatedStore, replicated

#: The node the writer writes (at the store's root: Oxia's leader is that key's shard's).
NODE = "/failover"
#: A bound (not a measure) on a store's recovery: past it the kill counts as not recovered.
RECOVERY_LIMIT = 120.0


@dataclass
class Kill:
    """One leader SIGKILLed: who, and what it cost."""

    lost: int
    elected: int
    election_s: float
    next_ack_s: float | None
    failed_writes: int


@dataclass
class Run:
    """One store's kills and the session events its store heard over them."""

    kind: str
    kills: list[Kill] = field(default_factory=list)
    events: list[str] = field(default_factory=list)


class Writer:
    """Blind puts of ``NODE``, one after the other, until stopped; when each was sent and acked."""

    def __init__(self) -> None:
        self.acks: list[tuple[float, float]] = []
        self.failures = 0
        self.stopped = asyncio.Event()

    async def run(self, store: Store) -> None:
        n = 0
        while not self.stopped.is_set():
            sent = time.monotonic()
            try:
                await store.put(NODE, b"%d" % n)
            except MetadataStoreError:
                self.failures += 1
                await asyncio.sleep(0.02)  # pacing the retries, not waiting for anything
                continue
            n += 1
            self.acks.append((sent, time.monotonic()))

    def first_ack_after(self, moment: float) -> float | None:
        return next((acked - moment for sent, acked in self.acks if sent > moment), None)


def _acked_after(writer: Writer, moment: float) -> bool:
    """The writer had a write acknowledged after ``moment`` (it ran below ``if __name__``, too late)."""
    return writer.first_ack_after(moment) is not None


async def _until(check: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def bench_store(kind: str, kills: int) -> Run:
    cluster: ReplicatedStore = replicated(kind)
    run = Run(kind)
    cluster.start()
    try:
        store = await open_store(cluster.url + "?session_timeout=60")
        store.add_session_listener(lambda e: run.events.append(e.value))
        writer = Writer()
        task = asyncio.create_task(writer.run(store))
        try:
            for _ in range(kills):
                await _until(lambda: len(writer.acks) >= 20, RECOVERY_LIMIT)
                failures = writer.failures
                killed = time.monotonic()
                lost = cluster.kill_leader(NODE)
                elected = await asyncio.to_thread(cluster.wait_leader, NODE, other_than=lost)
                election = time.monotonic() - killed
                await _until(functools.partial(_acked_after, writer, killed), RECOVERY_LIMIT)
                run.kills.append(Kill(lost, elected, election, writer.first_ack_after(killed),
                                      writer.failures - failures))
                cluster.restart(lost)  # this thread: a member dies with the thread that started it
                cluster.wait_serving()
                writer.acks.clear()
        finally:
            writer.stopped.set()
            await task
            await store.close()
    finally:
        cluster.cleanup()
    return run


def _cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}"


def table(runs: list[Run]) -> str:
    lines = ["| store | kill | leader lost → elected | new leader (s) | next acked write (s) | failed writes |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        for i, k in enumerate(run.kills, 1):
            lines.append(f"| {run.kind} | {i} | {k.lost} → {k.elected} | {_cell(k.election_s)} | "
                         f"{_cell(k.next_ack_s)} | {k.failed_writes} |")
        acks = [k.next_ack_s for k in run.kills if k.next_ack_s is not None]
        elections = [k.election_s for k in run.kills]
        lines.append(f"| {run.kind} | median / max | | {statistics.median(elections):.2f} / {max(elections):.2f} | "
                     + (f"{statistics.median(acks):.2f} / {max(acks):.2f}" if acks else "-")
                     + f" | session events: {', '.join(run.events) or 'none'} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5, help="leader kills per store (default 5)")
    parser.add_argument("--kinds", default="zk,etcd,oxia", help="stores, comma-separated (default zk,etcd,oxia)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if args.kills < 1 or any(k not in ("zk", "etcd", "oxia") for k in kinds):
        print("store_failover: --kills must be at least 1 and --kinds a list of zk, etcd, oxia", file=sys.stderr)
        raise SystemExit(2)
    load = os.getloadavg()[0]
    runs = [await bench_store(kind, args.kills) for kind in kinds]
    print(f"load {load:.1f} -> {os.getloadavg()[0]:.1f} (2 cores unless said)")
    print(table(runs))
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))


if __name__ == "__main__":
    from metashift.stores.aio import run_loop

    run_loop(main())
