"""A stock Pulsar on secured stores (issue 39), the release ``make setup`` fetched (4.2.4: its bookie
gives its Oxia client TLS and a token, 4.0's does not): a bookie and a broker born on a ZooKeeper
that serves TLS only and requires SASL DIGEST-MD5 of every session (their JVMs carry ZooKeeper's
client TLS properties and a JAAS ``Client`` section), with traffic; adopted by their agents by a
rolling restart (``migrate check`` before each step and green after the last), each member keeping
its JAAS section and dropping ``zookeeper.client.secure`` (the front serves plain TCP on loopback,
and completes DIGEST-MD5 with the member against its ``zookeeper.sasl_users_file``, requiring it);
migrated under traffic (``metashift migrate start --wait``) to an Oxia that serves TLS and checks
OIDC tokens; then restarted on Pulsar's own Oxia URL with no agent (the Oxia client's TLS and
token in a properties file, the CA in the JVM's trust store), reading every acknowledged message
back. The settings are ``metashift_lab.pulsar_cluster.secured_stores``'s, as the operator's guide
shows them; no password nor token is in a log, a config or a command line of the run.

``pulsar_run(..., secured=False)`` is the same run on plain stores (its twin, for the wall time
figures: ``FIGURES`` on stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from metashift_lab.pulsar_cluster import PulsarCluster, PulsarNotInstalled, find_release, workload
from metashift_lab.pulsar_cluster.adoption import Adoption
from metashift_lab.pulsar_cluster.restarts import KEEP_ENV
from metashift_lab.pulsar_cluster.scenario import MigrationRun
from metashift_lab.pulsar_cluster.secured_stores import MEMBER_USER, SecuredPulsarStores, TLSFiles
from metashift_lab.servers import oxia_binary
from tests.certs import make_certificates
from tests.harness import require_part

pytestmark = pytest.mark.timeout(1500)

VERSION = "4.2.4"
#: Seconds of traffic before the adoption and after the switch (bounds of a short run).
WARMUP_S = 5.0
AFTER_S = 5.0
KEEP = os.environ.get(KEEP_ENV, "") not in ("", "0")
AUTHENTICATED = f"SASL DIGEST-MD5 authenticated user '{MEMBER_USER}'"


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} secured pulsar: {text}", file=sys.stderr, flush=True)


@dataclass
class Done:
    """A run's cluster, its migration and adoption, its secured stores (none: the plain twin), and
    its wall time: in all and per step."""

    cluster: PulsarCluster
    run: MigrationRun
    adoption: Adoption
    stores: SecuredPulsarStores | None
    migrate_exit: int = -1
    laps: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


@contextlib.asynccontextmanager
async def pulsar_run(work_dir: Path, *, secured: bool = True) -> AsyncIterator[Done]:
    """The whole run (the module's doc), everything still there for the caller to read; then gone."""
    try:
        release = find_release(VERSION)
    except PulsarNotInstalled as e:
        require_part(str(e))
    if oxia_binary() is None:
        require_part("no Oxia server binary: run `make setup` (../shared/tools/oxia) or set METASHIFT_OXIA")
    started = mark = time.monotonic()
    stores = None
    if secured:
        certs = make_certificates(work_dir / "certs")
        stores = SecuredPulsarStores(work_dir / "stores", TLSFiles(certs.ca, certs.server_cert, certs.server_key))
    cluster = PulsarCluster(work_dir / "cluster", release, brokers=1, source="zk", target="oxia", born_direct=True,
                            stores=stores, say=say)  # fmt: skip
    run = MigrationRun(cluster, say)
    run.pip454 = None  # PIP-454's own start aimed at the target is tests/test_pulsar_42.py's
    done = Done(cluster, run, Adoption(cluster, say), stores)

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        done.laps[name] = round(now - mark, 1)
        mark = now

    traffic_running = False
    try:
        await cluster.start()
        lap("stores, agents, cluster born on ZooKeeper")
        # producers and consumers through the rolling restart (a publish waits up to 300 s for the
        # broker to come back); the admin loop from the migration on (with one broker, its calls
        # fail while it restarts)
        await asyncio.to_thread(workload.set_up, run.admin)
        await asyncio.to_thread(run.traffic.start)
        traffic_running = True
        await asyncio.sleep(WARMUP_S)
        await done.adoption.adopt()
        lap("adoption")
        run.admin_loop.start()
        done.migrate_exit = await run.migrate()
        lap("migration")
        await run.finish_traffic(AFTER_S)
        traffic_running = False
        await run.read_evidence()
        lap("traffic accounted")
        if run.phase == "COMPLETED":
            await run.restart_native()
            lap("native restart on Oxia")
        done.seconds = round(time.monotonic() - started, 1)
        print("FIGURES " + json.dumps({"secured": secured, "seconds": done.seconds, "laps": done.laps}),
              file=sys.stderr, flush=True)  # fmt: skip
        yield done
    finally:
        if traffic_running:
            run.admin_loop.stop()
            await asyncio.to_thread(run.traffic.abandon)
        await cluster.cleanup(keep=KEEP)
        if KEEP:
            say(f"kept {work_dir}")


def secrets_found(done: Done) -> list[str]:
    """Where a password or a token of the run shows: the cluster's files (logs, configs, the
    agents' TOML and logs) and the JVMs' command lines."""
    assert done.stores is not None
    wanted = [s.encode() for s in done.stores.secrets()]
    found = []
    for path in done.cluster.work_dir.rglob("*"):
        if path.is_file() and any(s in path.read_bytes() for s in wanted):
            found.append(str(path))
    for process in done.cluster.history:
        if any(s.decode() in word for s in wanted for word in process.command):
            found.append(f"the command line of {process.name}")
    return found


async def test_a_stock_pulsar_on_secured_zookeeper_is_adopted_migrated_to_secured_oxia_and_restarted_there(
    tmp_path: Path,
) -> None:
    async with pulsar_run(tmp_path) as done:
        c, run, f = done.cluster, done.run, done.run.figures
        assert done.stores is not None and c.release.version == VERSION
        # the rolling restart: the bookie, then the broker; the check named each member still on
        # ZooKeeper directly before its step, and went green after the last
        adoption = done.adoption.figures
        assert [s["restarted"] for s in adoption.steps] == ["bookie-1", "broker-1"], adoption.to_dict()
        assert adoption.ok and adoption.ready_after, (adoption.to_dict(), adoption.troubles)
        # behind their agents the members authenticated to the front with their own JAAS section
        for name in ("bookie-1", "broker-1"):
            assert AUTHENTICATED in c.agent(name).log_tail(chars=50_000_000), name
        # the members' settings where they ran: ZooKeeper's TLS, then without it, then Oxia's
        born = [p.command for p in c.history if p.name == "broker-1"]
        assert "-Dzookeeper.client.secure=true" in born[0], born[0]
        assert not any("zookeeper.client.secure" in w for w in born[1]), born[1]
        assert f"-Djava.security.auth.login.config={done.stores.jaas}" in born[1], born[1]
        assert f"-Djavax.net.ssl.trustStore={done.stores.trust_store}" in born[2], born[2]
        bookie_conf = c.confs["bookie-1"].read_text()
        assert f"?configFilePath={done.stores.oxia_client}\n" in bookie_conf, bookie_conf
        # the migration, and everything acknowledged read back
        assert run.phase == "COMPLETED" and done.migrate_exit == 0, (run.phase, run.reason)
        assert f.messages_acknowledged > 100, f.json_fields()
        assert f.messages_acknowledged == f.messages_published == f.messages_received, f.json_fields()
        assert f.messages_lost == 0 and f.messages_failed == 0 and f.ledger_ids_reused == 0, f.json_fields()
        assert f.native_restart == {"store": "oxia", "ok": True, "topics": 9, "messages_read": f.messages_acknowledged}
        # no member restarted by itself, lost its session or logged a metadata error; no admin call failed
        assert f.troubles == [], f.troubles
        assert secrets_found(done) == []
