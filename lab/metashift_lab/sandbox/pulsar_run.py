"""``metashift sandbox --pulsar``: the migration of a real Apache Pulsar cluster on this machine.

The stock release ``make setup`` fetched (``metashift_lab.pulsar_cluster``): the source and target
stores, a bookie and two brokers each beside its own ``metashift agent --zk-listen``, producers and consumers
of the Python client on persistent and partitioned topics in two namespaces, namespace policy
updates and topic changes all along; ``metashift migrate start --wait``; every message accounted
for; then the bookie and brokers restarted on Pulsar's own URLs of the target with no agent, reading
everything back. Everything goes at the end, on Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from metashift_lab.pulsar_cluster import PulsarCluster, PulsarNotInstalled, PulsarStartError, find_release, scenario
from metashift_lab.pulsar_cluster.adoption import Adoption
from metashift_lab.pulsar_cluster.cluster import STORE_NAMES
from metashift_lab.pulsar_cluster.figures import PulsarFigures

from .options import Options, say
from .report import SandboxReport
from .run import Sandbox

#: Seconds of traffic before the migration (every bundle gets its owner) and after the switch (ledgers
#: roll over on etcd: ``evidence.SETTLE_S`` and more).
PULSAR_WARMUP = 10.0
PULSAR_AFTER = 15.0


class PulsarSandbox:
    """One ``sandbox --pulsar`` run (``run`` then ``cleanup``, as ``Sandbox``)."""

    start_errors = (*Sandbox.start_errors, PulsarNotInstalled, PulsarStartError)

    def __init__(self, options: Options) -> None:
        self.options = options
        self.report = SandboxReport(brokers=2, bookies=1)
        self.work_dir: Path | None = None
        self.cluster: PulsarCluster | None = None
        self._mark = time.monotonic()

    def _lap(self, name: str) -> None:
        now = time.monotonic()
        self.report.phases[name] = now - self._mark
        self._mark = now

    async def run(self) -> SandboxReport:
        r, o = self.report, self.options
        started = time.monotonic()
        release = find_release(o.pulsar_version)
        self.work_dir = Path(tempfile.mkdtemp(prefix="metashift-sandbox-pulsar-"))
        r.work_dir = str(self.work_dir)
        say(f"work directory {self.work_dir}; Pulsar {release.version} from {release.home}")
        self.cluster = PulsarCluster(
            self.work_dir, release, hold_timeout=o.hold_timeout, prepare_timeout=o.prepare_timeout,
            spark_master=o.spark_master, say=say, source=o.source, target=o.target, born_direct=o.adopt,
        )  # fmt: skip
        r.pulsar = PulsarFigures(release.version)
        await self.cluster.start()
        self._lap("cluster")
        run = scenario.MigrationRun(self.cluster, say)
        r.pulsar = run.figures
        await run.start_workload()
        r.topics = len(run.traffic.topics)
        await asyncio.sleep(max(o.warmup, PULSAR_WARMUP))
        if o.adopt:
            adoption = Adoption(self.cluster, say)
            r.adoption = adoption.figures
            await adoption.adopt(forget=o.forget)
            if o.forget:
                await adoption.forgotten_member(o.forget)
            run.figures.troubles += adoption.figures.troubles
            self._lap("adoption")
        run.figures.bundle_owners = await run.bundle_owners()
        say("bundles owned: " + ", ".join(f"{web} {n}" for web, n in run.figures.bundle_owners.items()))
        self._lap("warm-up")
        if o.abort_first:
            await run.abort_midway()
            self._lap("aborted migration")
        await run.migrate()
        r.phase, r.reason = run.phase, run.reason
        self._lap("migration")
        await run.finish_traffic(max(o.after, PULSAR_AFTER))
        r.topics = len(run.traffic.topics)  # the topic created during the migration too
        self._lap("after")
        await run.read_evidence()
        if run.freeze is not None:
            r.freeze_ms = round((run.freeze[1] - run.freeze[0]) * 1000, 1)
        status = await run.status()  # as the operator's guide reads it: metashift migrate status
        r.epoch, r.coordinator = int(status.get("epoch") or 0), status.get("coordinator")
        copy = status.get("copy") or {}
        r.coordinator_verified = r.phase == "COMPLETED" and bool(copy.get("verified"))
        r.passes = int(copy.get("passes") or 0)
        r.pass_timings = list(copy.get("timings") or [])
        r.copied_nodes = int(copy.get("total") or 0)
        c = self.cluster
        r.lives_on = (f"{STORE_NAMES[c.target]} (target)" if r.phase == "COMPLETED"
                      else f"{STORE_NAMES[c.source]} (source)")
        if r.phase == "COMPLETED":
            await run.check_pulsar_admin()
            self._lap("pulsar-admin")
            await run.restart_native()
            self._lap("native restart")
        r.failures = list(run.figures.troubles)
        r.seconds = time.monotonic() - started
        return r

    async def cleanup(self) -> None:
        """Stop and remove everything; never raises."""
        if self.cluster is not None:
            await self.cluster.cleanup(keep=self.options.keep)
        if self.work_dir is not None:
            if self.options.keep:
                say(f"kept the work directory {self.work_dir}")
            else:
                shutil.rmtree(self.work_dir, ignore_errors=True)
