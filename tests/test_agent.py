"""The agent process: configuration (file, environment, command line), the ``metashift agent``
command (unix socket mode, health, metrics, JSON logs, SIGTERM drain) and the generated protos."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from metashift import cli
from metashift.agent.config import SCHEMA, ConfigError, build, env_name, load
from metashift.client import AgentClient
from metashift_lab.servers import free_port
from tests.harness import Gateways, eventually

ROOT = Path(__file__).resolve().parent.parent

# ---- configuration ------------------------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_sample_config_loads() -> None:
    cfg = load(ROOT / "packaging" / "agent.toml", env={})
    assert cfg.role == "broker" and cfg.listen.kind == "unix" and cfg.socket_mode == 0o660
    assert cfg.source.scheme == "zk"


def test_sample_config_names_every_key() -> None:
    """The sample is the configuration's documentation: every key is in it, set or commented."""
    named, section = set(), ""
    for line in (ROOT / "packaging" / "agent.toml").read_text().splitlines():
        text = line.removeprefix("#").strip()
        if text.startswith("[") and "]" in text:
            section = text[1 : text.index("]")] + "."
        elif "=" in text and text.split("=", 1)[0].strip().isidentifier():
            named.add(section + text.split("=", 1)[0].strip())
    assert set(SCHEMA) - named == set()  # every key documented
    assert named - set(SCHEMA) == set()  # and nothing that is not a key


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path, """
node_id = "from-file"
role = "bookie"
listen = "unix:/tmp/x.sock"
metrics = "127.0.0.1:9464"
[source]
url = "zk://zk1:2181/pulsar"
[gate]
hold_timeout = 12
""")
    cfg = load(path, env={})
    assert (cfg.node_id, cfg.role, cfg.hold_timeout, cfg.metrics) == ("from-file", "bookie", 12.0, "127.0.0.1:9464")
    env = {env_name("node_id"): "from-env", env_name("source.url"): "etcd://e1:2379",
           env_name("source.username"): "pulsar", env_name("source.password"): "s3cret",
           env_name("gate.hold_timeout"): "7.5"}
    assert env_name("source.url") == "METASHIFT_SOURCE_URL"
    cfg = load(path, env=env)
    assert cfg.node_id == "from-env" and cfg.source.scheme == "etcd" and cfg.hold_timeout == 7.5
    assert cfg.source.username == "pulsar" and cfg.source.password == "s3cret"
    assert "s3cret" not in repr(cfg)
    cfg = load(path, env=env, overrides={"node_id": "from-cli", "role": None})
    assert cfg.node_id == "from-cli" and cfg.role == "bookie"


def test_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    cfg = build({"source.url": "zk://h:2181", "source.username": "u", "source.password_file": str(secret)})
    assert cfg.source.password == "hunter2"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('nodeid = "x"\n[source]\nurl = "zk://h"', "nodeid"),
        ('[source]\nurl = "zk://h"\nuri = "zk://h"', "source.uri"),
        ('[sauce]\nurl = "zk://h"', "sauce.url"),
        ('role = "proxy"\n[source]\nurl = "zk://h"', "role"),
        ('node_id = 5\n[source]\nurl = "zk://h"', "node_id"),
        ('[source]\nurl = "mysql://h"', "source.url"),
        ('node_id = "a"', "source.url"),
        ('listen = "tcp://0.0.0.0:7650"\n[source]\nurl = "zk://h"', "listen"),
        ('listen = "no/scheme.sock"\n[source]\nurl = "zk://h"', "listen"),
        ('socket_mode = "rw"\n[source]\nurl = "zk://h"', "socket_mode"),
        ('metrics = "nowhere"\n[source]\nurl = "zk://h"', "metrics"),
        ('[source]\nurl = "zk://h"\n[gate]\nhold_timeout = -1', "gate.hold_timeout"),
        ('[source]\nurl = "zk://h"\n[tls]\ncert = "/no/such.pem"', "tls.cert"),
        ('[source]\nurl = "zk://h"\npassword = "p"', "source.username"),
        ('[source\nurl = "zk://h"', "--config"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(_write(tmp_path, text), env={})
    assert err.value.key == key and key in str(err.value)


def test_bad_environment_value_names_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        load(None, env={"METASHIFT_SOURCE_URL": "zk://h", "METASHIFT_TLS_ALLOW_INSECURE_TCP": "maybe"})
    assert err.value.key == "tls.allow_insecure_tcp"


def test_cli_bad_config_exits_non_zero_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, '[source]\nurl = "zk://h"\n[gate]\nhold_timeout = "soon"')
    assert cli.main(["agent", "--config", str(path)]) == cli.EXIT_USER_ERROR
    assert "gate.hold_timeout" in capsys.readouterr().err
    assert cli.main(["agent", "--config", str(tmp_path / "missing.toml")]) == cli.EXIT_USER_ERROR
    assert "missing.toml" in capsys.readouterr().err
    assert cli.main(["agent", "--source", "zk://h", "--listen", "tcp://0.0.0.0:1"]) == cli.EXIT_USER_ERROR
    assert "config key listen" in capsys.readouterr().err


