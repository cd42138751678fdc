"""``metashift agent`` processes, as the sandbox, the Pulsar cluster harness and the tests run them:
one per broker and bookie, each with its own config file, unix socket, log file and state
directory in a work directory; restarted as systemd restarts a unit (``AgentProcess.restart``:
SIGTERM then start again, or SIGKILL and a start ``down`` seconds later, with the same config and
state directory); and what their logs say of a migration (``freeze_window``)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metashift import processes
from metashift.agent.config import SCHEMA
from metashift.stores import MetadataStoreError
from metashift_lab.cli_runner import cli_command

#: Seconds an agent gets after SIGTERM to drain and exit before it gets SIGKILL.
STOP_GRACE = 10.0
#: How an agent is restarted: ``sigterm`` (``systemctl restart``: stopped in order, started again at
#: once) or ``sigkill`` (a crash, and systemd's ``Restart=`` starting it ``down`` seconds later).
RESTART_KINDS = ("sigterm", "sigkill")
#: Seconds between a SIGKILL and the start again (systemd's ``RestartSec``, as the issue measured).
RESTART_DOWN_S = 2.0
#: Whether this installation's agent has a state directory (``[session] state_dir``): what must
#: survive its process (its store session, its clients' sessions). Until it does, the agent refuses
#: the key, so the config names it only then.
HAS_STATE_DIR = "session.state_dir" in SCHEMA


class AgentStartError(RuntimeError):
    """An agent process of the sandbox did not start serving."""

    pass


def agent_command() -> list[str]:
    """How to run ``metashift agent`` with this interpreter's installation."""
    return cli_command("agent")


