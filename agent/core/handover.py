"""What an agent hands to its next incarnation: the state file.

A sidecar restarts more often than the member it serves (an upgrade, a node drained, an OOM
kill). For the member to notice nothing, the next process must answer its ZooKeeper session id,
with the same ephemerals, owner and watches, as a ZooKeeper ensemble does when one of its servers
restarts. What that takes survives the process here, in ``<state_dir>/<node_id>.state`` (mode
0600, on a tmpfs such as ``/run/metashift``: never in the store, where it would be a secret shared
with everyone who reads the tree):

- the handle of every store session the agent holds (``metashift.stores.handover``): ZooKeeper's
  session id and password, etcd's lease id, Oxia's identity and sessions; the members' ephemerals
  are ephemerals of those sessions;
- every ZooKeeper client session: its id, password and timeout, and the ephemerals it owns;
- the agent's participant record in each store (so a restart is the same participant);
- the host's boot id: a state file is only good on the boot that wrote it (``CLOCK_MONOTONIC``, in
  which the times are kept, starts again at every boot; another host has another boot id).

The file is a journal: one JSON line per change, written with one ``write`` before the change is
answered to the client (a SIGKILL loses no acknowledged change: the kernel has the bytes), and
rewritten whole when it has grown. Beside it, ``<node_id>.beat`` holds the time of the agent's
last tick (every ``TICK`` seconds): a session the successor finds is alive only if its timeout has
not passed since then, as ZooKeeper counts a session's timeout from the last packet the server had.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metashift.stores import SessionHandle

log = logging.getLogger(__name__)

#: Seconds between two writes of the beat file.
TICK = 0.5
#: Format of the state file this agent writes: 2 added ``serving``, which an agent of format 1
#: would read as a torn line (a downgrade then fails closed instead: it ignores the file).
FORMAT = 2
#: Formats it reads (a file of another is ignored: its sessions fail closed).
READABLE_FORMATS = frozenset({1, 2})
#: The journal is rewritten whole when it has this many more lines than live records.
COMPACT_AFTER = 2000
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def boot_id() -> str:
    """This boot of this host (a restart elsewhere or after a reboot finds another one)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


@dataclass
class CarriedSession:
    """A client session as the state file keeps it: a ZooKeeper one (``zk_id``) is carried over;
    a gRPC one (its stream ends with the process) only tells the successor what to delete."""

    id: str
    """The agent's client session id (``SessionRegistry``)."""
    name: str
    timeout: float
    zk_id: int = 0
    zk_passwd: bytes = field(default=b"", repr=False)
    ephemerals: set[str] = field(default_factory=set)
    """The real paths of the ephemerals it owns."""


@dataclass
class HandedState:
    """Everything a predecessor left in the state file, as read back."""

    node_id: str
    boot_id: str
    beat: float
    """``time.monotonic()`` of the predecessor's last tick."""
    stores: dict[str, SessionHandle] = field(default_factory=dict)
    """Public store URL -> the handle of the predecessor's session there."""
    sessions: dict[str, CarriedSession] = field(default_factory=dict)
    participants: dict[str, str] = field(default_factory=dict)
    """Public store URL -> the path of the predecessor's participant record there."""
    orphans: set[str] = field(default_factory=set)
    """Ephemerals of sessions that ended without their deletion (the agent stopped meanwhile):
    the successor deletes those its resumed store session still holds."""
    serving: str | None = None
    """The public URL of the store the predecessor served its members from (where their
    ephemerals are as they last saw them); ``None`` in a file that does not say."""

    def age(self) -> float:
        """Seconds since the predecessor's last tick."""
        return max(0.0, time.monotonic() - self.beat)


