"""A migration with agent processes between secured stores, there and back: a ZooKeeper serving
TLS only and requiring SASL DIGEST-MD5 of every session, and an etcd with TLS and ``auth enable``
reached as a user whose role grants only the cluster's prefix. Members (kazoo, through the agents'
ZooKeeper fronts) keep their registrations; the pre-flight is green, and a wrong credential is one
line naming what failed, with nothing changed; no password reaches a log or an answer."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metashift.migration.flag import MigrationFlag, read_flag
from metashift.migration.phase import Phase
from metashift.stores import MetadataStore, open_store, parse_url
from metashift_lab.agents import stop_agents
from metashift_lab.secured.etcd import SecuredEtcd
from metashift_lab.servers import EtcdTLS
from tests.agent_processes import Agents, Member, cli, wait_flag
from tests.zk_secured_servers import PASSWORD, DigestZooKeeper, SecuredCerts, digest_zk, secured_certs

__all__ = ["digest_zk", "secured_certs"]  # the session fixtures this module uses

pytestmark = pytest.mark.timeout(900)
#: A migration of a small tree with agent processes on a loaded two-core machine (Spark starts per pass).
MIGRATION_S = 400.0
REGISTRATIONS = {"broker-1": "/loadbalance/brokers/127.0.0.1:8080", "bookie-1": "/ledgers/available/127.0.0.1:3181"}


@pytest.fixture(scope="module")
def secured_etcd(secured_certs: SecuredCerts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredEtcd]:
    certs = secured_certs.certs
    server = SecuredEtcd(EtcdTLS(certs.server_cert, certs.server_key, certs.ca),
                         tmp_path_factory.mktemp("secured-etcd"), "/pulsar")
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args, timeout=600)


async def _flag(url: str, *phases: Phase, epoch: int) -> MigrationFlag:
    async with await open_store(url, watch=False) as store:
        return await wait_flag(store, *phases, within=MIGRATION_S, epoch=epoch)


async def _tree(store: MetadataStore, root: str = "/admin") -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    pending = [root]
    while pending:
        path = pending.pop()
        got = await store.get(path)
        if got is not None:
            out[path] = got[0]
        pending += [f"{path.rstrip('/')}/{c}" for c in await store.get_children(path)]
    return out


async def test_a_migration_between_secured_stores_there_and_back(
    digest_zk: DigestZooKeeper, secured_etcd: SecuredEtcd, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    root = f"/m{abs(hash(request.node.nodeid)) % 10**8}"
    zk_url = digest_zk.url(root)
    etcd_url = secured_etcd.url(prefix=f"/pulsar{root}")
    etcd_public = parse_url(etcd_url).public()
    user = secured_etcd.user
    agents = Agents(tmp_path / "agents")
    members: list[Member] = []
    source = await open_store(zk_url)
    try:
        for i in range(3):
            await source.put(f"/admin/policies/public/ns{i}", json.dumps({"ttl": i}).encode())
        written = await _tree(source)
        settings: dict[str, Any] = {"password_file": str(user.password_file)}
        for node_id in REGISTRATIONS:
            role = node_id.split("-")[0]
            agent = await agents.start(zk_url, node_id, role, target_settings={"username": user.name, **settings})
            assert agent.zk_listen
            members.append(await Member(agent.zk_listen).start(REGISTRATIONS[node_id]))

        # the pre-flight, green: each agent opened the etcd with its own credentials
        check = await _cli("migrate", "check", "--source", zk_url, "--target", etcd_url)
        print(check.stdout)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "every live agent (2) opened the target with its own credentials" in check.stdout
        # one wrong credential: one line naming what failed, and nothing changed
        wrong = await _cli("migrate", "check", "--source", digest_zk.url(root, password_file=str(
            digest_zk.wrong_password_file)), "--target", etcd_url)
        print(wrong.stdout)
        assert wrong.returncode == 1
        source_line = next(x for x in wrong.stdout.splitlines() if " source " in x)
        assert source_line.split()[:2] == ["FAILED", "source"] and "DIGEST-MD5" in source_line, wrong.stdout
        bad_target = etcd_url.replace(str(user.password_file), str(digest_zk.wrong_password_file))
        refused = await _cli("migrate", "check", "--source", zk_url, "--target", bad_target)
        print(refused.stdout)
        assert refused.returncode == 1
        target_line = next(x for x in refused.stdout.splitlines() if " target " in x)
        assert target_line.split()[:2] == ["FAILED", "target"] and user.name in target_line, refused.stdout
        for text in (check.stdout, check.stderr, wrong.stdout, wrong.stderr, refused.stdout, refused.stderr):
            assert PASSWORD not in text and user.password not in text
        assert await read_flag(source) is None

        # there: zk (TLS + SASL) -> etcd (TLS + RBAC)
        started = await _cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
        assert started.returncode == 0, started.stderr
        flag = await _flag(zk_url, Phase.COMPLETED, Phase.FAILED, epoch=1)
        assert flag.phase is Phase.COMPLETED, flag
        assert flag.target_url == etcd_public and user.password.encode() not in flag.to_json()
        async with await open_store(etcd_url) as target:
            assert await _tree(target) == written
            for node_id, path in REGISTRATIONS.items():
                got = await target.get(path)
                assert got is not None and got[1].ephemeral, (node_id, path)
        for member in members:  # the members kept their sessions through the switch
            await member.write("/admin/policies/public/after-there", member.session.encode())

        # and back: etcd -> the ZooKeeper the cluster left (emptied first)
        back = await _cli("migrate", "start", "--source", etcd_url, "--target", zk_url, "--clean-target", "--yes")
        assert back.returncode == 0, back.stderr
        flag = await _flag(etcd_url, Phase.COMPLETED, Phase.FAILED, epoch=2)
        assert flag.phase is Phase.COMPLETED, flag
        async with await open_store(zk_url) as again:
            assert set(await _tree(again)) == set(written) | {"/admin/policies/public/after-there"}
            for path in REGISTRATIONS.values():
                got = await again.get(path)
                assert got is not None and got[1].ephemeral, path
        for agent in agents.started:
            log = agent.log_path.read_text()
            assert PASSWORD not in log and user.password not in log, agent.node_id
    finally:
        for member in members:
            await member.stop()
        await source.close()
        await stop_agents(agents.started)