@dataclass
class AgentProcess:
    """One ``metashift agent`` process of the sandbox."""

    node_id: str
    role: str
    work_dir: Path
    source_url: str
    hold_timeout: float
    prepare_timeout: float
    spark_master: str | None = None
    coordinator_settings: dict[str, Any] = field(default_factory=dict)
    """More keys of the ``[coordinator]`` section (``participant_timeout``, ...)."""
    zk_listen: str | None = None
    """``host:port``: also serve ZooKeeper's protocol there (a stock broker or bookie dials it)."""
    target_credentials: tuple[str, str] | None = None
    """(user, password) of the ``[target]`` section: how this agent opens a migration's target."""
    target_settings: dict[str, Any] = field(default_factory=dict)
    """More keys of the ``[target]`` section (``password_file``, ``tls``, ``ca``, ``token_file``, ...)."""
    zookeeper_settings: dict[str, Any] = field(default_factory=dict)
    """More keys of the ``[zookeeper]`` section (``sasl_users_file``, ``require_sasl``)."""
    migration_root: str | None = None
    """The ``[migration] root`` (``None``: the default)."""
    coordinator_enabled: bool = True
    """``[coordinator] enabled``: whether this agent stands for election."""
    command_prefix: tuple[str, ...] = ()
    """What the agent's command runs under (``netns.IsolatedNode.command``'s ``ip netns exec NAME``:
    a node of its own, whose links to the stores a test can cut)."""
    process: processes.AsyncChild | None = None
    killed: bool = False
    restarts: list[AgentRestart] = field(default_factory=list)
    """Every ``restart`` of this agent, in order."""

    @property
    def socket_path(self) -> Path:
        return self.work_dir / f"{self.node_id}.sock"

    @property
    def address(self) -> str:
        return f"unix:{self.socket_path}"

    @property
    def config_path(self) -> Path:
        return self.work_dir / f"{self.node_id}.toml"

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"{self.node_id}.log"

    @property
    def state_dir(self) -> Path:
        """This agent's own state directory (``[session] state_dir``; the default, ``/run/metashift``,
        would be shared by every agent of the machine)."""
        return self.work_dir / "state" / self.node_id

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def config_text(self) -> str:
        lines = [
            f"node_id = {_toml(self.node_id)}",
            f"role = {_toml(self.role)}",
            f"listen = {_toml(self.address)}",
            'metrics = ""',
            'log_level = "info"',
            "",
            "[source]",
            f"url = {_toml(self.source_url)}",
            "",
            "[gate]",
            f"hold_timeout = {self.hold_timeout:g}",
            "drain_timeout = 5",
            "",
            "[coordinator]",
            f"enabled = {str(self.coordinator_enabled).lower()}",
            f"prepare_timeout = {self.prepare_timeout:g}",
        ]
        if self.spark_master:
            lines.append(f"spark_master = {_toml(self.spark_master)}")
        for key, value in self.coordinator_settings.items():
            lines.append(f"{key} = {_value(value)}")
        if self.zk_listen:
            lines += ["", "[zookeeper]", f"listen = {_toml(self.zk_listen)}"]
            lines += [f"{key} = {_value(value)}" for key, value in self.zookeeper_settings.items()]
        if self.migration_root:
            lines += ["", "[migration]", f"root = {_toml(self.migration_root)}"]
        if self.target_credentials or self.target_settings:
            lines += ["", "[target]"]
        if self.target_credentials:
            user, password = self.target_credentials
            lines += [f"username = {_toml(user)}", f"password = {_toml(password)}"]
        lines += [f"{key} = {_value(value)}" for key, value in self.target_settings.items()]
        if HAS_STATE_DIR:
            lines += ["", "[session]", f"state_dir = {_toml(str(self.state_dir))}"]
        return "\n".join(lines) + "\n"

    async def start(self) -> None:
        """Start the process (it does not wait for it to serve: ``wait_serving``)."""
        self.config_path.write_text(self.config_text())
        if HAS_STATE_DIR:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - a local file, opened once
            # a session of its own: a Ctrl-C at the terminal reaches the sandbox only, which then
            # stops its agents in order (writers first, then SIGTERM, then SIGKILL); it dies with
            # the sandbox, even a SIGKILLed one
            self.process = await processes.start_async(
                # the state dir on the command line too: it wins over a METASHIFT_SESSION_STATE_DIR
                # the environment may carry
                [*self.command_prefix, *agent_command(), "--config", str(self.config_path),
                 *(["--state-dir", str(self.state_dir)] if HAS_STATE_DIR else [])],
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env,
            )  # fmt: skip

    async def wait_serving(self, within: float = 60.0) -> None:
        """Return once a client session with the agent opens; raise ``AgentStartError`` if the
        process exits or does not serve in time."""
        from metashift.client import connect

        deadline = time.monotonic() + within
        while True:
            if not self.running:
                raise AgentStartError(f"agent {self.node_id} exited before serving; its log:\n{self.log_tail()}")
            if self.socket_path.exists():
                try:
                    client = await connect(self.address, timeout=2.0)
                except MetadataStoreError:
                    pass
                else:
                    await client.close()
                    return
            if time.monotonic() > deadline:
                raise AgentStartError(f"agent {self.node_id} did not serve within {within:g}s; log {self.log_path}")
            await asyncio.sleep(0.1)

    def log_tail(self, chars: int = processes.TAIL_CHARS) -> str:
        return processes.log_tail(self.log_path, chars)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the agent's process group (the agent and the copy it may run)."""
        if self.process is not None:
            processes.signal_group(self.process, sig)

    async def kill(self) -> None:
        """SIGKILL, like a crash of the node."""
        self.killed = True
        if self.process is not None:
            await processes.kill_async(self.process)

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM (the agent drains and exits), then SIGKILL after ``grace`` seconds."""
        if self.process is not None:
            await processes.stop_async(self.process, grace)

    async def restart(
        self, kind: str, down: float = RESTART_DOWN_S, within: float = 60.0,
        while_down: Callable[[], Awaitable[None]] | None = None,
    ) -> AgentRestart:
        """Restart the agent as systemd would, with the same config file and state directory:
        ``sigterm`` (stopped in order, SIGKILL only after ``STOP_GRACE``; started again at once) or
        ``sigkill`` (started again ``down`` seconds after it died, and once ``while_down`` returns:
        what happens in the cluster while no agent runs here); returns once it serves again, its
        gRPC socket and its ZooKeeper front (``AgentStartError`` when it does not within ``within``
        seconds)."""
        if kind not in RESTART_KINDS:
            raise ValueError(f"restart kind must be one of {RESTART_KINDS}, not {kind!r}")
        if not self.running:
            raise AgentStartError(f"agent {self.node_id} is not running: nothing to restart")
        old_pid = self.pid
        signalled = time.time()
        if kind == "sigterm":
            assert self.process is not None
            code = await processes.stop_async(self.process, STOP_GRACE)
        else:
            assert self.process is not None
            code = await processes.kill_async(self.process)
        exited = time.time()
        if kind == "sigkill":
            if while_down is not None:
                await while_down()
            await asyncio.sleep(max(0.0, signalled + down - time.time()))
        self.killed = False
        await self.start()
        started = time.time()
        await self.wait_serving(within)
        if self.zk_listen:
            await _wait_tcp(self.zk_listen, max(1.0, started + within - time.time()), self.node_id)
        done = AgentRestart(self.node_id, kind, old_pid, self.pid, code, signalled, exited, started, time.time())
        self.restarts.append(done)
        return done


@dataclass(frozen=True)
class AgentRestart:
    """One restart of an agent (wall clock, seconds)."""

    node_id: str
    kind: str
    old_pid: int | None
    new_pid: int | None
    exit_code: int | None
    """What the old process exited with (``-9`` after a SIGKILL)."""
    signalled_at: float
    exited_at: float
    started_at: float
    serving_at: float
    """When the new process served again (its gRPC socket, and its ZooKeeper front if it has one)."""

    @property
    def away_s(self) -> float:
        """From the signal to serving again."""
        return self.serving_at - self.signalled_at

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.node_id, "kind": self.kind, "exit_code": self.exit_code,
                "exit_s": round(self.exited_at - self.signalled_at, 2),
                "away_s": round(self.away_s, 2)}  # fmt: skip


async def _wait_tcp(address: str, within: float, name: str) -> None:
    """Until something accepts a connection at ``host:port``."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + within
    while True:
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), 1.0)
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise AgentStartError(f"agent {name}: nothing listens on {address} after {within:g}s") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(value: Any) -> str:
    """A setting's value in TOML (a string or path quoted; a bool, number or list as Python writes it)."""
    if isinstance(value, str | Path):
        return _toml(str(value))
    return repr(value).lower()