# ---- the process --------------------------------------------------------------------------------


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def test_agent_process_serves_drains_on_sigterm_and_exits_cleanly(
    zk_url: str, open_stores: Callable[..., Any]
) -> None:
    directory = tempfile.mkdtemp(prefix="ms-proc-")
    sock = f"{directory}/agent.sock"
    metrics_port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metashift.cli", "agent", "--source", zk_url, "--listen", f"unix:{sock}",
        "--node-id", "broker-7", "--role", "broker", "--metrics", f"127.0.0.1:{metrics_port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "METASHIFT_GATE_DRAIN_TIMEOUT": "5"},
    )
    try:
        await eventually(lambda: os.path.exists(sock) and stat.S_IMODE(os.stat(sock).st_mode) == 0o660, 30,
                        "agent socket with mode 0660")
        async with grpc.aio.insecure_channel(f"unix:{sock}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            for service in ("", "metashift.v1.MetadataStore", "metashift.v1.Session"):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
        client: AgentClient = await open_stores(f"unix:{sock}", name="test")
        assert client.node_id == "broker-7"
        await client.put("/proc", b"x", expected_version=-1)
        await client.put("/proc-eph", b"x", ephemeral=True)
        got = await client.get("/proc")
        assert got is not None and got[0] == b"x"
        direct = await open_stores(zk_url)

        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        )
        assert 'metashift_agent_requests_total{method="Put",status="OK"} 2.0' in text
        assert "metashift_agent_request_seconds_bucket" in text and "metashift_agent_sessions 1.0" in text
        assert "metashift_agent_held_writes 0.0" in text and "metashift_agent_migration_phase" in text

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert not _exists(sock)
        assert not await direct.exists("/proc-eph")  # the session ended with the agent
        assert await direct.exists("/proc")
        assert proc.stderr is not None
        lines = (await proc.stderr.read()).decode().splitlines()
        # every line a JSON record (a traceback at the stop is a defect: shown whole)
        assert all(line.startswith("{") for line in lines if line.strip()), "\n".join(lines)
        records = [json.loads(line) for line in lines if line.strip()]
        assert any(r["msg"] == "agent started" and r["node_id"] == "broker-7" for r in records)
        assert any(r["msg"] == "agent stopped" for r in records)
        assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_agent_exits_non_zero_when_the_source_is_unreachable() -> None:
    directory = tempfile.mkdtemp(prefix="ms-proc-")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metashift.cli", "agent", "--source", f"zk://127.0.0.1:{free_port()}?timeout=1",
        "--listen", f"unix:{directory}/a.sock",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == cli.EXIT_USER_ERROR
    assert b"metashift: error" in err


async def test_stop_drains_calls_in_flight(gateways: Gateways, zk_url: str, open_stores: Callable[..., Any]) -> None:
    from tests.gateway_support import SlowStore

    direct = await open_stores(zk_url)
    agent = await gateways.start(zk_url, source=SlowStore(direct, 0.5))
    client: AgentClient = await open_stores(agent.address, timeout=10)
    # four calls of their own (a deadline each: not coalesced into one Batch)
    writes = [asyncio.create_task(client.put(f"/inflight{i}", b"x", timeout=10)) for i in range(4)]
    await eventually(lambda: agent.gate.in_flight == 4, 5, "writes in flight")
    await agent.stop(grace=5)
    stats = await asyncio.gather(*writes)  # every call in flight completed, none was cut
    assert all(s.version == 0 for s in stats)
    for i in range(4):
        assert await direct.exists(f"/inflight{i}")


