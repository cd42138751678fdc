"""Pulsar's and BookKeeper's ledger-id generators, rewritten line for line from their sources, so
that tests hand out ledger ids exactly as a cluster reading a store would.

- ``PulsarLedgerIdGenerator``: apache/pulsar pulsar-metadata,
  ``org.apache.pulsar.metadata.bookkeeper.PulsarLedgerIdGenerator`` (4.0.7's bytecode: the same
  logic), over a metashift store (whose API is Pulsar's ``MetadataStore``: on etcd, its sequential
  puts are Pulsar's own layout), or on Oxia over ``PulsarOxiaMetadataStore`` (``pulsar_view``);
- ``PulsarOxiaMetadataStore``: the parts of Pulsar's ``OxiaMetadataStore`` (pulsar-metadata 4.0.7)
  the generator calls, on Oxia's raw protocol rather than the metashift store's mapping: a
  sequential put is a blind put of empty bytes on the parent (``/`` at top level), the child named
  ``path + %010d`` of the parent's ``modificationsCount`` that put returned, created with
  ``IfRecordDoesNotExist`` (a taken name is Pulsar's ``BadVersionException``); ``Stat.version`` is
  the record's ``versionId``; parents are made empty (``createParents``); a delete lists the
  children first;
- ``KazooLongLedgerIdGenerator``: apache/bookkeeper ``LongZkLedgerIdGenerator`` over
  ``ZkLedgerIdGenerator``, on a kazoo client (a ZooKeeper server or the agent's ZooKeeper front),
  its caches included: the existence of ``idgen-long`` and the list of ``HOB-`` nodes, once read,
  are kept (what a running bookie or broker does across a migration).
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from metashift.stores import BadVersion, MetadataStore, NotEmpty, NotFound, paths
from metashift.stores.oxia import OxiaStore
from metashift.stores.oxia.proto import client_pb2 as pb

INTEGER_MAX = 2**31 - 1
HOB_PREFIX = "HOB-"
_PARSE_LONG = re.compile(r"[+-]?[0-9]+")


def parse_long(text: str) -> int | None:
    """``Long.parseLong``, ``None`` where it throws ``NumberFormatException``."""
    if not _PARSE_LONG.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def id_from_gen_path(node_name: str, ledger_prefix: str) -> int:
    """``getLedgerIdFromGenPath``: ``Long.parseLong(nodeName.split(ledgerPrefix)[last])``."""
    parts = [p for p in re.split(re.escape(ledger_prefix), node_name)]
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    value = parse_long(parts[-1])
    if value is None:
        raise ValueError(f"cannot extract a ledger id from {node_name}")
    return value


def format_half_id(i: int) -> str:
    return f"{i:010d}"


class PulsarStat:
    """The ``Stat`` fields the generator reads: the path (the sequential name) and version."""

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version


class PulsarOxiaMetadataStore:
    """Pulsar's ``OxiaMetadataStore`` as the generator uses it (see the module doc), over the
    connection (shard routing, key prefix, sessions) of an open metashift Oxia store."""

    def __init__(self, store: OxiaStore) -> None:
        self.store = store
        self.url = store.url

    def _key(self, path: str) -> str:
        return self.store._keys.key(path)

    async def _get(self, path: str) -> Any:
        conn, key = self.store._conn, self._key(path)
        shard = conn.shard_for(key)
        request = pb.ReadRequest(shard=shard.id, gets=[pb.GetRequest(key=key, include_value=False)])
        (answer,) = await conn.streamed(None, "Read", shard, request)
        got = answer.gets[0]
        return None if got.status == pb.KEY_NOT_FOUND else got

    async def _write(self, path: str, put: Any = None, delete: Any = None) -> Any:
        conn = self.store._conn
        shard = conn.shard_for(self._key(path))
        request = pb.WriteRequest(shard=shard.id, puts=[put] if put else [], deletes=[delete] if delete else [])
        answer = await conn.unary(None, "Write", shard, request)
        return answer.puts[0] if put else answer.deletes[0]

    async def exists(self, path: str) -> bool:
        return await self._get(path) is not None

    async def get_children(self, path: str) -> list[str]:
        conn = self.store._conn
        start = self._key(path).rstrip("/") + "/"
        answers = [await conn.streamed(None, "List", s, pb.ListRequest(shard=s.id, start_inclusive=start,
                                                                       end_exclusive=start + "/"))
                   for s in conn.shards]  # fmt: skip
        return [key[len(start):] for shard in answers for answer in shard for key in answer.keys]

    async def _put(self, path: str, value: bytes, expected: int | None, ephemeral: bool = False) -> Any:
        put = pb.PutRequest(key=self._key(path), value=value)
        if expected is not None:
            put.expected_version_id = expected
        if ephemeral:  # AsEphemeralRecord: a record of the client's session on the shard
            sessions = self.store._sessions
            put.session_id = await sessions.id_for(self.store._conn.shard_for(self._key(path)), path)
            put.client_identity = sessions.identity
        got = await self._write(path, put=put)
        if got.status == pb.UNEXPECTED_VERSION_ID:
            raise BadVersion(path)  # Pulsar: UnexpectedVersionId, KeyAlreadyExists -> BadVersionException
        assert got.status == pb.OK, got
        return got.version

    async def _create_parents(self, path: str) -> None:
        parent = paths.parent(path)
        if parent is None or parent == paths.SEPARATOR or await self.exists(parent):
            return
        try:
            await self._put(parent, b"", -1)
        except BadVersion:
            pass
        await self._create_parents(parent)

    async def put(
        self, path: str, value: bytes, expected_version: int | None = None, *, ephemeral: bool = False,
        sequential: bool = False,
    ) -> PulsarStat:
        await self._create_parents(path)
        if sequential:
            parent = paths.parent(path) or paths.SEPARATOR
            counter = await self._put(parent, b"", None)
            path, expected_version = f"{path}{counter.modifications_count:010d}", -1
        version = await self._put(path, value, expected_version, ephemeral)
        return PulsarStat(path, int(version.version_id))

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        if await self.get_children(path):
            raise NotEmpty(path)
        delete = pb.DeleteRequest(key=self._key(path))
        if expected_version is not None:
            delete.expected_version_id = expected_version
        got = await self._write(path, delete=delete)
        if got.status != pb.OK:
            raise NotFound(path) if got.status == pb.KEY_NOT_FOUND else BadVersion(path)


def pulsar_view(store: MetadataStore) -> Any:
    """The store as Pulsar's own ``MetadataStore`` on it sees it: a metashift store keeps Pulsar's
    layout on ZooKeeper and etcd; on Oxia Pulsar's store is modelled on the raw records."""
    return PulsarOxiaMetadataStore(store) if isinstance(store, OxiaStore) else store


