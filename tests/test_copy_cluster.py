"""The copy on a real distributed Spark: a standalone master and two workers started on loopback
from the installed pyspark (``spark-class``), and ``metashift copy --verify --spark-master
spark://...`` run as a user runs it, the subtrees listed and copied by the executors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metashift_lab.servers import LocalEtcd, LocalZooKeeper, free_port

READY_SECONDS = 300.0  # a loaded two-core machine started a worker in over a minute


def _spark_class() -> str:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        found = shutil.which("spark-class")
        if found is None:
            pytest.skip("pyspark has no spark-class")
        return found
    return str(path)


class SparkStandalone:
    """A master and ``workers`` workers of one core each, on loopback, in their own process groups."""

    def __init__(self, workers: int = 2) -> None:
        self.port = free_port()
        self.workers = workers
        self.dir = Path(tempfile.mkdtemp(prefix="metashift-spark-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        import pyspark

        self.env = {
            **os.environ,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.dir / "logs"),
            "SPARK_WORKER_DIR": str(self.dir / "work"),
            "PYSPARK_PYTHON": sys.executable,
        }

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str]) -> Path:
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [_spark_class(), *args], stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
                )
            )
        return log

    def _wait_for(self, log: Path, text: str) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        raise RuntimeError(f"Spark did not start ({text!r} not in {log}):\n{log.read_text(errors='replace')[-3000:]}")

    def __enter__(self) -> SparkStandalone:
        try:
            master = self._start("master", [
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(free_port()),
            ])  # fmt: skip
            self._wait_for(master, "I have been elected leader")
            for i in range(self.workers):
                worker = self._start(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores", "1",
                    "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(self.dir / f"work-{i}"),
                ])  # fmt: skip
                self._wait_for(worker, "Successfully registered with master")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[SparkStandalone]:
    with SparkStandalone(workers=2) as cluster:
        yield cluster


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metashift.cli", *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


@pytest.mark.timeout(1500)  # two CLI runs of up to 600 s each on a loaded machine: a bound, not a speed
def test_copy_and_verify_on_a_standalone_cluster(
    spark_cluster: SparkStandalone, zk_server: LocalZooKeeper, etcd_server: LocalEtcd, namespace: str
) -> None:
    source, target = f"{zk_server.url}{namespace}-src", f"{etcd_server.url}{namespace}-dst"
    made = cli("generate", "--target", source, "--topics", "300", "--seed", "3", "--no-ephemerals")
    assert made.returncode == 0, made.stderr
    master = ["--spark-master", spark_cluster.url]
    copied = cli("copy", "--source", source, "--target", target, "--verify", "--json", *master)
    assert copied.returncode == 0, copied.stderr[-3000:]
    report = json.loads(copied.stdout)
    assert report["verify"]["ok"], report["verify"]["mismatches"][:10]
    assert report["nodes"] == report["written"] > 1000
    assert report["verify"]["nodes"] == report["nodes"]
    # the executors listed the tree, not the driver: it only named the tops of their subtrees
    assert report["listed_by_executors"] > 2 * report["listed_by_driver"], report
    assert report["verify"]["listed_by_executors"] > report["nodes"] // 2, report["verify"]
    assert report["partitions"] >= 2
    assert report["counters"], "the sequence counters were carried"
    # run again: nothing to write; and the standalone verify agrees
    again = cli("copy", "--source", source, "--target", target, "--json", *master)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["write_ops"] == 0
    verified = cli("verify", "--source", source, "--target", target, "--json", *master)
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert json.loads(verified.stdout)["ok"]
