# ruff: noqa: E402  (gRPC's environment is set before the imports that load gRPC)
"""Each secured run beside its unsecured twin, side by side in one run (a benchmark, not a test).

Every server is started here, on loopback, in a temporary directory, and stopped at the end;
certificates, keytabs, passwords and OIDC keys are made here too (``metashift_lab.secured``). Three
parts, each secured run measured beside its plain twin in the same part (the twins alternate when
``--rounds`` is above 1, so that the machine's load falls on both):

1. ``copy``: ``metashift copy --verify --json`` (the CLI in its own process, real Spark
   ``local[*]``) of one generated tree (``metashift_lab.sample_tree``, ``--topics``, no
   ephemerals) from ZooKeeper into Oxia: plain ZooKeeper into an Oxia standalone server and into an
   unsecured Oxia cluster of a coordinator and two data servers (the secured one's exact twin:
   ``SecuredOxia`` with no TLS and no issuer), beside a ZooKeeper serving TLS only, requiring client
   certificates and SASL GSSAPI of every session (a real MIT KDC) into the Oxia cluster serving TLS
   and checking OIDC tokens. The wall time of the command (the interpreter's and Spark's start
   included), and the copy's and verification's own seconds from its report.
2. ``migration``: ZooKeeper -> etcd with two agent processes (``broker-1``, ``bookie-1``), each
   with a ZooKeeper front a kazoo member registered through, as ``tests/test_secured_migration.py``
   runs it: plain ZooKeeper -> plain etcd beside a ZooKeeper serving TLS only and requiring SASL
   DIGEST-MD5 -> an etcd with TLS and ``auth enable``, reached as a user whose role grants only the
   cluster's prefix. From ``migrate start`` (its process launched) to the flag COMPLETED and
   released (read from the source every 0.2 s); the freeze (the agents' logs: the first "write gate
   closed" to the last "write gate open"); ``migrate status --json``'s ``elapsed_s`` and passes.
3. ``store``: the store layer in this process: open a store, one put and one get, close; the
   median (and min, max) of ``--repetitions`` each, plain and secured alternating: ZooKeeper plain
   beside TLS, TLS + DIGEST-MD5, mutual TLS + GSSAPI; etcd plain beside TLS + the prefix-only user;
   the plain Oxia cluster beside TLS + an OIDC token.

    .venv/bin/python bench/secured_vs_plain.py                      # 1,211 nodes (200 topics)
    .venv/bin/python bench/secured_vs_plain.py --topics 2000 --rounds 2
    .venv/bin/python bench/secured_vs_plain.py --parts store --json

The ratio is secured / plain: what the security costs on a loopback machine (no network latency
to hide the handshakes behind). The load average is printed at the start and end of each part.
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ""):  # run as a script: the repository root, so that ``bench`` imports
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metashift import grpc_env

grpc_env.configure()  # before gRPC loads: this process starts local servers (fork + exec)

# isort: split

import argparse
import asyncio
import contextlib
import json
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.agent_members import drop_member, migration_ended, registered_member
from metashift.migration.phase import Phase
from metashift.stores import open_store
from metashift_lab.agents import AgentProcess, freeze_window, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_sync
from metashift_lab.ports import free_port
from metashift_lab.sample_tree import generate
from metashift_lab.secured.certs import LabCertificates, make_certificates
from metashift_lab.secured.etcd import SecuredEtcd
from metashift_lab.secured.kdc import LocalKDC
from metashift_lab.secured.oxia import OidcIssuer, OxiaTLS, SecuredOxia
from metashift_lab.secured.zookeeper import DigestUsers, KerberosServer, LocalSecuredZooKeeper, ZooKeeperTLS
from metashift_lab.servers import EtcdTLS, LocalEtcd, LocalOxia, LocalZooKeeper

PARTS = ("copy", "migration", "store")
#: The longest one copy or one migration may take before the run gives up on it.
COPY_WITHIN = 1800.0
MIGRATION_WITHIN = 1800.0
#: The members registered through the agents' fronts (as tests/test_secured_migration.py).
REGISTRATIONS = {"broker-1": "/loadbalance/brokers/127.0.0.1:8080", "bookie-1": "/ledgers/available/127.0.0.1:3181"}
#: The DIGEST-MD5 user of the secured ZooKeeper (its password is made per run, kept in a 0600 file).
ZK_USER = "metashift"
#: The source's chroot and the etcd prefix of the migrated cluster.
ROOT = "/bench"
ETCD_PREFIX = "/pulsar"


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def _spread(seconds: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(seconds), 4), "min": round(min(seconds), 4),
            "max": round(max(seconds), 4), "n": len(seconds)}


def _ratio(secured: float, plain: float) -> float | None:
    return round(secured / plain, 2) if plain > 0 else None


def _secret_file(path: Path, text: str) -> Path:
    """``text`` in ``path``, created mode 0600 before the secret is written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else "no output"


