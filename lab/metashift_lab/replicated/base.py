"""What every replicated store of the lab is: members one can kill, stop and start one at a time,
a URL naming them all, and the leader as the store itself tells it."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from metashift_lab.ports import accepts
from metashift_lab.servers import ServerStartError, _LocalServer

#: Seconds ``wait_serving`` gives a store to elect a leader (and every member to serve) unless told.
ELECTION_LIMIT = 60.0


class StoreMember(_LocalServer):
    """One member of a replicated store. ``start`` returns once its client port listens: a member
    serves only with a quorum, which the store waits for (``ReplicatedStore.wait_serving``)."""

    def _ready(self) -> bool:
        return accepts(self.port)

    def serving(self) -> bool:
        """The member answers clients now (it is part of a quorum that has a leader)."""
        raise NotImplementedError

    def pause(self) -> None:
        """SIGSTOP: the member stops answering, its connections stay open (a stall, not a crash)."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGCONT)


class ReplicatedStore:
    """A store of several members on loopback; subclasses name the members and find the leader."""

    kind = "store"
    members: list[StoreMember]

    def __init__(self, directory: Path | None, prefix: str) -> None:
        self._own_dir = directory is None
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=prefix))
        self.directory.mkdir(parents=True, exist_ok=True)

    # ---- what a client is given ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The store's URL, every member in it (``scheme://h1,h2,h3``)."""
        return self.url_in()

    def url_in(self, order: Sequence[int] | None = None) -> str:
        """The store's URL naming its members in ``order`` (member indices; every member by index
        when ``None``): a client tries the hosts in that order (etcd's first channel, Oxia's
        first assignments)."""
        raise NotImplementedError

    @property
    def hosts(self) -> str:
        """Every member's client address, comma-separated (ZooKeeper's connect string)."""
        return self.hosts_in()

    def hosts_in(self, order: Sequence[int] | None = None) -> str:
        """The client addresses of the members in ``order`` (every member when ``None``), comma-separated."""
        indices = range(len(self.members)) if order is None else order
        return ",".join(f"127.0.0.1:{self.members[i].port}" for i in indices)

    @property
    def name(self) -> str:
        """How logs and progress lines name the store (a single server's ``name``)."""
        return f"{self.kind} cluster of {len(self.members)}"

    @property
    def data_dir(self) -> Path:
        """The directory every member keeps its data and log in (a single server's ``data_dir``)."""
        return self.directory

    # ---- the leader -----------------------------------------------------------------------------

    def leader(self, path: str = "/") -> int:
        """The index of the member that leads now (Oxia: the leader of the shard holding ``path``);
        raises ``LookupError`` while there is none."""
        raise NotImplementedError

    def wait_leader(self, path: str = "/", *, timeout: float = ELECTION_LIMIT, other_than: int | None = None) -> int:
        """The leader's index once there is one (other than ``other_than``, a member just lost) and
        every running member serves."""
        deadline = time.monotonic() + timeout
        last = "no leader"
        while time.monotonic() < deadline:
            try:
                index = self.leader(path)
                if index != other_than and all(m.serving() for m in self.members if m.running):
                    return index
                last = f"member {index} leads" if index == other_than else "a running member does not serve yet"
            except LookupError as e:
                last = str(e)
            time.sleep(0.05)
        raise ServerStartError(f"{self.kind}: no leader within {timeout:.0f}s ({last}); logs in {self.directory}")

    def wait_serving(self, timeout: float = ELECTION_LIMIT) -> None:
        """Until the store has a leader and every running member serves."""
        self.wait_leader(timeout=timeout)

    # ---- life cycle ----------------------------------------------------------------------------

    def start(self, timeout: float = ELECTION_LIMIT) -> None:
        """Start every member, and return once the store serves."""
        try:
            for member in self.members:
                member.start(timeout)
            self.wait_serving(timeout)
        except BaseException:
            self.stop()
            raise

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` (a crash: its data stays for a restart)."""
        self.members[index].kill()

    def kill_leader(self, path: str = "/") -> int:
        """SIGKILL the member that leads (for ``path``, Oxia); its index."""
        index = self.leader(path)
        self.kill(index)
        return index

    def restart(self, index: int, timeout: float = ELECTION_LIMIT) -> None:
        """Start member ``index`` again on its data, and return once it serves."""
        member = self.members[index]
        member.start(timeout)
        deadline = time.monotonic() + timeout
        while not member.serving():
            if time.monotonic() > deadline:
                raise ServerStartError(f"{member.name} did not rejoin within {timeout:.0f}s; log {member.log_path}")
            if not member.running:
                raise ServerStartError(f"{member.name} exited; log {member.log_path}")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return all(m.running for m in self.members)

    def pause(self) -> None:
        """SIGSTOP to every running member: the whole store stalls, its connections open."""
        for member in self.members:
            if member.running:
                member.pause()

    def resume(self) -> None:
        """SIGCONT to every member ``pause`` stopped."""
        for member in self.members:
            if member.running:
                member.resume()

    def stop(self) -> None:
        """Stop every member; the data stays."""
        for member in self.members:
            member.stop()

    def cleanup(self) -> None:
        """Stop, and remove the directory if this made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
