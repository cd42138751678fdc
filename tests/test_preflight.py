"""The pre-flight check (issue 31): ``metashift migrate check`` and ``migrate start`` name every
cluster member that reaches the source around the agents, and every agent that cannot open the
target; ``start`` refuses then (exit 2, nothing written) unless ``--force --reason``.

The agents are ``metashift agent`` processes with their ZooKeeper fronts; the members are kazoo
clients (a client nobody here wrote), each registered as a broker or bookie registers: through its
agent's front, or, for the one left off its agent, on ZooKeeper directly.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from metashift.migration import paths
from metashift.stores import MetadataStore, open_store
from metashift_lab.servers import LocalEtcd, LocalZooKeeper
from tests.agent_processes import BYPASS, FORGOTTEN, Agents, Member, cli, hosts_of, member_cluster
from tests.harness import eventually


async def test_check_names_a_broker_left_off_its_agent_and_start_refuses(
    zk_server: LocalZooKeeper, zk_url: str, etcd_url: str, agents: Agents, members: list[Member],
    open_stores: Any,
) -> None:
    await member_cluster(agents, members, zk_url)
    forgotten = await Member(hosts_of(zk_server, zk_url)).start(
        f"/loadbalance/brokers/{FORGOTTEN}", "/namespace/public/default/0x40000000_0x80000000")
    members.append(forgotten)

    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ready"] is False
    assert any(p.startswith(BYPASS) and forgotten.session in p for p in report["problems"]), report["problems"]
    assert [b["session"] for b in report["bypassing"]] == [forgotten.session]
    assert sorted(report["bypassing"][0]["paths"]) == [
        f"/loadbalance/brokers/{FORGOTTEN}", "/namespace/public/default/0x40000000_0x80000000"]
    by_name = {m["name"]: m for m in report["members"]}
    assert {n: (m["kind"], m["agent"]) for n, m in by_name.items()} == {
        "127.0.0.1:8080": ("broker", "broker-1"), FORGOTTEN: ("broker", None), "127.0.0.1:3181": ("bookie", "bookie-1")}
    checks = {c["name"]: c for c in report["checks"]}
    assert not checks["members"]["ok"] and checks["target"]["ok"] and checks["target access"]["ok"], checks
    assert {a["node_id"]: a["target_open"] for a in report["agents"]} == {
        "broker-1": {"ok": True, "error": None}, "bookie-1": {"ok": True, "error": None}}
    text = cli("migrate", "check", "--source", zk_url, "--target", etcd_url)
    print(text.stdout)  # the closing note shows it
    assert text.returncode == 1 and BYPASS in text.stdout and "ready: no" in text.stdout

    started = cli("migrate", "start", "--source", zk_url, "--target", etcd_url)
    assert started.returncode == 2 and BYPASS in started.stderr, started.stderr
    assert "Traceback" not in started.stderr
    source: MetadataStore = await open_stores(zk_url)
    target: MetadataStore = await open_stores(etcd_url)
    assert await source.get(paths.FLAG) is None and await target.get_children("/") == []
    # --reason without --force, and --force without a reason: refused, nothing written
    for args in (["--reason", "x"], ["--force"], ["--force", "--reason", "  "]):
        refused = cli("migrate", "start", "--source", zk_url, "--target", etcd_url, *args)
        assert refused.returncode == 2 and "--reason" in refused.stderr, refused.stderr
    assert await source.get(paths.FLAG) is None

    # the forgotten broker restarted onto an agent of its own: the check goes green
    await forgotten.stop()
    members.remove(forgotten)
    agent = await agents.start(zk_url, "broker-2", "broker")
    assert agent.zk_listen
    members.append(await Member(agent.zk_listen).start(f"/loadbalance/brokers/{FORGOTTEN}"))
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ready"] is True, report
    assert report["problems"] == [] and report["bypassing"] == []
    assert {m["name"]: m["agent"] for m in report["members"]} == {
        "127.0.0.1:8080": "broker-1", FORGOTTEN: "broker-2", "127.0.0.1:3181": "bookie-1"}
    text = cli("migrate", "check", "--source", zk_url, "--target", etcd_url)
    print(text.stdout)
    assert text.returncode == 0 and "ready: yes" in text.stdout


@pytest.mark.parametrize("kind", ["etcd", "oxia"])
async def test_a_member_of_an_etcd_or_oxia_cluster_left_off_its_agent(
    request: pytest.FixtureRequest, kind: str, zk_url: str, agents: Agents, members: list[Member], open_stores: Any,
) -> None:
    """On etcd a session is a lease: the forgotten broker's registration lives on a lease no agent
    holds (a store of its own, as Pulsar's etcd backend keeps one). On Oxia it is a record of a
    session (per shard) with the forgotten store's client identity, not any agent's."""
    etcd_url = str(request.getfixturevalue(f"{kind}_url"))
    await member_cluster(agents, members, etcd_url)
    forgotten: MetadataStore = await open_stores(etcd_url)
    stat = await forgotten.put(f"/loadbalance/brokers/{FORGOTTEN}", b"{}", ephemeral=True)
    done = cli("migrate", "check", "--source", etcd_url, "--target", zk_url, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    assert [b["session"] for b in report["bypassing"]] == [f"0x{stat.owner:x}"]
    assert report["problems"][0].startswith(BYPASS)
    started = cli("migrate", "start", "--source", etcd_url, "--target", zk_url)
    assert started.returncode == 2 and BYPASS in started.stderr
    source: MetadataStore = await open_stores(etcd_url)
    assert await source.get(paths.FLAG) is None


async def test_an_agent_that_cannot_open_the_target_is_named(
    zk_url: str, fresh_servers: Any, agents: Agents, members: list[Member], tmp_path: Path,
) -> None:
    """Every agent opens the target with its own ``[target]`` credentials; one without them is named
    before anything is held, instead of a PREPARATION that times out."""
    etcd: LocalEtcd = fresh_servers.etcd()
    for args in (("user", "add", "root", "--new-user-password=root-pw"), ("user", "grant-role", "root", "root"),
                 ("role", "add", "pulsar"), ("role", "grant-permission", "pulsar", "--prefix=true", "readwrite", "/"),
                 ("user", "add", "alice", "--new-user-password=alice-pw"), ("user", "grant-role", "alice", "pulsar"),
                 ("auth", "enable")):
        await asyncio.to_thread(subprocess.run, ["etcdctl", "--endpoints", etcd.endpoint, *args], check=True,
                                capture_output=True, env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"})
    target = etcd.url.replace("etcd://", "etcd://alice:alice-pw@")
    await agents.start(zk_url, "broker-1", "broker", target_credentials=("alice", "alice-pw"))
    await agents.start(zk_url, "bookie-1", "bookie")  # no [target] credentials
    done = cli("migrate", "check", "--source", zk_url, "--target", target, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 1, done.stderr
    opened = {a["node_id"]: a["target_open"] for a in report["agents"]}
    assert opened["broker-1"] == {"ok": True, "error": None}, opened
    assert opened["bookie-1"]["ok"] is False and opened["bookie-1"]["error"], opened
    assert any(p.startswith("agent bookie-1 cannot open the target with its own credentials") for p in
               report["problems"]), report["problems"]
    assert "alice-pw" not in done.stdout  # the password is never shown
    # no member is registered through the agents: each agent is said to front nothing
    assert any("agent broker-1 (broker) holds no broker registration" in w for w in report["warnings"])


async def test_check_bad_input(zk_url: str, etcd_url: str, open_stores: Any) -> None:
    for args, why in ((["--target", "nope://x"], "nope"), (["--target", etcd_url, "--agent-timeout", "0"], "seconds")):
        done = cli("migrate", "check", "--source", zk_url, *args)
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, done.stderr
    # a source chroot that does not exist is a mistyped URL: said, not created
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url)
    assert done.returncode == 2 and "chroot does not exist" in done.stderr, done.stderr
    source: MetadataStore = await open_stores(zk_url)
    await source.put("/admin/x", b"x")
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url)
    assert done.returncode == 1 and "no agent is registered" in done.stdout, done.stdout


async def test_agents_that_predate_the_check_are_said_so(zk_url: str, etcd_url: str, open_stores: Any) -> None:
    """A participant record without a version (an older agent) cannot be asked for a dry open: a
    warning, not a refusal; agents of different versions are named."""
    from metashift.migration.participants import ParticipantRecord

    source: MetadataStore = await open_stores(zk_url)
    for node_id, version in (("old", ""), ("new", "0.1.0")):
        record = ParticipantRecord(node_id, "broker", "x", agent_version=version)
        await source.put(paths.PARTICIPANT_PREFIX, record.to_json(), ephemeral=True, sequential=True)
    done = cli("migrate", "check", "--source", zk_url, "--target", etcd_url, "--json", "--agent-timeout", "2")
    report = json.loads(done.stdout)
    assert any("agent old is older than this check" in w for w in report["warnings"]), report
    assert any("different metashift versions" in w for w in report["warnings"]), report
    # "new" says a version but no agent answers for it: named, as an agent that did not answer
    assert any(p.startswith("agent new did not answer the dry open") for p in report["problems"]), report
    assert done.returncode == 1
    await eventually(lambda: _no_requests(zk_url), within=30, what="the check's request is gone")


async def _no_requests(url: str) -> bool:
    async with await open_store(url) as store:
        return await store.get_children(paths.PREFLIGHT) == []


def test_a_source_that_cannot_be_opened_is_the_source_line_in_one_line(etcd_url: str) -> None:
    from metashift_lab.ports import free_port

    source = f"zk://127.0.0.1:{free_port()}/pulsar?timeout=2"
    text = cli("migrate", "check", "--source", source, "--target", etcd_url)
    assert text.returncode == 1, text.stderr
    line = next(x for x in text.stdout.splitlines() if " source " in x)
    assert line.split()[:2] == ["FAILED", "source"]
    assert "cannot be opened from here: no ZooKeeper server answered" in line
    assert text.stdout.rstrip().endswith("ready: no")
    report = json.loads(cli("migrate", "check", "--source", source, "--target", etcd_url, "--json").stdout)
    assert report["ready"] is False
    assert report["checks"][0]["name"] == "source" and report["checks"][0]["status"] == "failed"
    assert "no ZooKeeper server answered" in report["checks"][0]["detail"]