@contextlib.contextmanager
def _kerberos_env(kdc: LocalKDC) -> Iterator[None]:
    """``KRB5_CONFIG`` naming the lab's KDC in this process's environment (MIT's library reads it;
    the CLI's processes, Spark's workers and the agents inherit it), restored after."""
    saved = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = str(kdc.krb5_conf)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = saved


@dataclass
class Lab:
    """The run's servers, started lazily (each on first use) from the main thread (a local server
    dies with the thread that started it), stopped together at the end."""

    work: Path
    certs: LabCertificates
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _made: dict[str, Any] = field(default_factory=dict)
    zk_password: str = field(default="", repr=False)

    def _start(self, name: str, server: Any) -> Any:
        print(f"# starting {name}", file=sys.stderr, flush=True)
        self.stack.enter_context(server)  # started here, stopped (and its data removed) at the end
        self._made[name] = server
        return server

    def _get(self, name: str) -> Any:
        return self._made.get(name)

    def plain_zk(self) -> LocalZooKeeper:
        made: LocalZooKeeper | None = self._get("plain-zk")
        return made or self._start("plain-zk", LocalZooKeeper(self.work / "plain-zk", heap_mb=256))

    def plain_etcd(self) -> LocalEtcd:
        made: LocalEtcd | None = self._get("plain-etcd")
        return made or self._start("plain-etcd", LocalEtcd(self.work / "plain-etcd"))

    def oxia_standalone(self) -> LocalOxia:
        made: LocalOxia | None = self._get("oxia-standalone")
        return made or self._start("oxia-standalone", LocalOxia(self.work / "oxia-standalone"))

    def plain_oxia(self) -> SecuredOxia:
        made: SecuredOxia | None = self._get("plain-oxia")
        return made or self._start("plain-oxia", SecuredOxia(self.work / "plain-oxia", tls=None, issuer=None))

    def issuer(self) -> OidcIssuer:
        made: OidcIssuer | None = self._get("oidc")
        if made is None:
            made = self._made["oidc"] = OidcIssuer(self.work / "oidc")
        return made

    def secured_oxia(self) -> SecuredOxia:
        made: SecuredOxia | None = self._get("secured-oxia")
        tls = OxiaTLS(self.certs.server_cert, self.certs.server_key, self.certs.ca)
        return made or self._start("secured-oxia", SecuredOxia(self.work / "secured-oxia", tls=tls,
                                                               issuer=self.issuer()))

    def oxia_token_file(self) -> Path:
        """A token of the issuer, valid for the whole run, in a 0600 file (never on a command line)."""
        return self.issuer().write_token(self.work / "oxia.token", lifetime=4 * 3600)

    def kdc(self) -> LocalKDC:
        made: LocalKDC | None = self._get("kdc")
        if made is not None:
            return made
        kdc = LocalKDC(self.work / "kdc")
        self._made["keytabs"] = {"alice": kdc.add_principal("alice"),
                                 "zookeeper/localhost": kdc.add_service("zookeeper", "localhost")}
        self._start("kdc", kdc)
        self.stack.enter_context(_kerberos_env(kdc))  # restored before the KDC stops
        return kdc

    def kerberos_zk(self) -> LocalSecuredZooKeeper:
        made: LocalSecuredZooKeeper | None = self._get("kerberos-zk")
        if made is not None:
            return made
        kdc = self.kdc()
        c = self.certs
        tls = ZooKeeperTLS(c.server_cert, c.server_key, c.ca, client_auth="need", client_cert=c.client_cert,
                           client_key=c.client_key)
        sasl = KerberosServer(kdc, self._made["keytabs"]["zookeeper/localhost"])
        server = LocalSecuredZooKeeper(self.work / "kerberos-zk", tls=tls, sasl=sasl, require_sasl=True)
        return self._start("kerberos-zk", server)

    def kerberos_url(self, root: str = ROOT) -> str:
        kdc = self.kdc()
        return self.kerberos_zk().url_for(root, sasl="GSSAPI", principal=kdc.principal("alice"),
                                          keytab=self._made["keytabs"]["alice"])

    def digest_zk(self) -> LocalSecuredZooKeeper:
        made: LocalSecuredZooKeeper | None = self._get("digest-zk")
        if made is not None:
            return made
        self.zk_password = secrets.token_urlsafe(18)
        _secret_file(self.work / "zk.password", self.zk_password)
        tls = ZooKeeperTLS(self.certs.server_cert, self.certs.server_key, self.certs.ca)
        server = LocalSecuredZooKeeper(self.work / "digest-zk", tls=tls, sasl=DigestUsers({ZK_USER: self.zk_password}),
                                       require_sasl=True)
        return self._start("digest-zk", server)

    def digest_url(self, root: str = ROOT) -> str:
        return self.digest_zk().url_for(root, sasl="DIGEST-MD5", username=ZK_USER,
                                        password_file=self.work / "zk.password")

    def tls_zk(self) -> LocalSecuredZooKeeper:
        made: LocalSecuredZooKeeper | None = self._get("tls-zk")
        tls = ZooKeeperTLS(self.certs.server_cert, self.certs.server_key, self.certs.ca)
        return made or self._start("tls-zk", LocalSecuredZooKeeper(self.work / "tls-zk", tls=tls))

    def secured_etcd(self) -> SecuredEtcd:
        made: SecuredEtcd | None = self._get("secured-etcd")
        tls = EtcdTLS(self.certs.server_cert, self.certs.server_key, self.certs.ca)
        return made or self._start("secured-etcd", SecuredEtcd(tls, self.work / "secured-etcd", ETCD_PREFIX))

    def close(self) -> None:
        self.stack.close()


