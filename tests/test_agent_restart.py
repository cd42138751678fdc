"""An agent's restart costs its member nothing (``agent.core.handover``): a ``metashift agent``
process stopped by SIGTERM or killed, and started again with the same state dir, gives a ZooKeeper
client (kazoo: a client nobody here wrote) its session back on every store kind: the same session
id, its ephemerals with their owner, values and versions, past the store session's and the
client's timeouts; a client that sets its watches again on re-attach (ZooKeeper's Java client
does; kazoo drops them on any disconnection) hears of a change made while no agent ran. After
the client's timeout the session fails closed: the client is told it expired and its ephemerals
are gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from metashift.migration.phase import Phase
from metashift.stores import open_store
from metashift.stores.zookeeper.wire import EventType
from metashift_lab.agents import AgentProcess, stop_agents
from metashift_lab.zkraw import RawZk
from tests.agent_processes import Agents, cli, wait_flag
from tests.harness import BACKENDS, eventually, store_kind

#: The agent's store session (ZooKeeper session, etcd lease, Oxia sessions): short, so that a test
#: waits past it, yet longer than a new agent process takes to start on a loaded machine (seen: 5 s).
STORE_TIMEOUT = 12
#: The members' session timeout (Pulsar's default): the restart is well within it.
MEMBER_TIMEOUT = 30.0
#: A member whose session is to expire while no agent runs.
SHORT_MEMBER_TIMEOUT = 6.0


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class WatchedMember:
    """A kazoo client with an ephemeral registration, the session states it went through, and
    the watch events it got."""

    def __init__(self, hosts: str, timeout: float = MEMBER_TIMEOUT) -> None:
        self.client = KazooClient(hosts=hosts, timeout=timeout)
        self.states: list[str] = []
        self.client.add_listener(lambda state: self.states.append(str(state)))


@pytest.fixture
async def watched() -> AsyncIterator[list[WatchedMember]]:
    made: list[WatchedMember] = []
    yield made
    for member in made:
        await asyncio.to_thread(member.client.stop)
        await asyncio.to_thread(member.client.close)


async def _agent(agents: Agents, url: str) -> AgentProcess:
    agent = await agents.start(url, "bookie-1", "bookie", coordinator_enabled=False)
    assert agent.zk_listen
    return agent


@pytest.mark.parametrize("kind", ["sigterm", "sigkill"])
async def test_the_member_keeps_its_session_across_the_agents_restart(
    backend: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path, watched: list[WatchedMember],
) -> None:
    url = f"{request.getfixturevalue(f'{store_kind(backend)}_url')}?session_timeout={STORE_TIMEOUT}"
    agents = Agents(tmp_path / "agents")
    try:
        agent = await _agent(agents, url)
        member = WatchedMember(agent.zk_listen or "")
        watched.append(member)
        await asyncio.to_thread(member.client.start, 30)
        reg = "/ledgers/available/127.0.0.1:3181"
        await asyncio.to_thread(member.client.create, reg, b'{"v":1}', ephemeral=True, makepath=True)
        await asyncio.to_thread(member.client.set, reg, b'{"v":2}')
        session_id = member.client.client_id[0]

        restart = await agent.restart(kind)
        await eventually(lambda: member.client.state == KazooState.CONNECTED, 30, "the member reconnected")
        assert member.client.client_id[0] == session_id, "the member got another session"
        # past the old process's store session's timeout (the member's is counted afresh from its
        # reconnection, as a ZooKeeper server does)
        await asyncio.sleep(STORE_TIMEOUT + 2)
        value, stat = await asyncio.to_thread(member.client.get, reg)
        assert value == b'{"v":2}' and stat.version == 1
        assert stat.ephemeralOwner == session_id
        assert "LOST" not in member.states, f"the member saw its session lost: {member.states}"
        # the store holds it as an ephemeral of the agent's (resumed) session
        direct = await open_store(url)
        try:
            got = await direct.get(reg)
            assert got is not None and got[1].ephemeral and not got[1].created_by_self
            assert got[0] == b'{"v":2}'
        finally:
            await direct.close()
        log = agent.log_path.read_text()
        taken = [json.loads(line) for line in log.splitlines() if "took over from the previous agent" in line]
        assert taken and taken[-1]["sessions_carried"] == 1, taken
        assert restart.new_pid != restart.old_pid
        # the member's session still ends as ZooKeeper's does: closed, its ephemeral goes
        await asyncio.to_thread(member.client.stop)
        direct = await open_store(url)
        try:
            await eventually(lambda: _absent(direct, reg), 15, "the ephemeral gone with the closed session")
        finally:
            await direct.close()
    finally:
        await stop_agents(agents.started)


async def _absent(store: object, path: str) -> bool:
    return await store.get(path) is None  # type: ignore[attr-defined]


async def test_a_restart_after_the_members_timeout_fails_closed(
    zk_url: str, tmp_path: Path, watched: list[WatchedMember],
) -> None:
    """Back after the member's timeout (and within the store session's): the member is told its
    session expired, and its old registration is gone before it could find it as its own."""
    url = f"{zk_url}?session_timeout=30"
    agents = Agents(tmp_path / "agents")
    try:
        agent = await _agent(agents, url)
        member = WatchedMember(agent.zk_listen or "", SHORT_MEMBER_TIMEOUT)
        watched.append(member)
        await asyncio.to_thread(member.client.start, 30)
        reg = "/ledgers/available/127.0.0.1:3181"
        await asyncio.to_thread(member.client.create, reg, b"{}", ephemeral=True, makepath=True)
        await agent.restart("sigkill", down=SHORT_MEMBER_TIMEOUT + 2)
        await eventually(lambda: "LOST" in member.states, 30, f"the member told of its expiry: {member.states}")
        direct = await open_store(url)
        try:
            # deleted by the new agent process (the store session, resumed, would hold it 30 s)
            await eventually(lambda: _absent(direct, reg), 10, "the expired session's registration deleted")
        finally:
            await direct.close()
        log = agent.log_path.read_text()
        taken = [json.loads(line) for line in log.splitlines() if "took over from the previous agent" in line]
        assert taken and taken[-1]["sessions_carried"] == 0 and taken[-1]["sessions_expired"] == 1, taken
    finally:
        await stop_agents(agents.started)


async def test_the_watches_set_again_hear_what_changed_while_no_agent_ran(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    url = f"{request.getfixturevalue(f'{store_kind(backend)}_url')}?session_timeout={STORE_TIMEOUT}"
    agents = Agents(tmp_path / "agents")
    try:
        agent = await _agent(agents, url)
        host, _, port = (agent.zk_listen or "").rpartition(":")
        raw = await RawZk.connect(host, int(port), session_timeout_ms=int(MEMBER_TIMEOUT * 1000))
        await raw.create("/watched", b"1")
        await raw.create("/quiet", b"1")
        await raw.get_data("/watched", watch=True)
        await raw.get_data("/quiet", watch=True)
        session_id, passwd = raw.session_id, raw.passwd
        await agent.restart("sigkill")
        await raw.close_connection()
        direct = await open_store(url)
        try:
            await direct.put("/watched", b"2", expected_version=0)  # as another member would, meanwhile
        finally:
            await direct.close()
        again = await RawZk.connect(host, int(port), session_timeout_ms=int(MEMBER_TIMEOUT * 1000),
                                    session_id=session_id, passwd=passwd)
        try:
            assert again.session_id == session_id
            assert await again.set_watches(0, ["/watched", "/quiet"], [], []) == 0
            events = {(e.type, e.path) for e in [await asyncio.wait_for(again.events.get(), 10)
                                                  for _ in range(2)]}
            # the change is heard; the node that did not change may fire too (what changed while no
            # agent ran is unknown): a spurious event costs a read, a missed one a stale cache
            assert (EventType.NODE_DATA_CHANGED, "/watched") in events
            assert await again.get("/watched") == b"2"
        finally:
            await again.close()
    finally:
        await stop_agents(agents.started)


async def test_a_migration_completed_while_the_agent_was_down_keeps_its_members_session(
    zk_url: str,
    etcd_url: str,
    tmp_path: Path,
    watched: list[WatchedMember],
) -> None:
    """Killed, and back only after the migration went on without it (dropped from the freeze) and
    completed: the member's session is carried from the source, where the agent last served it,
    and its registration is in the target before it is served, value and version kept; the copy
    left in the source goes once no agent is registered there."""
    source_url = f"{zk_url}?session_timeout=60"  # the agent's source session outlives its absence
    agents = Agents(tmp_path / "agents")
    try:
        bookie = await agents.start(
            source_url, "bookie-1", "bookie", participant_timeout=4.0, coordinator_enabled=False
        )
        await agents.start(source_url, "broker-1", "broker", participant_timeout=4.0)
        member = WatchedMember(bookie.zk_listen or "", 60.0)
        watched.append(member)
        await asyncio.to_thread(member.client.start, 30)
        reg = "/ledgers/available/127.0.0.1:3181"
        await asyncio.to_thread(member.client.create, reg, b'{"v":1}', ephemeral=True, makepath=True)
        await asyncio.to_thread(member.client.set, reg, b'{"v":2}')
        session_id = member.client.client_id[0]
        source = await open_store(zk_url)
        target = await open_store(etcd_url)
        try:

            async def migrate() -> None:
                started = await asyncio.to_thread(
                    cli,
                    "migrate",
                    "start",
                    "--source",
                    zk_url,
                    "--target",
                    etcd_url,
                    "--force",
                    "--reason",
                    "bookie-1's agent is restarting",
                )
                assert started.returncode == 0, started.stderr
                flag = await wait_flag(source, Phase.COMPLETED, Phase.FAILED)
                assert flag.phase is Phase.COMPLETED and flag.dropped == ("bookie-1",), flag

            await bookie.restart("sigkill", down=0, while_down=migrate)
            await eventually(lambda: member.client.state == KazooState.CONNECTED, 60, "the member reconnected")
            assert member.client.client_id[0] == session_id, "the member got another session"
            value, stat = await asyncio.to_thread(member.client.get, reg)
            assert value == b'{"v":2}' and stat.version == 1 and stat.ephemeralOwner == session_id
            got = await target.get(reg)
            assert got is not None and got[1].ephemeral and got[0] == b'{"v":2}' and got[1].version == 1, got
            assert "LOST" not in member.states, f"the member saw its session lost: {member.states}"
            log = bookie.log_path.read_text()
            taken = [json.loads(line) for line in log.splitlines() if "took over from the previous agent" in line]
            assert taken and taken[-1]["sessions_carried"] == 1, taken
            # the copy in the source: the agent's own, deleted once no agent is registered there
            await eventually(lambda: _absent(source, reg), 90, "the copy left in the source deleted")
            assert await target.get(reg) is not None
        finally:
            await source.close()
            await target.close()
    finally:
        await stop_agents(agents.started)
