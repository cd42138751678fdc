"""Register clients that speak ZooKeeper's protocol (kazoo, a client nobody here wrote) to their
agent's ZooKeeper front (``--zk-listen``), as a stock broker does: the same keys and the same kind
of workload as ``registers``, every operation recorded in the same ``History``. Each runs in a
thread of its own (kazoo is synchronous). Needs kazoo: ``pip install 'metashift[bench]'``."""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from .history import CAS, CREATE, DELETE, OK, READ, REFUSED, UPDATE, History, Operation
from .registers import OP_TIMEOUT, ZK_MIX, Workload

#: ZooKeeper session timeout the clients ask for (the agent grants at least 4 s).
SESSION_TIMEOUT = 10.0


def _record_failure(op: Operation, err: BaseException) -> None:
    """A kazoo error, as the history says it: a refusal, nothing written, or unknown."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, OperationTimeoutError

    if isinstance(err, NoNodeError):
        if op.f == READ:
            op.ok_read(None)  # absent
        else:
            op.refused("not_found")
    elif isinstance(err, BadVersionError):
        op.refused("bad_version")
    elif isinstance(err, NodeExistsError):
        op.refused("exists")
    elif op.f == READ or isinstance(err, OperationTimeoutError):
        # OPERATIONTIMEOUT is the agent's answer for a write its gate held past gate.hold_timeout:
        # nothing was written (docs/reference.md, "The ZooKeeper front"); the checker tells whether that is true
        op.not_applied(f"{type(err).__name__}: {err}")
    else:  # CONNECTIONLOSS, an expired session, no answer in time: the write may have happened
        op.unknown(f"{type(err).__name__}: {err}")


@dataclass
class ZkRegisterClient:
    """One kazoo session with one agent's ZooKeeper front, operating on the registers until
    stopped."""

    name: str
    node_id: str
    hosts: str
    history: History
    keys: list[str]
    seed: int
    client: Any = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _abandoned: bool = False

    def connect(self) -> None:
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT, connection_retry={"max_tries": -1})
        self.client.start(timeout=30)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"registers {self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        work = Workload(self.name, self.keys, ZK_MIX, random.Random(self.seed))
        failures = 0
        while not self._stop.is_set() and self.client is not None:
            key, f, value, expected = work.next()
            op = self.history.invoke(self.name, key, f, value, expected)
            self._perform(op)
            if self._abandoned and op.status != OK:
                # its agent was killed under it: the answer (a lost connection) is no answer
                op.unknown(op.error or "its agent was killed")
            work.learn(op)
            failures = failures + 1 if op.status not in (OK, REFUSED) else 0
            self._stop.wait(work.pause(failures))

    def _perform(self, op: Operation) -> None:
        k = self.client
        try:
            if op.f == READ:
                value, stat = k.get_async(op.key).get(timeout=OP_TIMEOUT)
                op.ok_read(value, stat.version)
            elif op.f == CREATE:
                _path, stat = k.create_async(op.key, op.value or b"", include_data=True).get(timeout=OP_TIMEOUT)
                op.ok(stat.version)
            elif op.f in (UPDATE, CAS):
                version = -1 if op.f == UPDATE else op.expected
                op.ok(k.set_async(op.key, op.value or b"", version=version).get(timeout=OP_TIMEOUT).version)
            elif op.f == DELETE:
                k.delete_async(op.key, version=-1 if op.expected is None else op.expected).get(timeout=OP_TIMEOUT)
                op.ok()
            else:
                raise ValueError(f"no ZooKeeper request for {op.f}")
        except Exception as e:
            _record_failure(op, e)

    def stop(self, within: float = 60.0) -> None:
        """Finish the operation in progress, then stop and close the session."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(within)
        self.close()

    def abandon(self) -> None:
        """Its agent is gone: stop without waiting; the operation in flight stays unknown."""
        self._abandoned = True
        self._stop.set()
        threading.Thread(target=self.close, daemon=True).start()

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):  # a session with a dead agent may not close cleanly
                client.stop()
                client.close()