# ---- 1. copy + verify, ZooKeeper -> Oxia ------------------------------------------------------------


def cli_copy(source: str, target: str) -> dict[str, Any]:
    """``metashift copy --verify --json`` as a user runs it: its wall time and its report's seconds."""
    began = time.monotonic()
    done = run_cli_sync("copy", "--source", source, "--target", target, "--verify", "--json", "--no-progress",
                        timeout=COPY_WITHIN)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"metashift copy exited {done.returncode}: {_last_line(done.stderr)}")
    report = json.loads(done.stdout)
    verified = report.get("verify") or {}
    if not verified.get("ok"):
        raise RuntimeError(f"metashift copy: the verification failed: {verified}")
    return {"wall_s": round(wall, 2), "copy_s": round(float(report["seconds"]), 2),
            "verify_s": round(float(verified.get("seconds") or 0.0), 2), "nodes": report["nodes"]}


async def copy_part(lab: Lab, topics: int, rounds: int) -> dict[str, Any]:
    load = {"start": _load()}
    plain_source, secured_source = f"{lab.plain_zk().url}{ROOT}", lab.kerberos_url()
    trees = {}
    for name, url in (("plain", plain_source), ("secured", secured_source)):
        async with await open_store(url) as store:  # the same tree (one seed) on both sources
            trees[name] = (await generate(store, topics, seed=0, ephemerals=False)).persistent
    standalone, plain_oxia, secured_oxia = lab.oxia_standalone(), lab.plain_oxia(), lab.secured_oxia()
    token_file = lab.oxia_token_file()
    runs: dict[str, list[dict[str, Any]]] = {"standalone": [], "plain": [], "secured": []}
    for r in range(rounds):
        prefix = f"copy-r{r}"
        print(f"# copy round {r + 1} of {rounds}: {trees['plain']} nodes", file=sys.stderr, flush=True)
        # the twins of a round back to back, their order alternating from round to round
        order = [("standalone", plain_source, f"{standalone.url}/{prefix}"),
                 ("plain", plain_source, plain_oxia.url(f"default/{prefix}")),
                 ("secured", secured_source, secured_oxia.url(f"default/{prefix}", token_file=token_file))]
        for name, source, target in order if r % 2 == 0 else reversed(order):
            runs[name].append(cli_copy(source, target))
    load["end"] = _load()

    def median(name: str, key: str) -> float:
        return round(statistics.median(run[key] for run in runs[name]), 2)

    out: dict[str, Any] = {"nodes": trees, "rounds": rounds, "load": load, "runs": runs}
    for name in runs:
        out[name] = {key: median(name, key) for key in ("wall_s", "copy_s", "verify_s")}
    out["ratio"] = {key: _ratio(out["secured"][key], out["plain"][key]) for key in ("wall_s", "copy_s", "verify_s")}
    return out