class PulsarLedgerIdGenerator:
    """``PulsarLedgerIdGenerator`` (no caches of its own: Pulsar's store answers ``exists`` and
    ``getChildren``; a fresh store has nothing cached)."""

    def __init__(self, store: MetadataStore, ledgers_root: str = "/ledgers") -> None:
        self.store: Any = pulsar_view(store)
        self.ledger_id_gen_path = ledgers_root + "/idgen-long"
        self.short_id_gen_path = ledgers_root + "/idgen"

    async def generate_ledger_id(self) -> int:
        if await self.store.exists(self.ledger_id_gen_path):
            return await self._generate_long_ledger_id()
        return await self._generate_short_ledger_id()

    async def _generate_short_ledger_id(self) -> int:
        if not await self.store.exists(self.short_id_gen_path):
            await self.store.put(self.short_id_gen_path, b"", None)
        ledger_prefix = self.short_id_gen_path + "/ID-"
        stat = await self.store.put(ledger_prefix, b"", -1, ephemeral=True, sequential=True)
        await self.store.delete(stat.path)
        ledger_id = id_from_gen_path(stat.path, ledger_prefix)
        if ledger_id < 0 or ledger_id >= INTEGER_MAX:
            await self.store.put(self.ledger_id_gen_path, b"", None)
            return await self._generate_long_ledger_id()
        return ledger_id

    async def _generate_long_ledger_id(self) -> int:
        ledger_prefix = self.ledger_id_gen_path + "/" + HOB_PREFIX
        high_order_directories = await self.store.get_children(self.ledger_id_gen_path)
        numbers = [n for n in (parse_long(t.replace(HOB_PREFIX, "")) for t in high_order_directories) if n is not None]
        if not numbers:
            return await self._create_hob_path_and_generate_id(ledger_prefix, 1)
        high_bits = max(numbers)
        ledger_id = await self._generate_long_ledger_id_low_bits(ledger_prefix, high_bits)
        if len(high_order_directories) > 3:
            for high in sorted(numbers)[:-3]:
                with contextlib.suppress(Exception):
                    await self.store.delete(ledger_prefix + format_half_id(high), 0)
        return ledger_id

    async def _create_hob_path_and_generate_id(self, ledger_prefix: str, hob: int) -> int:
        with contextlib.suppress(BadVersion):  # other threads or nodes may create it at once
            await self.store.put(ledger_prefix + format_half_id(hob), b"", None)
        return await self._generate_long_ledger_id()

    async def _generate_long_ledger_id_low_bits(self, ledger_prefix: str, high_bits: int) -> int:
        high_path = ledger_prefix + format_half_id(high_bits)
        result = await self.generate_ledger_id_impl(high_path + "/ID-")
        if 0 <= result < INTEGER_MAX:
            return (high_bits << 32) | result
        return await self._create_hob_path_and_generate_id(ledger_prefix, high_bits + 1)

    async def generate_ledger_id_impl(self, prefix: str) -> int:
        stat = await self.store.put(prefix, b"", -1, ephemeral=True, sequential=True)
        await self.store.delete(stat.path)
        return id_from_gen_path(stat.path, prefix)