async def start_agents(agents: list[AgentProcess], within: float = 90.0) -> None:
    """Start every agent process, then wait until each serves."""
    for agent in agents:
        await agent.start()
    await asyncio.gather(*(agent.wait_serving(within) for agent in agents))


async def stop_agents(agents: list[AgentProcess], grace: float = STOP_GRACE) -> None:
    """Stop every agent at once (SIGTERM, then SIGKILL after ``grace``); never raises."""
    results = await asyncio.gather(*(agent.stop(grace) for agent in agents), return_exceptions=True)
    for agent, result in zip(agents, results, strict=True):
        if isinstance(result, BaseException):
            with contextlib.suppress(Exception):
                agent.signal(signal.SIGKILL)


def log_entries(text: str) -> list[tuple[float, str]]:
    """(wall clock in seconds, message) of each JSON line of an agent's log, in order; other lines
    (a traceback, a JVM's) are skipped. The agent writes ``ts`` in UTC (``...Z``)."""
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            ts = datetime.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                tzinfo=datetime.UTC).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
        out.append((ts, str(entry.get("msg", ""))))
    return out


def freeze_window(logs: list[str]) -> tuple[float, float] | None:
    """The freeze, wall clock in seconds: from the first "write gate closed" to the last "write
    gate open" in the agents' JSON logs (``None`` when no gate closed)."""
    closed: list[float] = []
    opened: list[float] = []
    for text in logs:
        for ts, msg in log_entries(text):
            if msg.startswith("write gate closed"):
                closed.append(ts)
            elif msg.startswith("write gate open"):
                opened.append(ts)
    if not closed or not opened:
        return None
    return min(closed), max(opened)