# ---- 2. a migration with agent processes, ZooKeeper -> etcd ---------------------------------------------------


async def migrate(name: str, source_url: str, target_url: str, work: Path, topics: int,
                  target_settings: dict[str, Any]) -> dict[str, Any]:
    """One migration of the tree with two agents and their members: its times."""
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    async with await open_store(source_url) as store:
        nodes = (await generate(store, topics, seed=0, ephemerals=False)).persistent
    agents = [AgentProcess(node_id, node_id.split("-")[0], work, source_url, hold_timeout=60.0, prepare_timeout=60.0,
                           coordinator_settings={"participant_timeout": 10.0},
                           zk_listen=f"127.0.0.1:{free_port()}", target_settings=dict(target_settings))
              for node_id in REGISTRATIONS]
    members: list[KazooClient] = []
    try:
        await start_agents(agents)
        for agent in agents:
            assert agent.zk_listen is not None
            members.append(await asyncio.to_thread(registered_member, agent.zk_listen, REGISTRATIONS[agent.node_id]))
        print(f"# migration {name}: {nodes} nodes, migrate start", file=sys.stderr, flush=True)
        began = time.monotonic()
        started = await asyncio.to_thread(run_cli_sync, "migrate", "start", "--source", source_url, "--target",
                                          target_url, timeout=600)
        start_s = time.monotonic() - began
        if started.returncode != 0:
            raise RuntimeError(f"migrate start ({name}) exited {started.returncode}: {_last_line(started.stderr)}")
        phase, took = await migration_ended(source_url, began, MIGRATION_WITHIN)
        if phase is not Phase.COMPLETED:
            raise RuntimeError(f"the {name} migration FAILED; agents' logs in {work}")
        status_run = await asyncio.to_thread(run_cli_sync, "migrate", "status", "--source", source_url, "--json",
                                             timeout=600)
        status = json.loads(status_run.stdout) if status_run.returncode == 0 else {}
        window = freeze_window([a.log_tail(chars=50_000_000) for a in agents])
        passes = [{"kind": t.get("kind"), "seconds": t.get("seconds")}
                  for t in ((status.get("copy") or {}).get("timings") or [])]
        return {"nodes": nodes, "start_cmd_s": round(start_s, 2), "completed_s": round(took, 1),
                "freeze_s": round(window[1] - window[0], 2) if window else None,
                "elapsed_s": status.get("elapsed_s"), "passes": passes}
    finally:
        for member in members:
            await asyncio.to_thread(drop_member, member)
        await stop_agents(agents)


