"""What ZooKeeper tells of a session that ephemerals live on (``BulkStore.session_lives``), read
from its four-letter commands on each server the URL names (the client protocol tells nothing of
other clients' sessions):

- ``cons``: every connection of that server, with its session id (``sid=``) and negotiated
  timeout (``to=``). A session with a connection is renewed by its client's pings.
- ``dump`` (the leader, or a standalone server): every session with the time its server expires it
  (``N expire at DATE:``, then the ids) unless its client is heard from first. The date is the
  server's, printed to the second in its own time zone: it is read against this store's own
  session, touched just before and due to expire one timeout later, so neither clock nor zone
  matters (to within the server's tick). A follower's ``dump`` lists its sessions' timeouts.
- ``conf``: ``maxSessionTimeout``, the longest timeout any session can have.

What it cannot tell: a session without a connection shows no timeout (only when it expires), and
neither does anything when the commands are not allowed (``4lw.commands.whitelist``); a session
connected to a server the URL does not name looks unconnected.

On a TLS URL the commands go over TLS to the same port (ZooKeeper's Netty ``secureClientPort``
answers them there, the whitelist applying), with the store's TLS context (its client
certificate too, for a server with ``ssl.clientAuth=need``). A server that refuses the TLS
handshake answers nothing, and the result says so (``unknown``).
"""

from __future__ import annotations

import asyncio
import calendar
import re
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..bulk import SessionLife

#: How long one server gets to answer one four-letter command.
ANSWER_SECONDS = 3.0
#: The most of a command's answer read (``dump`` lists every ephemeral path of the ensemble).
MAX_ANSWER = 64 * 1024 * 1024

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}
_EXPIRE_AT = re.compile(r"^\d+ expire at \w{3} (\w{3}) (\d{1,2}) (\d{2}):(\d{2}):(\d{2}) \S+ (\d{4}):$")
_SET_MEMBER = re.compile(r"^\t0x([0-9a-fA-F]+)$")
_GLOBAL_TIMEOUT = re.compile(r"^0x([0-9a-fA-F]+)\t(\d+)ms$")
_CONNECTION = re.compile(r"sid=0x([0-9a-fA-F]+)(?:.*?,to=(\d+))?")
_MAX_TIMEOUT = re.compile(r"^maxSessionTimeout=(\d+)$", re.MULTILINE)
_REFUSED = "is not executed because it is not in the whitelist"


@dataclass
class _Server:
    """What one server answered (``None``: it did not answer the command, or refused it)."""

    address: str
    tls_refused: str | None = None
    """Why the TLS handshake failed, when it did (then nothing was answered)."""
    cons: str | None = None
    dump: str | None = None
    conf: str | None = None


@dataclass
class _Seen:
    """What the servers' answers say, every session by id."""

    connected: dict[int, tuple[str, float | None]] = field(default_factory=dict)
    """session -> (the server it is connected to, its negotiated timeout)."""
    expiries: list[dict[int, int]] = field(default_factory=list)
    """Per ``dump`` that lists session expiries: session -> expiry (seconds, the server's clock)."""
    timeouts: dict[int, float] = field(default_factory=dict)
    max_timeout: float | None = None
    cons_from_all: bool = True
    dump_answered: bool = False
    tls_refused: list[str] = field(default_factory=list)


async def session_lives(
    hosts: Iterable[tuple[str, int]], owners: Iterable[int], *, own: int, own_timeout: float,
    touch: Callable[[], Awaitable[object]], tls: ssl.SSLContext | None = None,
) -> dict[int, SessionLife]:
    """``SessionLife`` of each session id of ``owners``: ``hosts`` are the URL's servers, ``own``
    and ``own_timeout`` this store's session (the reference the expiry dates are read against)
    and ``touch`` a request on it (sent first, so that its expiry is one timeout from now);
    ``tls`` the store's TLS context on a TLS URL."""
    wanted = sorted(set(owners))
    if not wanted:
        return {}
    await touch()
    servers = await asyncio.gather(*(_ask(host, port, tls) for host, port in hosts))
    seen = _read(servers)
    return {owner: _life(owner, seen, own, own_timeout) for owner in wanted}


async def _ask(host: str, port: int, tls: ssl.SSLContext | None) -> _Server:
    server = _Server(f"{host}:{port}")
    refusals: list[str] = []
    server.cons, server.dump, server.conf = await asyncio.gather(
        four_letter(host, port, "cons", tls, refusals), four_letter(host, port, "dump", tls, refusals),
        four_letter(host, port, "conf", tls, refusals))
    server.tls_refused = refusals[0] if refusals else None
    return server


