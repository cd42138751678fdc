"""``metashift agent`` processes, as the sandbox, the Pulsar cluster harness and the tests run them:
one per broker and bookie, each with its own config file, unix socket and log file in a work
directory; and what their logs say of a migration (``freeze_window``)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metashift import processes
from metashift.stores import MetadataStoreError
from metashift_lab.cli_runner import cli_command

#: Seconds an agent gets after SIGTERM to drain and exit before it gets SIGKILL.
STOP_GRACE = 10.0


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
    migration_root: str | None = None
    """The ``[migration] root`` (``None``: the default)."""
    process: asyncio.subprocess.Process | None = None
    killed: bool = False

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
            "enabled = true",
            f"prepare_timeout = {self.prepare_timeout:g}",
        ]
        if self.spark_master:
            lines.append(f"spark_master = {_toml(self.spark_master)}")
        for key, value in self.coordinator_settings.items():
            lines.append(f"{key} = {_toml(value) if isinstance(value, str) else repr(value).lower()}")
        if self.zk_listen:
            lines += ["", "[zookeeper]", f"listen = {_toml(self.zk_listen)}"]
        if self.migration_root:
            lines += ["", "[migration]", f"root = {_toml(self.migration_root)}"]
        if self.target_credentials:
            user, password = self.target_credentials
            lines += ["", "[target]", f"username = {_toml(user)}", f"password = {_toml(password)}"]
        return "\n".join(lines) + "\n"

    async def start(self) -> None:
        """Start the process (it does not wait for it to serve: ``wait_serving``)."""
        self.config_path.write_text(self.config_text())
        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        with open(self.log_path, "ab") as log:  # noqa: ASYNC230 - a local file, opened once
            # a session of its own: a Ctrl-C at the terminal reaches the sandbox only, which then
            # stops its agents in order (writers first, then SIGTERM, then SIGKILL); it dies with
            # the sandbox, even a SIGKILLed one
            self.process = await processes.start_async(
                [*agent_command(), "--config", str(self.config_path)],
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


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


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


def freeze_window(logs: list[str]) -> tuple[float, float] | None:
    """The freeze, wall clock in seconds: from the first "write gate closed" to the last "write
    gate open" in the agents' JSON logs (``None`` when no gate closed)."""
    closed: list[float] = []
    opened: list[float] = []
    for text in logs:
        for line in text.splitlines():
            if '"write gate ' not in line:
                continue
            try:
                entry = json.loads(line)
                ts = datetime.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            msg = str(entry.get("msg", ""))
            if msg.startswith("write gate closed"):
                closed.append(ts)
            elif msg.startswith("write gate open"):
                opened.append(ts)
    if not closed or not opened:
        return None
    return min(closed), max(opened)