async def migration_part(lab: Lab, topics: int, rounds: int) -> dict[str, Any]:
    load = {"start": _load()}
    plain_zk, plain_etcd = lab.plain_zk(), lab.plain_etcd()
    lab.digest_zk()
    secured_etcd = lab.secured_etcd()
    user = secured_etcd.user
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "secured": []}
    for r in range(rounds):
        root = f"/migration-r{r}"
        twins = [
            ("plain", f"{plain_zk.url}{root}", f"{plain_etcd.url}{ETCD_PREFIX}{root}", {}),
            ("secured", lab.digest_url(root), secured_etcd.url(prefix=f"{ETCD_PREFIX}{root}"),
             {"username": user.name, "password_file": str(user.password_file)}),
        ]
        for name, source, target, settings in twins if r % 2 == 0 else reversed(twins):
            runs[name].append(await migrate(name, source, target, lab.work / "agents" / f"{name}-r{r}", topics,
                                            settings))
    load["end"] = _load()
    out: dict[str, Any] = {"rounds": rounds, "load": load, "runs": runs}
    for name in runs:
        out[name] = {key: round(statistics.median(run[key] for run in runs[name]), 2)
                     for key in ("completed_s", "start_cmd_s")}
        freezes = [run["freeze_s"] for run in runs[name] if run["freeze_s"] is not None]
        out[name]["freeze_s"] = round(statistics.median(freezes), 2) if freezes else None
        out[name]["nodes"] = runs[name][0]["nodes"]
    out["ratio"] = {"completed_s": _ratio(out["secured"]["completed_s"], out["plain"]["completed_s"])}
    if out["secured"]["freeze_s"] and out["plain"]["freeze_s"]:
        out["ratio"]["freeze_s"] = _ratio(out["secured"]["freeze_s"], out["plain"]["freeze_s"])
    return out


# ---- 3. the store layer: open, put, get, close -------------------------------------------------------


async def open_put_get_close(url: str, key: str) -> dict[str, float]:
    """Seconds to open the store, to put and get one key, to close it, and in all."""
    began = time.monotonic()
    store = await open_store(url)
    opened = time.monotonic()
    try:
        await store.put(key, b"x" * 100)
        got = await store.get(key)
        assert got is not None and got[0] == b"x" * 100
    finally:
        done = time.monotonic()
        await store.close()
    closed = time.monotonic()
    return {"total": closed - began, "open": opened - began, "put_get": done - opened, "close": closed - done}


async def store_pair(plain: str, secured: str, repetitions: int) -> dict[str, Any]:
    """``repetitions`` of each, alternating (the first of each untimed: the chroot made, the
    interpreter's first TLS context)."""
    key = "/secured-vs-plain"
    await open_put_get_close(plain, key)
    await open_put_get_close(secured, key)
    times: dict[str, list[dict[str, float]]] = {"plain": [], "secured": []}
    for i in range(repetitions):
        pair = [("plain", plain), ("secured", secured)]
        for name, url in pair if i % 2 == 0 else reversed(pair):
            times[name].append(await open_put_get_close(url, key))
    out: dict[str, Any] = {}
    for name, runs in times.items():
        out[name] = _spread([t["total"] for t in runs])
        out[name]["stages_median"] = {stage: round(statistics.median(t[stage] for t in runs), 4)
                                      for stage in ("open", "put_get", "close")}
    return {**out, "ratio": _ratio(out["secured"]["median"], out["plain"]["median"])}


async def store_part(lab: Lab, repetitions: int) -> dict[str, Any]:
    load = {"start": _load()}
    root = "/store-bench"
    plain_zk = f"{lab.plain_zk().url}{root}"
    kinds: list[tuple[str, str, str]] = [
        ("zk TLS", plain_zk, lab.tls_zk().url_for(root)),
        ("zk TLS + DIGEST-MD5", plain_zk, lab.digest_url(root)),
        ("zk mTLS + GSSAPI", plain_zk, lab.kerberos_url(root)),
        ("etcd TLS + RBAC", f"{lab.plain_etcd().url}{ETCD_PREFIX}{root}",
         lab.secured_etcd().url(prefix=f"{ETCD_PREFIX}{root}")),
        ("oxia TLS + OIDC", lab.plain_oxia().url(f"default{root}"),
         lab.secured_oxia().url(f"default{root}", token_file=lab.oxia_token_file())),
    ]
    out: dict[str, Any] = {"repetitions": repetitions, "kinds": {}}
    for name, plain, secured in kinds:
        print(f"# store: {name}", file=sys.stderr, flush=True)
        out["kinds"][name] = await store_pair(plain, secured, repetitions)
    load["end"] = _load()
    out["load"] = load
    return out


# ---- the run -------------------------------------------------------------------------------------------------