async def four_letter(host: str, port: int, word: str, tls: ssl.SSLContext | None = None,
                      refusals: list[str] | None = None) -> str | None:
    """A four-letter command's answer (over TLS with ``tls``); ``None`` when the server did not
    answer or refused it (a TLS handshake it failed: why, appended to ``refusals``)."""
    try:
        async with asyncio.timeout(ANSWER_SECONDS):
            try:
                if tls is None:
                    reader, writer = await asyncio.open_connection(host, port)
                else:
                    reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host)
            except ssl.SSLError as e:
                if refusals is not None:
                    refusals.append(f"{host}:{port}: TLS handshake failed ({e.reason or type(e).__name__})")
                return None
            try:
                writer.write(word.encode())
                await writer.drain()
                answer = await reader.read(MAX_ANSWER)
                while chunk := await reader.read(MAX_ANSWER):
                    answer += chunk
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return None
    text = answer.decode(errors="replace")
    return None if not text or _REFUSED in text else text


def _read(servers: list[_Server]) -> _Seen:
    seen = _Seen()
    for server in servers:
        if server.tls_refused is not None:
            seen.tls_refused.append(server.tls_refused)
        if server.cons is None:
            seen.cons_from_all = False
        else:
            for line in server.cons.splitlines():
                m = _CONNECTION.search(line)
                if m:
                    timeout = int(m.group(2)) / 1000 if m.group(2) else None
                    seen.connected[int(m.group(1), 16)] = (server.address, timeout)
        if server.dump is not None:
            seen.dump_answered = True
            expiries = _expiries(server.dump)
            if expiries:
                seen.expiries.append(expiries)
            for line in server.dump.splitlines():
                m = _GLOBAL_TIMEOUT.match(line)
                if m:
                    seen.timeouts[int(m.group(1), 16)] = int(m.group(2)) / 1000
        if server.conf is not None:
            m = _MAX_TIMEOUT.search(server.conf)
            if m:
                seen.max_timeout = max(seen.max_timeout or 0.0, int(m.group(1)) / 1000)
    return seen


def _expiries(dump: str) -> dict[int, int]:
    """The session sets of a ``dump``: session -> when it expires (seconds, the server's wall
    clock read as if it were UTC: only differences are used). The connection sets that follow
    list ``ip: ... sessionId: ...`` lines, which are not sessions' own."""
    out: dict[int, int] = {}
    at: int | None = None
    for line in dump.splitlines():
        m = _EXPIRE_AT.match(line)
        if m:
            month = _MONTHS.get(m.group(1))
            at = None if month is None else calendar.timegm(
                (int(m.group(6)), month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))))
            continue
        member = _SET_MEMBER.match(line)
        if member and at is not None:
            out[int(member.group(1), 16)] = at
        elif not line.startswith("\t"):
            at = None
    return out


def _life(owner: int, seen: _Seen, own: int, own_timeout: float) -> SessionLife:
    name = f"session 0x{owner:x}"
    connection = seen.connected.get(owner)
    renewed: bool | None = True if connection else (False if seen.cons_from_all else None)
    timeout = connection[1] if connection else seen.timeouts.get(owner)
    # only a dump that tracks this store's own session too (the leader's, a standalone server's)
    # tells when a session expires, and whether it still exists
    told = [e for e in seen.expiries if own in e]
    alive: bool | None = None
    expires_in: float | None = None
    if told:
        mine = [e[owner] - e[own] + own_timeout for e in told if owner in e]
        alive = bool(mine)
        expires_in = max(0.0, max(mine)) if mine else 0.0
    unknown = []
    if expires_in is None:
        unknown.append("when it expires is not known (the servers did not answer `dump`, or none of them is the "
                       "leader: 4lw.commands.whitelist)" if not seen.dump_answered else
                       "when it expires is not known (no server named in the URL answered `dump` as the leader)")
    if timeout is None and connection is None:
        unknown.append("a session without a connection shows no timeout")
    if renewed is None:
        unknown.append("whether a client is connected on it is not known (a server did not answer `cons`)")
    if seen.tls_refused:
        unknown.append("four-letter commands over TLS refused: " + ", ".join(seen.tls_refused))
    bound = seen.max_timeout
    return SessionLife(owner, name, alive=alive, expires_in=expires_in, timeout=timeout, expires_within=bound,
                       renewed=renewed, within="the servers' maxSessionTimeout" if bound is not None else "",
                       unknown="; ".join(unknown))
