"""Sessions that outlive their process, named honestly (issue 45): a member restarted onto its
agent can leave ephemerals on a session nobody renews any more (Pulsar on etcd does not revoke its
lease on shutdown). ``migrate check`` says how long such a session still has, as far as the store
tells (etcd's lease time-to-live, ZooKeeper's four-letter ``dump`` and ``cons``, Oxia's session
record), and ``migrate check --wait SECONDS`` waits for it to lapse before it answers; a session a
live client renews is not waited out.

The session is a real client's, in a process of its own (a ``metashift`` store opened with a short
session timeout): killed with SIGKILL, it closes nothing, as a crashed or restarted member does.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from metashift.stores.oxia.session_lives import metadata_timeout
from metashift.stores.zookeeper.session_lives import _expiries, _read, _Server
from metashift_lab.cli_runner import run_cli
from tests.agent_processes import Agents, Member, member_cluster

#: Where Pulsar's etcd store left the ephemeral of the issue's refusal.
LEFT = "/counters/producer-name/-2"
#: The session timeout of the process that leaves its session (long enough for a check to see it).
TIMEOUT = 12

_CLIENT = """
import asyncio, sys
from metashift import grpc_env
grpc_env.configure()
from metashift.stores import open_store

async def main(url, path):
    store = await open_store(url)
    parent = path.rpartition("/")[0]
    for i in range(2, len(parent.split("/")) + 1):
        at = "/".join(parent.split("/")[:i])
        if not await store.exists(at):
            await store.put(at, b"")
    stat = await store.put(path, b"{}", ephemeral=True)
    print(stat.owner, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


class Client:
    """A process with a store session of its own and one ephemeral on it."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.owner = 0

    async def start(self, url: str, path: str) -> Client:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _CLIENT, url, path, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE)
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        self.owner = int(line)
        return self

    @property
    def session(self) -> str:
        return f"0x{self.owner:x}"

    async def kill(self) -> None:
        """SIGKILL: nothing closed, the session left to the store's timeout."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()


@pytest.fixture
async def clients() -> AsyncIterator[Callable[[str, str], Awaitable[Client]]]:
    made: list[Client] = []

    async def start(url: str, path: str) -> Client:
        client = Client()
        made.append(client)
        return await client.start(url, path)

    yield start
    for client in made:
        await client.kill()


def _short(url: str) -> str:
    return url + f"?session_timeout={TIMEOUT}"


async def _check(source: str, target: str, *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = await run_cli("migrate", "check", "--source", source, "--target", target, "--json", *args,
                                   within=240)
    assert "Traceback" not in err, err
    return code, json.loads(out), err


def _urls(request: pytest.FixtureRequest, kind: str) -> tuple[str, str]:
    source = str(request.getfixturevalue(f"{kind}_url"))
    target = str(request.getfixturevalue("etcd_url" if kind == "zk" else "zk_url"))
    return source, target


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_a_session_left_by_a_dead_process_is_said_with_its_time_and_waited_out(
    request: pytest.FixtureRequest, kind: str, agents: Agents, members: list[Member],
    clients: Callable[[str, str], Awaitable[Client]],
) -> None:
    source, target = _urls(request, kind)
    await member_cluster(agents, members, source)
    left = await clients(_short(source), LEFT)
    await left.kill()

    code, report, _ = await _check(source, target)
    assert code == 1 and report["ready"] is False, report
    (entry,) = report["bypassing"]
    assert entry["session"] == left.session and entry["paths"] == [LEFT], entry
    problem = next(p for p in report["problems"] if left.session in p)
    assert problem.startswith(f"{LEFT} is an ephemeral of a session no agent holds"), problem
    assert "--wait" in problem and entry["said"] in problem, problem
    print(problem)  # the closing note shows it
    assert entry["alive"] is True and entry["renewed"] is not True, entry
    if kind == "etcd":  # the lease's remaining time to live, and the TTL it was granted
        assert entry["name"] == f"lease {left.session}" and entry["timeout"] == TIMEOUT, entry
        assert entry["expires_in"] is not None and 0 <= entry["expires_in"] <= TIMEOUT, entry
        assert entry["renewed"] is None and "does not tell whether a client still renews" in entry["unknown"]
        assert "expires in" in problem and "unless renewed" in problem
    elif kind == "zk":  # when the server expires it; no connection carries it; no timeout shown
        assert entry["renewed"] is False and entry["expires_in"] is not None, entry
        assert 0 <= entry["expires_in"] <= TIMEOUT + 2, entry  # to within the server's tick
        assert entry["timeout"] is None and "shows no timeout" in entry["unknown"], entry
        assert entry["expires_within"] == 120, entry  # the test server's maxSessionTimeout
        assert "has no connection and expires in" in problem and "unless a client resumes it" in problem
    else:  # its session record: its timeout, not its time left
        assert entry["timeout"] == TIMEOUT and entry["expires_within"] == TIMEOUT, entry
        assert entry["expires_in"] is None and entry["renewed"] is None, entry
        assert "Oxia does not tell when a session last heard from its client" in entry["unknown"], entry
        assert f"lapses at most {TIMEOUT} s after its client's last contact (its timeout" in problem
    assert report["waited"] is None

    code, report, err = await _check(source, target, "--wait", "90")
    assert code == 0 and report["ready"] is True, (report, err)
    assert report["bypassing"] == [] and report["problems"] == []
    waited = report["waited"]
    assert waited["outcome"] == "lapsed" and waited["seconds"] == 90, waited
    assert waited["sessions"] == [entry["name"]] and waited["lapsed"] == [entry["name"]], waited
    assert waited["renewed"] == []
    assert "waiting up to" in err and entry["name"] in err and "lapsed" in err, err
    print(err)


@pytest.mark.parametrize("kind", ["zk", "etcd", "oxia"])
async def test_a_session_a_live_client_renews_is_not_waited_out(
    request: pytest.FixtureRequest, kind: str, agents: Agents, members: list[Member],
    clients: Callable[[str, str], Awaitable[Client]],
) -> None:
    """A member bypassing the agents, alive: ZooKeeper shows its connection at once; an etcd
    lease's time to live goes up; an Oxia session outlives its timeout. The answer names it."""
    source, target = _urls(request, kind)
    await member_cluster(agents, members, source)
    live = await clients(source + "?session_timeout=4", LEFT)

    code, report, err = await _check(source, target, "--wait", "90")
    assert code == 1 and report["ready"] is False, (report, err)
    (entry,) = report["bypassing"]
    assert entry["session"] == live.session and entry["renewed"] is True, entry
    problem = next(p for p in report["problems"] if live.session in p)
    assert problem.startswith(f"{LEFT} is an ephemeral of a session no agent holds"), problem
    assert "it will not lapse" in problem and "--wait" not in problem, problem
    waited = report["waited"]
    assert waited["outcome"] == "renewed" and waited["renewed"] == [entry["name"]], waited
    assert waited["lapsed"] == [], waited
    print(problem)
    if kind == "zk":  # its connection is seen at once: nothing is waited for
        assert "is connected" in problem and waited["sessions"] == [], waited
    # the session is still there, and its client with it
    assert live.proc is not None and live.proc.returncode is None


async def test_check_wait_bad_input(zk_url: str, etcd_url: str) -> None:
    for value in ("-1", "abc", "nan", "inf", "3601"):
        code, out, err = await run_cli("migrate", "check", "--source", zk_url, "--target", etcd_url,
                                       f"--wait={value}", within=60)
        assert code == 2 and out == "", (code, out, err)
        assert len(err.strip().splitlines()) == 1 and "--wait" in err, err


def test_zookeeper_dump_read_whatever_the_servers_time_zone() -> None:
    """The expiry dates of ``dump`` are the server's wall clock in its own zone: only their
    differences are used; a follower's dump lists timeouts instead."""
    dump = ("SessionTracker dump:\nSession Sets (2)/(2):\n1 expire at Tue Dec 01 23:59:58 CET 2026:\n\t0xa\n"
            "2 expire at Wed Dec 02 00:00:10 CET 2026:\n\t0xb\n\t0xc\n"
            "ephemeral nodes dump:\nSessions with Ephemerals (1):\n0xb:\n\t/eph\n"
            "Connections dump:\nConnections Sets (1)/(1):\n1 expire at Wed Dec 02 00:00:11 CET 2026:\n"
            "\tip: /127.0.0.1:47558 sessionId: 0xc\n")
    at = _expiries(dump)
    assert set(at) == {0xA, 0xB, 0xC} and at[0xB] - at[0xA] == 12 and at[0xC] == at[0xB]
    follower = "Global Sessions(2):\n0xb\t30000ms\n0xd\t4000ms\n"
    cons = " /127.0.0.1:1[1](queued=0,recved=2,sent=2,sid=0xd,lop=PING,est=1,to=4000,lcxid=0x1)\n"
    seen = _read([_Server("a:1", cons=cons, dump=dump, conf="maxSessionTimeout=40000\n"),
                  _Server("b:1", cons="", dump=follower, conf=None)])
    assert seen.timeouts == {0xB: 30.0, 0xD: 4.0} and seen.connected == {0xD: ("a:1", 4.0)}
    assert seen.max_timeout == 40.0 and seen.cons_from_all


def test_oxia_session_metadata_read_off_the_wire() -> None:
    # SessionMetadata{timeout_ms: 30000, identity: "x"} as the server stores it
    assert metadata_timeout(b"\x08\xb0\xea\x01\x12\x01x") == 30.0
    assert metadata_timeout(b"\x12\x01x") is None and metadata_timeout(b"\x08") is None
