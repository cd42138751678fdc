"""The front's backend for a ZooKeeper store (``backend.Backend``): requests that ZooKeeper
answers as they are pass through to it in wire form, on the agent's store session
(``ZooKeeperStore.forward``), and its answers come back with ZooKeeper's own Stat.

What the front must still see, it sees on the way, without a second round trip:

- writes (create, create2, delete, setData, multi) pass the write gate (``WriteGate.try_enter``,
  no task; a write that would have to wait takes the ordinary path, which holds it);
- the ephemerals a session creates, changes and deletes are recorded in the ``SessionRegistry``
  from the request and its answer, so that they die with the session and are re-created in the
  target at PREPARATION;
- watches stay the front's own (registered when the answer comes, fired from the store's
  notifications, moved to the target with the router): the request goes to ZooKeeper without its
  watch flag;
- ``ephemeralOwner`` of an ephemeral that one of the front's sessions owns is that session's id
  (ZooKeeper says the agent's store session), as Curator and Pulsar compare it with their own
  (``owners``).

Everything else — the virtual ``/zookeeper``, the root (its listing shows ``zookeeper``),
containers and TTL nodes, malformed or invalid requests, a store that is not connected — is
declined and takes the ordinary path (``handlers``), and so does every request behind one that
did, so that a session's requests keep their order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from metashift.agent.core.gate import WriteGate
from metashift.agent.core.sequence_floors import SequenceFloors
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.zookeeper import pip454
from metashift.agent.zookeeper.backend import Answer
from metashift.agent.zookeeper.handlers.base import Zxid, is_virtual
from metashift.agent.zookeeper.owners import EphemeralOwners, with_owner
from metashift.agent.zookeeper.session import ZkSession, ZkSessions
from metashift.agent.zookeeper.watches import CHILD, DATA, EXIST, Watches
from metashift.stores import MetadataStore, Stat, paths
from metashift.stores.errors import InvalidPath, MetadataStoreError
from metashift.stores.zookeeper import ZooKeeperStore, wire
from metashift.stores.zookeeper.wire import Err, Op, Reader
from metashift.stores.zookeeper.wire.jute import INT, REPLY, DecodeError

log = logging.getLogger(__name__)

#: ``done(err, body)`` from the store's read loop: ZooKeeper's error code and the answer's body,
#: or ``(None, exception)`` when the connection went first (``ZooKeeperStore.forward``'s callback;
#: spelled here, as the front relies on the store's forwarding methods only).
Done = Callable[[int | None, bytes | BaseException], None]
#: The operations a multi passed through may hold (those ``ZooKeeperStore.forward_multi`` takes).
MULTI_OPS = frozenset({Op.CREATE, Op.CREATE2, Op.DELETE, Op.SET_DATA, Op.CHECK})

_READS = frozenset({Op.EXISTS, Op.GET_DATA, Op.GET_CHILDREN, Op.GET_CHILDREN2})
#: Create modes forwarded: persistent, ephemeral, and their sequential kinds (containers and TTL
#: nodes are kept as persistent nodes by the ordinary path).
_MODES = range(4)
_NO_WATCH = b"\x00"


def _valid(path: str, sequential: bool = False) -> bool:
    """A path the front may forward: valid for every store, not the root, not ZooKeeper's own."""
    if path == paths.SEPARATOR or is_virtual(path) or pip454.is_flag(path):
        return False  # the front's own (PIP-454's flag: ``pip454``)
    try:
        paths.validate(path + "0000000000" if sequential else path)
    except InvalidPath:
        return False
    return True


