"""Fixtures of the Java ZooKeeper clients' tests: ZooKeeper's own ``zkCli.sh`` and a small Apache
Curator program (``tests/java/CuratorProbe.java``), compiled once per test session with the JDK
against the jars of Debian's ``zookeeper`` and ``libcurator-*-java`` packages (``make setup``
installs them). Without ``java`` the tests are skipped; anything else missing fails them."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from metashift import processes
from tests.harness import require_part

JAVA_DIR = Path("/usr/share/java")
JARS = (
    "curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute", "guava",
    "slf4j-api", "slf4j-nop",
)
ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")
PROBE_SOURCE = Path(__file__).parent / "java" / "CuratorProbe.java"
#: Bounds that turn a hung JVM into a failure, never timings.
RUN_LIMIT = 120.0


def need_java() -> None:
    if shutil.which("java") is None:
        require_part("no `java` on this machine (`make setup` installs default-jdk-headless)")


@dataclass(frozen=True)
class JavaProgram:
    """A compiled Java class and the classpath it runs with."""

    classpath: str
    main: str

    def command(self, *args: str) -> list[str]:
        # C1 only: these are short runs, where the JVM's start dominates
        return ["java", "-XX:TieredStopAtLevel=1", "-cp", self.classpath, self.main, *args]


@pytest.fixture(scope="session")
def curator_probe(tmp_path_factory: pytest.TempPathFactory) -> JavaProgram:
    """``CuratorProbe`` compiled into a temporary directory, once per test session."""
    need_java()
    jars = [JAVA_DIR / f"{name}.jar" for name in JARS]
    missing = [str(j) for j in jars if not j.exists()]
    assert not missing, f"jars missing (make setup installs libcurator-recipes-java): {missing}"
    javac = shutil.which("javac")
    assert javac is not None, "no `javac` (make setup installs default-jdk-headless)"
    out = tmp_path_factory.mktemp("curator-probe")
    source = out / PROBE_SOURCE.name
    source.write_text(PROBE_SOURCE.read_text())
    classpath = ":".join(str(j) for j in jars)
    done = processes.run([javac, "-d", str(out), "-cp", classpath, str(source)], timeout=RUN_LIMIT)
    assert done.returncode == 0, done.stderr
    return JavaProgram(f"{out}:{classpath}", "CuratorProbe")


@pytest.fixture(scope="session")
def zkcli() -> Path:
    need_java()
    assert ZKCLI.exists(), f"{ZKCLI} missing (Debian package zookeeper)"
    return ZKCLI


async def run(command: list[str], stdin: str = "") -> tuple[int, list[str]]:
    """Run ``command`` to its end with ``stdin``: its exit code and its output lines (stdout and
    stderr in the order they were written, less SLF4J's start-up notices)."""
    proc = await processes.start_async(
        command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(stdin.encode()), RUN_LIMIT)
    except TimeoutError:
        await processes.kill_async(proc)
        pytest.fail(f"{command[-1]!r} did not end within {RUN_LIMIT}s")
    lines = [line for line in out.decode().splitlines() if not line.startswith("SLF4J:")]
    assert proc.returncode is not None
    return proc.returncode, lines


@dataclass
class CuratorHolder:
    """A running ``CuratorProbe hold``: a Curator client holding a lock and an ephemeral and
    writing until ``stop()``; its output lines arrive in ``lines`` as it prints them."""

    node_id: str
    proc: processes.AsyncChild
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, program: JavaProgram, hosts: str, node_id: str, stderr: Path) -> CuratorHolder:
        with stderr.open("wb") as err:
            proc = await processes.start_async(
                program.command("hold", hosts, node_id), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=err,
            )
        holder = cls(node_id, proc)
        holder.reader = asyncio.create_task(holder._read())
        return holder

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode().rstrip("\n"))

    def tagged(self, tag: str) -> list[str]:
        """The text after ``tag`` of every line that starts with it."""
        return [line[len(tag) + 1:] for line in self.lines if line.startswith(tag + " ")]

    @property
    def acked(self) -> dict[str, bytes]:
        """Every acknowledged write: path -> the value written last."""
        out: dict[str, bytes] = {}
        for entry in self.tagged("ACK"):
            path, value = entry.split(" ", 1)
            out[path] = value.encode()
        return out

    @property
    def errors(self) -> list[str]:
        return self.tagged("ERROR")

    async def stop(self) -> int:
        """Tell it to stop writing; wait for its final report and its exit code."""
        assert self.proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            self.proc.stdin.write(b"stop\n")
            await self.proc.stdin.drain()
            self.proc.stdin.close()
        try:
            code = await asyncio.wait_for(self.proc.wait(), RUN_LIMIT)
        except TimeoutError:
            self.kill()
            pytest.fail(f"the Curator client {self.node_id} did not stop within {RUN_LIMIT}s")
        if self.reader is not None:
            await self.reader
        return code

    def kill(self) -> None:
        processes.signal_group(self.proc, signal.SIGKILL)


@pytest.fixture
async def curator_holders() -> AsyncIterator[list[CuratorHolder]]:
    """Curator clients started by a test; killed after it if still running."""
    holders: list[CuratorHolder] = []
    yield holders
    for h in holders:
        h.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(h.proc.wait(), 30)
