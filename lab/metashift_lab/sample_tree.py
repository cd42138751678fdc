"""Sample data: a Pulsar + BookKeeper shaped metadata tree (see ``shared/PULSAR-METADATA.md``).

``generate(store, topics, seed)`` writes, through the store layer only:

- clusters (with isolation policies and failure domains), tenants, namespaces and their policies
  (JSON, a few KB), local policies, dynamic configuration;
- partitioned-topic metadata, one managed-ledger node per topic (partition) with binary values
  whose versions run from 0 into the thousands, and one to three cursors per topic (binary, a few
  of tens of KB);
- ledger metadata in the hierarchical layout (``/ledgers/00/0000/L0002``), 200 B - 2 KB, small
  versions; ids below the id generator's counter;
- schemas, bundle data, resource quotas, bookie cookies, ``/ledgers/LAYOUT`` and ``INSTANCEID``;
- the id-generator parents ``/ledgers/idgen``, ``/ledgers/idgen-long/HOB-0000000001`` and
  ``/counters/producer-name``, their counters moved past every id in the tree the way BookKeeper
  moves them (children created and deleted: on ZooKeeper a counter *is* its count of child
  creations, on etcd its parent key's count of puts, so there is no cheaper honest way);
  ``ledger_ids`` / ``producer_names`` make them as large as a long-lived cluster's (ZooKeeper:
  ~70k ids/s, 10^8 in ~25 min on two cores; etcd: ~8k ids/s);
- live ephemerals held by ``store``'s session: broker and bookie registrations, the load
  manager's leader, bundle ownership. They last as long as the store stays open.

The same seed gives the same tree, byte for byte and version for version. Parents are written
before their children, in batches (``Store.restore_many``), so a million nodes take
minutes.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from metashift.stores import MetadataStoreError, Restore, Store, paths

#: One node to write: (path, kind, size, version).
Spec = tuple[str, str, int, int]

CHUNK = 2000
CONCURRENT_CHUNKS = 4
BROKERS = 3
BOOKIES = 3
BUNDLES_PER_NAMESPACE = 4
TOPICS_PER_NAMESPACE = 500
#: ``Integer.MAX_VALUE``: from this suffix on BookKeeper hands out 63-bit ids under ``idgen-long``.
MAX_SHORT_LEDGER_IDS = 2**31 - 1


@dataclass
class SampleTree:
    """What ``generate`` wrote."""

    seed: int
    topics: int
    persistent: int = 0
    ephemeral: int = 0
    bytes: int = 0
    writes: int = 0
    max_version: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    counter_writes: int = 0
    """Writes that raised the counters (within ``writes``)."""
    counter_seconds: float = 0.0
    ephemeral_paths: list[str] = field(default_factory=list)

    def text(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items()))
        counters = ", ".join(f"{p} {c}" for p, c in sorted(self.counters.items()))
        return (
            f"wrote {self.persistent} persistent nodes ({self.bytes / 1e6:.1f} MB, {self.writes} writes, "
            f"versions up to {self.max_version}) and {self.ephemeral} ephemerals for {self.topics} topics "
            f"(seed {self.seed})\n  by kind: {kinds}\n  counters (next suffix): {counters} "
            f"({self.counter_writes} writes, {self.counter_seconds:.1f}s)"
        )


def _version(rng: random.Random, kind: str) -> int:
    r = rng.random()
    if kind == "managed-ledger":  # rewritten at every ledger roll-over
        if r < 0.90:
            return rng.randint(0, 5)
        if r < 0.999:
            return rng.randint(5, 100)
        return rng.randint(1000, 3000)
    if kind == "cursor":
        return rng.randint(0, 3) if r < 0.85 else rng.randint(4, 40)
    if kind == "ledger":
        return rng.randint(0, 3)
    if kind in ("policies", "local-policies", "bundle-data"):
        return rng.randint(0, 5)
    if kind == "partitioned-topic":
        return rng.randint(0, 2)
    return 0


def _cursor_size(rng: random.Random) -> int:
    return rng.randint(10_000, 60_000) if rng.random() < 0.01 else rng.randint(40, 400)


def ledger_path(ledger_id: int) -> str:
    """BookKeeper's hierarchical layout: the id as %010d split 2-4-4, 'L' before the last part."""
    s = f"{ledger_id:010d}"
    return f"/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}"