class PassThroughBackend:
    """The backend of a ZooKeeper store: what ZooKeeper answers as it is passes through to it."""

    def __init__(
        self, store: ZooKeeperStore, gate: WriteGate, registry: SessionRegistry, sessions: ZkSessions,
        watches: Watches, zxid: Zxid, floors: SequenceFloors,
    ) -> None:
        self._store = store
        self.gate = gate
        self.registry = registry
        self.watches = watches
        self.floors = floors
        self.zxid = zxid
        self.owners = EphemeralOwners(store, registry, sessions)

    @property
    def store(self) -> MetadataStore:
        """The ZooKeeper store requests pass through to."""
        return self._store

    def pass_through(self, session: ZkSession, xid: int, op: int, data: bytes, answer: Answer) -> bool:
        """Forward one request packet (header included); ``answer`` gets the framed reply. False:
        not forwarded, nothing done (the caller serves it on the ordinary path)."""
        try:
            if op in _READS:
                # held in the freeze like writes: the ordinary path waits for the gate
                return self.gate.reads_flow() and self._read(session, xid, op, data, answer)
            if op in (Op.CREATE, Op.CREATE2):
                return self._create(session, xid, op, data, answer)
            if op == Op.SET_DATA:
                return self._set_data(xid, data, answer)
            if op == Op.DELETE:
                return self._delete(xid, data, answer)
            if op == Op.MULTI:
                return self._multi(session, xid, data, answer)
        except DecodeError:
            return False  # the ordinary path answers it
        return False

    def flush(self) -> None:
        """Send the requests forwarded so far now: the caller has no more to forward for now."""
        self._store.flush()

    # ---- reads ------------------------------------------------------------------------------------

    def _read(self, session: ZkSession, xid: int, op: int, data: bytes, answer: Answer) -> bool:
        r = Reader(data, 8)
        path = r.string()
        watch = r.bool()
        if not _valid(path):
            return False
        if watch:
            self.watches.want()  # before the read reaches the store: no change after it is missed

        def done(err: int | None, body: bytes | BaseException) -> None:
            if err is None:
                answer(self._reply(xid, Err.CONNECTIONLOSS))
                return
            assert isinstance(body, bytes)
            if watch:
                if op == Op.EXISTS:
                    if err in (Err.OK, Err.NONODE):
                        self.watches.add(DATA if err == Err.OK else EXIST, path, session)
                elif err == Err.OK:
                    self.watches.add(DATA if op == Op.GET_DATA else CHILD, path, session)
            if err == Err.OK and op != Op.GET_CHILDREN:
                body = self.owners.own(body, path)
            answer(self._reply(xid, err, body))

        return self._store.forward(op, path, _NO_WATCH, done)

    # ---- writes -----------------------------------------------------------------------------------

    def _create(self, session: ZkSession, xid: int, op: int, data: bytes, answer: Answer) -> bool:
        req = wire.CreateFields.read(Reader(data, 8))
        sequential = wire.CreateMode.sequential(req.flags)
        if req.flags not in _MODES or not req.acl_count or not _valid(req.path, sequential):
            return False
        parent = req.path[:-1] if req.path.endswith("/") else paths.parent(req.path)
        if parent is not None and is_virtual(parent):
            return False
        if sequential and not self._named_by_zookeeper(parent):
            return False
        ephemeral = wire.CreateMode.ephemeral(req.flags)
        client = session.client

        def created(body: bytes) -> bytes | None:
            if ephemeral:
                path = Reader(body).string()
                self.registry.record_put(client, req.data, True, Stat(path, 0, 0, 0, True, True))
                if client.ended:  # the session ended while the create was in flight
                    self.owners.drop(path)
                    answer(self._reply(xid, Err.SESSIONEXPIRED))
                    return None
                if op == Op.CREATE2:
                    return with_owner(body, session.id)
            return body

        return self._forward_write(
            xid, answer, lambda done: self._store.forward_create(op, req.path, req.data_field, req.flags, done),
            created,
        )

    def _set_data(self, xid: int, data: bytes, answer: Answer) -> bool:
        r = Reader(data, 8)
        path = r.string()
        rest = data[r.pos :]
        value = r.buffer() or b""
        if not _valid(path):
            return False

        def set_(body: bytes) -> bytes:
            self.owners.record_set(path, value, body)
            return self.owners.own(body, path)

        return self._forward_write(xid, answer, lambda done: self._store.forward(Op.SET_DATA, path, rest, done), set_)

    def _delete(self, xid: int, data: bytes, answer: Answer) -> bool:
        r = Reader(data, 8)
        path = r.string()
        rest = data[r.pos :]
        if not _valid(path):
            return False

        def deleted(body: bytes) -> bytes:
            self.registry.record_delete(path)
            return body

        return self._forward_write(xid, answer, lambda done: self._store.forward(Op.DELETE, path, rest, done), deleted)

    def _multi(self, session: ZkSession, xid: int, data: bytes, answer: Answer) -> bool:
        req = wire.MultiRequest.read(Reader(data, 8))
        if not req.ops:
            return False
        for op, sub in req.ops:
            if op not in MULTI_OPS:
                return False
            if op in (Op.CREATE, Op.CREATE2):
                sequential = wire.CreateMode.sequential(sub.flags)
                if sub.flags not in _MODES or not sub.acl or not _valid(sub.path, sequential):
                    return False
                parent = paths.parent(sub.path)
                if parent is not None and is_virtual(parent):
                    return False
                if sequential and not self._named_by_zookeeper(parent):
                    return False
            elif not _valid(sub.path):
                return False
        client = session.client

        def done_all(body: bytes) -> bytes:
            try:
                return self.owners.record_multi(session, client.ended, req.ops, body)
            except (DecodeError, MetadataStoreError) as e:  # not what ZooKeeper answers
                log.warning("zookeeper front: a multi's answer did not parse (%s)", e)
                return body

        return self._forward_write(xid, answer, lambda done: self._store.forward_multi(req.ops, done), done_all)

    def _forward_write(
        self, xid: int, answer: Answer, send: Callable[[Done], bool], on_ok: Callable[[bytes], bytes | None],
    ) -> bool:
        """A write through the gate: ``send`` forwards it; its answer leaves the gate, and an OK
        one counts a zxid and goes through ``on_ok`` (what the front keeps of it; ``None``: it
        answered the client itself). False: not admitted or not sent, nothing done."""
        if not self._admit():
            return False

        def done(err: int | None, body: bytes | BaseException) -> None:
            self.gate.leave()
            if err is None:
                answer(self._reply(xid, Err.CONNECTIONLOSS))
                return
            assert isinstance(body, bytes)
            if err == Err.OK:
                self.zxid.bump()
                kept = on_ok(body)
                if kept is None:
                    return
                if not self.gate.lease_holds():
                    # as on the gate's own paths: the heartbeat lapsed while the write ran, so a
                    # migration may have gone on without this agent and the write landed in the
                    # store the cluster left; its outcome is unknown to the client, never a success
                    answer(self._reply(xid, Err.CONNECTIONLOSS))
                    return
                body = kept
            answer(self._reply(xid, err, body))

        if not send(done):
            self.gate.leave()
            return False
        return True

    def _admit(self) -> bool:
        """Admit a write through the gate now, without a task; False: it would have to wait."""
        store = self.gate.try_enter()
        if store is None:
            return False
        if store is not self._store:
            # the router moved to another store since this backend was chosen (a switch swaps
            # the backend at once, so this is a guard, not a path): the ordinary path serves it
            self.gate.leave()
            return False
        return True

    def _named_by_zookeeper(self, parent: str | None) -> bool:
        """Whether ZooKeeper may name a sequential node under ``parent``: not under a counter a
        migration retired (its floor names it, on the ordinary path: ``SequenceFloors``)."""
        return parent is not None and self.floors.known_free(self._store, parent)

    def _reply(self, xid: int, err: int, body: bytes = b"") -> bytes:
        payload = REPLY.pack(xid, self.zxid.value, err) + body
        return INT.pack(len(payload)) + payload