class KazooLongLedgerIdGenerator:
    """BookKeeper's ``LongZkLedgerIdGenerator`` over ``ZkLedgerIdGenerator`` (hierarchical layout),
    on a kazoo client, with its caches."""

    def __init__(self, zk: Any, ledgers_path: str = "/ledgers") -> None:
        self.zk = zk
        self.ledger_id_gen_path = ledgers_path + "/idgen-long"
        self.short_prefix = ledgers_path + "/idgen/ID-"
        self.high_order_directories: list[str] | None = []
        self.status: bool | None = None  # UNKNOWN, then PRESENT (True) or NOT_PRESENT (False)

    def generate_ledger_id(self) -> int:
        if not self._ledger_id_gen_path_present():
            ledger_id = self._zk_generate(self.short_prefix)
            if ledger_id is not None:
                return ledger_id
            # LedgerIdOverflowException: create idgen-long (full path, optimistic), then long ids
            with contextlib.suppress(Exception):
                self.zk.create(self.ledger_id_gen_path, b"", makepath=True)
            self.status = True
        return self._generate_long_ledger_id()

    def _ledger_id_gen_path_present(self) -> bool:
        if self.status is None:
            self.status = self.zk.exists(self.ledger_id_gen_path) is not None
        return self.status

    def _zk_generate(self, ledger_prefix: str) -> int | None:
        """``ZkLedgerIdGenerator.generateLedgerIdImpl``: ``None`` for LedgerIdOverflowException."""
        path = self.zk.create(ledger_prefix, b"", ephemeral=True, sequence=True, makepath=True)
        ledger_id = id_from_gen_path(path, ledger_prefix)
        self.zk.delete(path)
        if ledger_id < 0 or ledger_id >= INTEGER_MAX:
            return None
        return ledger_id

    def _generate_long_ledger_id(self) -> int:
        ledger_prefix = self.ledger_id_gen_path + "/" + HOB_PREFIX
        refreshed = False
        if self.high_order_directories is None:
            refreshed = True
            self.high_order_directories = self.zk.get_children(self.ledger_id_gen_path)
        numbers = [n for n in (parse_long(t.replace(HOB_PREFIX, "")) for t in self.high_order_directories)
                   if n is not None]  # fmt: skip
        if not numbers:
            if not refreshed:
                self.high_order_directories = None
                return self._generate_long_ledger_id()
            return self._create_hob_path_and_generate_id(ledger_prefix, 1)
        high_bits = max(numbers)
        low = self._zk_generate(ledger_prefix + format_half_id(high_bits) + "/ID-")
        if len(self.high_order_directories) > 3:
            self.high_order_directories = None
            for high in sorted(numbers)[:-3]:
                with contextlib.suppress(Exception):
                    self.zk.delete(ledger_prefix + format_half_id(high), version=0)
        if low is None:
            return self._create_hob_path_and_generate_id(ledger_prefix, high_bits + 1)
        return (high_bits << 32) | low

    def _create_hob_path_and_generate_id(self, ledger_prefix: str, hob: int) -> int:
        from kazoo.exceptions import NodeExistsError

        with contextlib.suppress(NodeExistsError):
            self.zk.create(ledger_prefix + format_half_id(hob), b"")
        self.high_order_directories = None
        return self._generate_long_ledger_id()


# ---- what the ledger-id tests share: BookKeeper's layout under /ledgers, ids handed out

#: the default ledgers root (zkLedgersRootPath)
ROOT = "/ledgers"
HOB_1 = "/ledgers/idgen-long/HOB-0000000001"
LAYOUT_HIERARCHICAL = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:2\n"
LAYOUT_LEGACY = b"2\norg.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory:1\n"


async def issue_ids(store: MetadataStore, count: int) -> list[int]:
    """``count`` ledger ids handed out on ``store`` as Pulsar's generator hands them out."""
    generator = PulsarLedgerIdGenerator(store, ROOT)
    return [await generator.generate_ledger_id() for _ in range(count)]