async def run(parts: list[str], topics: int, rounds: int, repetitions: int, keep: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="metashift-secured-bench-"))
    lab = Lab(work, make_certificates(work / "certs"))
    report: dict[str, Any] = {"topics": topics, "load": {"start": _load()}}
    try:
        # the parts in the order of the servers they need: the copy's (Kerberos, Oxia) are reused by
        # the store part, the migration's (DIGEST-MD5, etcd) too
        if "copy" in parts:
            report["copy"] = await copy_part(lab, topics, rounds)
        if "store" in parts:
            report["store"] = await store_part(lab, repetitions)
        if "migration" in parts:
            report["migration"] = await migration_part(lab, topics, rounds)
        report["load"]["end"] = _load()
        return report
    finally:
        lab.close()
        if keep:  # the agents' and servers' logs, to read where a run's time went (no server runs)
            print(f"# kept {work}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _row(what: str, secured: float | None, plain: float | None, ratio: float | None, unit: str = "s",
         note: str = "") -> str:
    def cell(v: float | None) -> str:
        if v is None:
            return "-"
        return f"{v * 1000:.1f} ms" if unit == "ms" else f"{v:.2f} s"

    r = f"{ratio:.2f}x" if ratio is not None else "-"
    return f"{what:<64} {cell(secured):>11} {cell(plain):>11} {r:>7}  {note}"


def print_table(report: dict[str, Any]) -> None:
    print(f"{'run':<64} {'secured':>11} {'plain':>11} {'ratio':>7}  load (start/end), notes")
    copy = report.get("copy")
    if copy:
        load = f"{copy['load']['start']}/{copy['load']['end']}"
        what = f"copy --verify zk -> oxia, {copy['nodes']['plain']} nodes"
        print(_row(f"{what}: wall", copy["secured"]["wall_s"], copy["plain"]["wall_s"], copy["ratio"]["wall_s"],
                   note=f"load {load}; plain into a standalone Oxia: {copy['standalone']['wall_s']:.2f} s"))
        print(_row(f"{what}: copy", copy["secured"]["copy_s"], copy["plain"]["copy_s"], copy["ratio"]["copy_s"],
                   note=f"standalone {copy['standalone']['copy_s']:.2f} s"))
        print(_row(f"{what}: verify", copy["secured"]["verify_s"], copy["plain"]["verify_s"],
                   copy["ratio"]["verify_s"], note=f"standalone {copy['standalone']['verify_s']:.2f} s"))
    migration = report.get("migration")
    if migration:
        load = f"{migration['load']['start']}/{migration['load']['end']}"
        what = f"migration zk -> etcd, 2 agents, {migration['plain']['nodes']} nodes"
        print(_row(f"{what}: start -> COMPLETED", migration["secured"]["completed_s"],
                   migration["plain"]["completed_s"], migration["ratio"]["completed_s"], note=f"load {load}"))
        print(_row(f"{what}: freeze", migration["secured"]["freeze_s"], migration["plain"]["freeze_s"],
                   migration["ratio"].get("freeze_s")))
    store = report.get("store")
    if store:
        load = f"{store['load']['start']}/{store['load']['end']}"
        for name, pair in store["kinds"].items():
            spread = f"min/max {pair['secured']['min'] * 1000:.0f}-{pair['secured']['max'] * 1000:.0f} / " \
                     f"{pair['plain']['min'] * 1000:.0f}-{pair['plain']['max'] * 1000:.0f} ms"
            opens = f"open {pair['secured']['stages_median']['open'] * 1000:.0f} / " \
                    f"{pair['plain']['stages_median']['open'] * 1000:.0f} ms"
            print(_row(f"store open+put+get+close, median of {store['repetitions']}: {name}",
                       pair["secured"]["median"], pair["plain"]["median"], pair["ratio"], unit="ms",
                       note=f"load {load}; {opens}; {spread}"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200, help="the generated tree's topics (default 200)")
    parser.add_argument("--rounds", type=int, default=1, help="copies and migrations of each twin (default 1)")
    parser.add_argument("--repetitions", type=int, default=20, help="store opens of each kind and twin (default 20)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run (default all)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory at the end: the logs (and the run's throw-away keys, 0600)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    report = asyncio.run(run(args.parts, args.topics, max(1, args.rounds), max(1, args.repetitions), args.keep))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