class StateFile:
    """The journal of one agent's state file; see the module."""

    def __init__(self, directory: Path, node_id: str) -> None:
        stem = _UNSAFE.sub("_", node_id) or "agent"
        self.directory = directory
        self.path = directory / f"{stem}.state"
        self.beat_path = directory / f"{stem}.beat"
        self.node_id = node_id
        self._fd: int | None = None
        self._beat_fd: int | None = None
        self._lines = 0
        self.state = HandedState(node_id, boot_id(), time.monotonic())

    # ---- reading what a predecessor left ---------------------------------------------------------

    def load(self) -> HandedState | None:
        """The state a predecessor left, or ``None`` (none, unreadable, another boot or agent:
        logged, and nothing of it is carried)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read the state file %s (%s): no session is carried over", self.path, e.strerror)
            return None
        try:
            beat = float(self.beat_path.read_text().strip() or "0")
        except (OSError, ValueError):
            beat = 0.0
        state: HandedState | None = None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if state is None:
                    state = self._header(entry, beat)
                    if state is None:
                        return None
                else:
                    _apply(state, entry)
            except (ValueError, KeyError, TypeError) as e:
                # a torn last line (the host lost power mid-write) ends the journal there
                log.warning("state file %s: line %d unreadable (%s); the journal ends before it", self.path, number, e)
                break
        return state

    def _header(self, entry: dict[str, Any], beat: float) -> HandedState | None:
        if entry.get("t") != "agent" or entry.get("format") not in READABLE_FORMATS:
            log.warning("state file %s is not of format %s: no session is carried over", self.path,
                        " or ".join(str(f) for f in sorted(READABLE_FORMATS)))
            return None
        if entry.get("node_id") != self.node_id:
            log.warning("state file %s belongs to agent %r, not %r: no session is carried over",
                        self.path, entry.get("node_id"), self.node_id)
            return None
        if not entry.get("boot_id") or entry.get("boot_id") != boot_id():
            log.info("state file %s was written on another boot or host: no session is carried over", self.path)
            return None
        return HandedState(self.node_id, str(entry["boot_id"]), beat)

    # ---- writing ---------------------------------------------------------------------------------

    def open(self, state: HandedState) -> None:
        """Start this process's journal with ``state`` (what it carried over; empty when nothing):
        written to a new file first, then renamed over the old one, so a crash meanwhile leaves
        the predecessor's file whole."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.state = state
        self._rewrite()
        self._beat_fd = os.open(self.beat_path, os.O_WRONLY | os.O_CREAT, 0o600)
        self.tick()

    def _rewrite(self) -> None:
        state = self.state
        lines = [{"t": "agent", "format": FORMAT, "node_id": state.node_id, "boot_id": boot_id(), "pid": os.getpid()}]
        lines += [{"t": "store", "url": url, "handle": h.to_json()} for url, h in state.stores.items()]
        lines += [{"t": "participant", "url": url, "path": p} for url, p in state.participants.items()]
        if state.serving is not None:
            lines.append({"t": "serving", "url": state.serving})
        lines += [{"t": "orphan", "path": p} for p in sorted(state.orphans)]
        for s in state.sessions.values():
            lines.append(_open_entry(s))
            lines += [{"t": "own", "sid": s.id, "path": p} for p in sorted(s.ephemerals)]
        tmp = self.path.with_name(self.path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, "".join(json.dumps(x) + "\n" for x in lines).encode())
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if old is not None:
            os.close(old)
        self._lines = len(lines)

    def _append(self, entry: dict[str, Any]) -> None:
        _apply(self.state, entry)
        if self._fd is None:
            return
        try:
            os.write(self._fd, (json.dumps(entry) + "\n").encode())
        except OSError as e:  # a full tmpfs: the next agent carries less, the member is told so then
            log.error("cannot write the state file %s (%s): sessions may not survive a restart", self.path, e.strerror)
            return
        self._lines += 1
        live = 2 + len(self.state.stores) + len(self.state.participants) + len(self.state.orphans) + sum(
            1 + len(s.ephemerals) for s in self.state.sessions.values())
        if self._lines > live + COMPACT_AFTER:
            self._rewrite()

    def tick(self) -> None:
        """Write the beat file: the agent is alive now."""
        if self._beat_fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self._beat_fd, f"{time.monotonic():020.6f}\n".encode(), 0)

    def close(self) -> None:
        """The last tick; the journal stays for the successor."""
        self.tick()
        for fd in (self._fd, self._beat_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._beat_fd = None

    def discard(self) -> None:
        """Nothing to hand over (every session ended): remove the files."""
        self.close()
        for path in (self.path, self.beat_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    # ---- the changes -----------------------------------------------------------------------------

    def store(self, url: str, handle: SessionHandle | None) -> None:
        """The session held on the store ``url`` (public form) is ``handle`` now."""
        current = self.state.stores.get(url)
        if handle == current:
            return
        if handle is None:
            self._append({"t": "unstore", "url": url})
        else:
            self._append({"t": "store", "url": url, "handle": handle.to_json()})

    def serving(self, url: str) -> None:
        """The members are served from the store ``url`` (public form) from now on."""
        if self.state.serving != url:
            self._append({"t": "serving", "url": url})

    def participant(self, url: str, path: str) -> None:
        if self.state.participants.get(url) != path:
            self._append({"t": "participant", "url": url, "path": path})

    def opened(self, session: CarriedSession) -> None:
        self._append(_open_entry(session))

    def ended(self, session_id: str, left: list[str] | None = None) -> None:
        """The session ended; ``left``: its ephemerals that could not be deleted."""
        if session_id in self.state.sessions:
            self._append({"t": "end", "sid": session_id, "left": sorted(left or [])})

    def cleaned(self, path: str) -> None:
        """An orphan deleted (or found gone)."""
        if path in self.state.orphans:
            self._append({"t": "cleaned", "path": path})

    def owned(self, session_id: str, path: str) -> None:
        session = self.state.sessions.get(session_id)
        if session is not None and path not in session.ephemerals:
            self._append({"t": "own", "sid": session_id, "path": path})

    def dropped(self, session_id: str, path: str) -> None:
        session = self.state.sessions.get(session_id)
        if session is not None and path in session.ephemerals:
            self._append({"t": "drop", "sid": session_id, "path": path})


def _open_entry(s: CarriedSession) -> dict[str, Any]:
    return {"t": "open", "sid": s.id, "name": s.name, "timeout": s.timeout, "zk_id": s.zk_id,
            "zk_passwd": base64.b64encode(s.zk_passwd).decode()}


def _apply(state: HandedState, entry: dict[str, Any]) -> None:
    """One journal line applied to ``state``."""
    kind = entry["t"]
    if kind == "store":
        state.stores[str(entry["url"])] = SessionHandle.from_json(entry["handle"])
    elif kind == "unstore":
        state.stores.pop(str(entry["url"]), None)
    elif kind == "participant":
        state.participants[str(entry["url"])] = str(entry["path"])
    elif kind == "serving":
        state.serving = str(entry["url"])
    elif kind == "open":
        sid = str(entry["sid"])
        state.sessions[sid] = CarriedSession(
            sid, str(entry["name"]), float(entry["timeout"]), int(entry["zk_id"]),
            base64.b64decode(entry["zk_passwd"]))
    elif kind == "end":
        state.sessions.pop(str(entry["sid"]), None)
        state.orphans.update(str(p) for p in entry.get("left", []))
    elif kind == "orphan":
        state.orphans.add(str(entry["path"]))
    elif kind == "cleaned":
        state.orphans.discard(str(entry["path"]))
    elif kind == "own":
        session = state.sessions.get(str(entry["sid"]))
        if session is not None:
            session.ephemerals.add(str(entry["path"]))
    elif kind == "drop":
        session = state.sessions.get(str(entry["sid"]))
        if session is not None:
            session.ephemerals.discard(str(entry["path"]))
    else:
        raise ValueError(f"unknown entry {kind!r}")
