"""Register clients: brokers' metadata clients that read, write, compare-and-set, create and delete
a few shared keys through their agent (``metashift.client``), recording every operation in a
``History`` for the linearizability check. The ZooKeeper-protocol twin is ``zk_registers``."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from metashift.stores.aio import wait_event

from .clients import WRITER_ROOT, ClientLoop
from .history import CAS, CREATE, DELETE, OK, READ, REFUSED, UPDATE, WRITE, History, Operation

#: Where the registers live (under the sandbox's own subtree, left out of the tree's verification).
REGISTER_ROOT = f"{WRITER_ROOT}/registers"
#: Seconds a register operation may take before the client gives up on it (its outcome then
#: unknown for a write; a write held by the gate answers HeldForMigration a little before).
OP_TIMEOUT = 15.0
#: Pause between two operations of one client (seconds, drawn uniformly), and after a failure
#: (doubling up to the second figure): a client that got no answer does not hammer its agent.
PAUSE = (0.005, 0.03)
BACKOFF = (0.2, 2.0)
#: The operations a register client draws, with weights, for each protocol.
GRPC_MIX = ((READ, 40), (WRITE, 15), (CAS, 30), (CREATE, 8), (DELETE, 7))
ZK_MIX = ((READ, 40), (UPDATE, 15), (CAS, 30), (CREATE, 8), (DELETE, 7))


def register_paths(count: int) -> list[str]:
    return [f"{REGISTER_ROOT}/k{i}" for i in range(count)]


@dataclass
class Workload:
    """What one client does next: which key, which operation, with what; it remembers the last
    version it saw of each key, so its compare-and-sets are often current and sometimes stale."""

    name: str
    keys: list[str]
    mix: tuple[tuple[str, int], ...]
    rng: random.Random
    seen: dict[str, int] = field(default_factory=dict)
    count: int = 0

    def next(self) -> tuple[str, str, bytes | None, int | None]:
        self.count += 1
        key = self.rng.choice(self.keys)
        f = self.rng.choices([m[0] for m in self.mix], [m[1] for m in self.mix])[0]
        value = f"{self.name}:{self.count}".encode() if f not in (READ, DELETE) else None
        expected = None
        if f == CAS or (f == DELETE and self.rng.random() < 0.5):
            expected = self.seen.get(key, 0)
        return key, f, value, expected

    def learn(self, op: Operation) -> None:
        """What the answer says about the key's version."""
        if op.status == OK and op.version is not None:
            self.seen[op.key] = op.version
        elif op.status == OK and op.f == DELETE:
            self.seen.pop(op.key, None)

    def pause(self, failures: int) -> float:
        if failures:
            return min(BACKOFF[1], BACKOFF[0] * 2 ** (failures - 1))
        return self.rng.uniform(*PAUSE)


@dataclass
class RegisterClient(ClientLoop):
    """One ``metashift.client`` session of one agent, operating on the registers until stopped."""

    name: str
    node_id: str
    address: str
    history: History
    keys: list[str]
    seed: int
    client: Any = None
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"registers {self.name}")

    async def _run(self) -> None:
        work = Workload(self.name, self.keys, GRPC_MIX, random.Random(self.seed))
        failures = 0
        while not self._stop.is_set():
            key, f, value, expected = work.next()
            op = self.history.invoke(self.name, key, f, value, expected)
            await self._perform(op)
            work.learn(op)
            failures = failures + 1 if op.status not in (OK, REFUSED) else 0
            await wait_event(self._stop, work.pause(failures))

    async def _perform(self, op: Operation) -> None:
        c = self.client
        try:
            if op.f == READ:
                op.ok_get(await c.get(op.key, timeout=OP_TIMEOUT))
            elif op.f == DELETE:
                await c.delete(op.key, op.expected, timeout=OP_TIMEOUT)
                op.ok()
            else:
                expected = -1 if op.f == CREATE else op.expected
                stat = await c.put(op.key, op.value or b"", expected, timeout=OP_TIMEOUT)
                op.ok(stat.version)
        except BaseException as e:  # every way a call can end is recorded, then passed on if fatal
            op.failed(e)
            if not isinstance(e, Exception):
                raise