def plan_tree(
    topics: int, seed: int, ledger_ids: int = 0, producer_names: int = 0
) -> tuple[list[Spec], list[tuple[str, str]], dict[str, int]]:
    """The persistent nodes (parents included), the ephemerals (path, kind) and the counters
    (parent -> next suffix at least) of a tree with ``topics`` topics, whose ledger-id generator
    handed out ``ledger_ids`` short ids (at least one per ledger in the tree) and whose
    producer-name counter ``producer_names``."""
    rng = random.Random(seed)
    specs: dict[str, Spec] = {}
    ephemerals: list[tuple[str, str]] = []

    def add(path: str, kind: str, size: int, version: int | None = None) -> None:
        for parent in paths.ancestors(path):
            if parent not in specs:
                specs[parent] = (parent, "dir", 0, 0)
        specs[path] = (path, kind, size, _version(rng, kind) if version is None else version)

    clusters = ["us-east", "us-west"]
    for c in clusters:
        add(f"/admin/clusters/{c}", "cluster", 300)
        add(f"/admin/clusters/{c}/namespaceIsolationPolicies", "policies", 200)
        add(f"/admin/clusters/{c}/failureDomain/domain-a", "policies", 120)
    add("/admin/configuration", "policies", 800)
    add("/admin/topic-policies/global", "dir", 0)
    add("/admin/topic-policies/local", "dir", 0)
    add("/loadbalance/resource-quota/default", "bundle-data", 150)
    add("/ledgers/LAYOUT", "layout", 40, 0)
    add("/ledgers/INSTANCEID", "layout", 36, 0)
    add("/ledgers/available/readonly", "dir", 0, 0)
    add("/namespace", "dir", 0, 0)
    brokers = [f"broker-{i}.example:8080" for i in range(BROKERS)]
    bookies = [f"bookie-{i}.example:3181" for i in range(BOOKIES)]
    for b in bookies:
        add(f"/ledgers/cookies/{b}", "cookie", 120, rng.randint(0, 2))
        ephemerals.append((f"/ledgers/available/{b}", "bookie"))
    for b in brokers:
        add(f"/loadbalance/broker-time-average/{b}", "bundle-data", 300)
        ephemerals.append((f"/loadbalance/brokers/{b}", "broker"))
    ephemerals.append(("/loadbalance/leader", "leader"))

    namespaces = max(1, -(-topics // TOPICS_PER_NAMESPACE))
    tenants = max(1, namespaces // 4)
    ledger_id = 0
    topic = 0
    for ns_index in range(namespaces):
        tenant = f"tenant-{ns_index % tenants}"
        ns = f"ns-{ns_index}"
        if f"/admin/policies/{tenant}" not in specs:
            add(f"/admin/policies/{tenant}", "policies", 250)
        add(f"/admin/policies/{tenant}/{ns}", "policies", rng.randint(1500, 4000))
        add(f"/admin/local-policies/{tenant}/{ns}", "local-policies", 300)
        for k in range(BUNDLES_PER_NAMESPACE):
            lo, hi = k * (1 << 32) // BUNDLES_PER_NAMESPACE, (k + 1) * (1 << 32) // BUNDLES_PER_NAMESPACE
            bundle = f"0x{lo:08x}_0x{min(hi, 0xFFFFFFFF):08x}"
            add(f"/loadbalance/bundle-data/{tenant}/{ns}/{bundle}", "bundle-data", 400)
            ephemerals.append((f"/namespace/{tenant}/{ns}/{bundle}", "ownership"))
        add(f"/namespace/{tenant}/{ns}", "dir", 0, 0)
        in_ns = min(TOPICS_PER_NAMESPACE, topics - topic)
        done = 0
        while done < in_ns:
            partitions = min(in_ns - done, rng.choice((1, 1, 2, 4, 4, 8)))
            name = f"topic-{topic}"
            names = [name] if partitions == 1 else [f"{name}-partition-{i}" for i in range(partitions)]
            if partitions > 1:
                # for this kind the "size" is the partition count: the value is Pulsar's metadata
                add(f"/admin/partitioned-topics/{tenant}/{ns}/persistent/{name}", "partitioned-topic", partitions)
            if rng.random() < 0.1:
                add(f"/schemas/{tenant}/{ns}/{name}", "schema", rng.randint(200, 2000), 0)
            for t in names:
                ml = f"/managed-ledgers/{tenant}/{ns}/persistent/{t}"
                # the very first topic carries the tree's extremes, so that even a small tree has
                # a version in the thousands and a cursor of tens of KB
                first = ml not in specs and topic == 0 and t == names[0]
                add(ml, "managed-ledger", rng.randint(60, 600), rng.randint(1000, 3000) if first else None)
                for _ in range(rng.randint(1, 2)):
                    add(ledger_path(ledger_id), "ledger", rng.randint(200, 2000))
                    ledger_id += 1
                for sub in range(rng.randint(1, 3)):
                    size = rng.randint(10_000, 60_000) if first and sub == 0 else _cursor_size(rng)
                    add(f"{ml}/sub-{sub}", "cursor", size)
                    if rng.random() < 0.5:
                        add(ledger_path(ledger_id), "ledger", rng.randint(200, 2000))
                        ledger_id += 1
            topic += 1
            done += partitions
    add("/ledgers/idgen", "dir", 0, 0)
    add("/ledgers/idgen-long/HOB-0000000001", "dir", 0, 0)
    add("/counters/producer-name", "dir", 0, 0)
    counters = {
        "/ledgers/idgen": max(ledger_id, ledger_ids),
        "/ledgers/idgen-long/HOB-0000000001": 64 + topics // 100,
        "/counters/producer-name": max(16 + topics // 10, producer_names),
    }
    ordered = sorted(specs.values(), key=lambda s: (s[0].count("/"), s[0]))
    return ordered, ephemerals, counters


def value_of(path: str, kind: str, size: int, seed: int) -> bytes:
    """The value of a node: a function of the seed and the node alone (so chunks can be made
    lazily and in any order)."""
    if size == 0:
        return b""
    rng = random.Random(zlib.crc32(path.encode()) ^ (seed * 0x9E3779B1))
    if kind in ("managed-ledger", "cursor"):
        return rng.randbytes(size)  # protobuf ManagedLedgerInfo / ManagedCursorInfo stand-in
    if kind == "ledger":
        body = f"bookkeeperProtoVersion: 3\nquorumSize: 2\nensembleSize: 3\nlength: {rng.randint(0, 1 << 30)}\n"
        return (body + "x" * max(0, size - len(body))).encode()
    if kind == "partitioned-topic":  # Pulsar's PartitionedTopicMetadata
        return json.dumps({"partitions": size, "deleted": False}).encode()
    doc = {"kind": kind, "path": path, "serial": rng.randint(0, 1 << 31)}
    text = json.dumps(doc)
    pad = max(0, size - len(text) - 12)
    doc["padding"] = "p" * pad
    return json.dumps(doc).encode()


async def generate(
    store: Store,
    topics: int,
    seed: int = 0,
    *,
    ephemerals: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
    ledger_ids: int = 0,
    producer_names: int = 0,
) -> SampleTree:
    """Write the tree (module doc) into ``store``, which must not hold it already; its
    ephemerals stay as long as ``store``'s session. ``on_progress(done, total)`` after each batch.
    ``ledger_ids``: the short ledger ids its generator handed out (below 2^31 - 1, where
    BookKeeper switches to ``idgen-long``); ``producer_names``: its producer-name counter."""
    if topics < 1:
        raise ValueError("topics must be at least 1")
    if not 0 <= ledger_ids < MAX_SHORT_LEDGER_IDS:
        raise ValueError(f"ledger_ids must be below {MAX_SHORT_LEDGER_IDS} (BookKeeper's 31-bit ids)")
    if producer_names < 0:
        raise ValueError("producer_names must be at least 0")
    specs, ephemeral_specs, counters = plan_tree(topics, seed, ledger_ids, producer_names)
    out = SampleTree(seed, topics)
    out.by_kind = dict(Counter(kind for _, kind, _, _ in specs))
    total = len(specs)
    done = 0
    # one depth at a time: every parent exists before its children are written
    by_depth: dict[int, list[Spec]] = {}
    for spec in specs:
        by_depth.setdefault(spec[0].count("/"), []).append(spec)
    sem = asyncio.Semaphore(CONCURRENT_CHUNKS)

    async def write(chunk: list[Spec]) -> None:
        nonlocal done
        async with sem:
            items = [Restore(p, value_of(p, kind, size, seed), version) for p, kind, size, version in chunk]
            results = await store.restore_many(items)
        for item, result in zip(items, results, strict=True):
            if isinstance(result, MetadataStoreError):
                raise result
            out.writes += result
            out.bytes += len(item.value)
            out.max_version = max(out.max_version, item.version)
        out.persistent += len(chunk)
        done += len(chunk)
        if on_progress is not None:
            on_progress(done, total)

    for depth in sorted(by_depth):
        level = by_depth[depth]
        await asyncio.gather(*(write(level[i : i + CHUNK]) for i in range(0, len(level), CHUNK)))
    started = time.monotonic()
    out.counter_writes = await store.advance_sequence_counters(counters)
    out.counter_seconds = time.monotonic() - started
    out.writes += out.counter_writes
    for parent in sorted(counters):
        out.counters[parent] = await store.sequence_counter(parent)
    if ephemerals:
        for path, kind in ephemeral_specs:
            holder = paths.parent(path)
            if holder and holder != paths.SEPARATOR and not await store.exists(holder):
                await store.put(holder, b"")
                out.persistent += 1
            await store.put(path, value_of(path, kind, 200, seed), ephemeral=True)
            out.ephemeral_paths.append(path)
        out.ephemeral = len(out.ephemeral_paths)
    return out