# ---- generated code -----------------------------------------------------------------------------


def test_generated_proto_code_is_up_to_date(tmp_path: Path) -> None:
    from metashift.proto import generate  # proto/generate.py, what `make proto` runs

    names = generate.generate(tmp_path)
    assert len(names) == 6, names  # the gateway's and Oxia's: three files each
    trees = {package: folder for folder, package in generate.TREES}
    for name in names:
        package = next(p for p in trees if name.is_relative_to(p))
        committed_path = trees[package] / name.relative_to(package)
        fresh = (tmp_path / name).read_bytes()
        assert fresh == committed_path.read_bytes(), (
            f"{committed_path.relative_to(ROOT)} is stale: run `make proto` and commit the result")


async def test_stop_with_the_gate_closed_does_not_wait_for_the_gate(
    gateways: Gateways, zk_url: str, open_stores: Callable[..., Any]
) -> None:
    """SIGTERM while a migration holds the gate closed: the agent fails the held writes, ends the
    sessions and stops within its drain budget; the ephemerals of its sessions are not deleted
    through the closed gate (no write reaches the store after the gate closed) but go with the
    store session."""
    from metashift import StoreUnavailable

    direct = await open_stores(zk_url)
    agent = await gateways.start(zk_url, {"gate.hold_timeout": 120})
    client: AgentClient = await open_stores(agent.address, timeout=60)
    await client.put("/eph-at-stop", b"x", ephemeral=True)
    await agent.gate.close()
    held = asyncio.create_task(client.put("/held-at-stop", b"x"))
    await eventually(lambda: agent.gate.held == 1, 10, "a held write")
    stopping = asyncio.create_task(agent.stop(grace=1.0))
    done, _ = await asyncio.wait([stopping], timeout=30)
    assert stopping in done, "stop() waited on the closed gate"
    with pytest.raises(StoreUnavailable):  # HeldForMigration: the agent is going away
        await held
    assert not await direct.exists("/held-at-stop")
    assert not await direct.exists("/eph-at-stop")  # the agent's store session closed


async def test_agent_exits_2_naming_the_key_when_it_cannot_listen_or_serve_metrics(zk_url: str) -> None:
    """Settings that only fail when used (a listen path that is a regular file, a metrics port in
    use) are bad config too: exit status 2 and the key named, no traceback."""
    import socket

    directory = tempfile.mkdtemp(prefix="ms-proc-")
    not_a_socket = Path(directory) / "file.sock"
    not_a_socket.write_text("")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        for extra, key in (
            (["--listen", f"unix:{not_a_socket}"], "config key listen"),
            (["--listen", f"unix:{directory}/a.sock", "--metrics", f"127.0.0.1:{busy.getsockname()[1]}"],
             "config key metrics"),
        ):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "metashift.cli", "agent", "--source", zk_url, *extra,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == cli.EXIT_USER_ERROR, err.decode()
            assert key in err.decode() and "Traceback" not in err.decode()
    finally:
        busy.close()


async def test_second_agent_on_a_live_socket_is_refused(
    gateways: Gateways, zk_url: str, open_stores: Callable[..., Any]
) -> None:
    """A stale socket of a previous run is replaced, but the socket of an agent that is running is
    not taken over: two agents on one node would each have a write gate of their own."""
    first = await gateways.start(zk_url)
    with pytest.raises(ConfigError) as err:
        await gateways.start(zk_url, {"listen": first.address})
    assert err.value.key == "listen"
    client: AgentClient = await open_stores(first.address, timeout=5)
    await client.put("/still-first", b"x")
    assert client.node_id == "test-agent"


@pytest.mark.parametrize("text", ["/run/metashift/agent.sock", "unix:/run/metashift/agent.sock"])
def test_listen_takes_a_bare_socket_path(text: str) -> None:
    config = build({"source.url": "zk://127.0.0.1:2181", "listen": text})
    assert config.listen.kind == "unix" and config.listen.address == "/run/metashift/agent.sock"


@pytest.mark.parametrize("text", ["relative.sock", "unix:relative.sock", "127.0.0.1:9000", "http://h:1"])
def test_listen_refuses_what_is_neither_a_socket_path_nor_tcp(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        build({"source.url": "zk://127.0.0.1:2181", "listen": text})
    assert err.value.key == "listen"
