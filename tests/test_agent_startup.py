"""Starting the agent (issue 8): every config error is exit 2 naming the problem, no traceback;
insecure settings start with a warning in the log. Real `metashift agent` processes in front of a
real ZooKeeper."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from metashift import cli


async def _agent(*args: str, until_started: bool = False) -> tuple[int, str]:
    """Run ``metashift agent ARGS``; with ``until_started``, stop it (SIGTERM) once it logged that
    it started. Returns the exit status and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metashift.cli", "agent", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stderr.readline()).decode()
                if not line:
                    break
                lines.append(line)
                if until_started and '"agent started"' in line:
                    proc.send_signal(signal.SIGTERM)
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, "".join(lines)


async def test_config_pointing_at_a_directory_is_exit_2_naming_it(tmp_path: Path) -> None:
    code, err = await _agent("--config", str(tmp_path))
    assert code == cli.EXIT_USER_ERROR, err
    assert "config key --config" in err and "is a directory" in err and str(tmp_path) in err
    assert "Traceback" not in err


async def test_unix_socket_path_over_the_os_limit_is_exit_2_naming_it(zk_url: str) -> None:
    directory = tempfile.mkdtemp(prefix="ms-long-")
    path = directory + "/" + "s" * (108 - len(directory) - 1)  # 108 bytes: one over the limit
    assert len(path.encode()) == 108
    code, err = await _agent("--source", zk_url, "--listen", f"unix:{path}")
    assert code == cli.EXIT_USER_ERROR, err
    assert "config key listen" in err and "108 bytes" in err and "107" in err
    assert "Traceback" not in err
    assert not await asyncio.to_thread(Path(path).exists)


def _warnings(log: str) -> list[str]:
    out = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") == "warning":
            out.append(entry["msg"])
    return out


async def test_socket_mode_wider_than_0660_without_a_token_warns(zk_url: str, tmp_path: Path) -> None:
    directory = tempfile.mkdtemp(prefix="ms-mode-")
    config = tmp_path / "agent.toml"
    config.write_text(f'socket_mode = "0666"\nlisten = "unix:{directory}/a.sock"\n[source]\nurl = "{zk_url}"\n')
    code, err = await _agent("--config", str(config), until_started=True)
    assert code in (0, -signal.SIGTERM), err  # SIGTERM may come before its handler is installed
    assert any("socket_mode 0666" in w and "token" in w for w in _warnings(err)), err
    # with a token, the mode is not the only guard: no warning
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    config.write_text(config.read_text() + f'[auth]\ntoken_file = "{token}"\n')
    code, err = await _agent("--config", str(config), until_started=True)
    assert code in (0, -signal.SIGTERM), err  # SIGTERM may come before its handler is installed
    assert not [w for w in _warnings(err) if "socket_mode" in w], err


async def test_allow_insecure_tcp_warns(zk_url: str, tmp_path: Path) -> None:
    from metashift_lab.servers import free_port

    config = tmp_path / "agent.toml"
    config.write_text(
        f'listen = "tcp://127.0.0.1:{free_port()}"\n[source]\nurl = "{zk_url}"\n[tls]\nallow_insecure_tcp = true\n'
    )
    code, err = await _agent("--config", str(config), until_started=True)
    assert code in (0, -signal.SIGTERM), err  # SIGTERM may come before its handler is installed
    assert any("allow_insecure_tcp" in w for w in _warnings(err)), err


async def test_unauthenticated_answers_carry_the_error_trailers(
    gateways: Any, zk_url: str, tmp_path: Path, open_stores: Any
) -> None:
    import grpc

    from metashift import AuthFailed
    from metashift.proto import wire
    from metashift.proto.v1 import gateway_pb2 as pb
    from metashift.proto.v1 import gateway_pb2_grpc as pb_grpc

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    agent = await gateways.start(zk_url, {"auth.token_file": str(token)})
    async with grpc.aio.insecure_channel(agent.address) as channel:
        stub = pb_grpc.MetadataStoreStub(channel)
        for call in (stub.Put(pb.PutRequest(path="/anon", value=b"x")), stub.Get(pb.GetRequest(path="/anon"))):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            trailers = dict(err.value.trailing_metadata() or ())
            assert trailers[wire.ERROR_KIND_KEY] == "Unauthenticated"
            assert trailers[wire.OUTCOME_KEY] == "not-written"
            detail = pb.Error.FromString(trailers[wire.ERROR_DETAIL_KEY])
            assert detail.kind == pb.UNAUTHENTICATED and detail.nothing_written
    with pytest.raises(AuthFailed) as refused:
        await open_stores(agent.address, token="wrong", timeout=5)
    assert type(refused.value).__name__ == "Unauthenticated" and not refused.value.write_may_have_happened
    client = await open_stores(agent.address, token="s3cret")
    assert await client.get("/anon") is None  # nothing was written


# A coordinator candidate needs PySpark (the metashift[coordinator] extra) and a Java runtime; a node
# whose agent never coordinates needs neither. PySpark is made absent the way Python itself blocks a
# module (None in sys.modules), in a real `metashift agent --check-config` process.
_WITH_PYSPARK = "import sys; from metashift.cli import main; sys.exit(main())"
_WITHOUT_PYSPARK = "import sys; sys.modules['pyspark'] = None; from metashift.cli import main; sys.exit(main())"


def _metashift(*args: str, code: str = _WITHOUT_PYSPARK, env: dict[str, str] | None = None) -> Any:
    """``metashift ARGS`` in a process of its own (``code``: with or without PySpark)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


def _check_config(*args: str, code: str = _WITHOUT_PYSPARK, env: dict[str, str] | None = None) -> Any:
    return _metashift("agent", "--check-config", *args, code=code, env=env)


def test_a_coordinator_candidate_without_pyspark_is_exit_2_naming_the_extra(zk_url: str) -> None:
    done = _check_config("--source", zk_url)
    assert done.returncode == cli.EXIT_USER_ERROR, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "coordinator.enabled" in lines[0] and "PySpark is not installed" in lines[0]
    assert "metashift[coordinator]" in lines[0] and "coordinator.enabled = false" in lines[0]


def test_a_node_that_never_coordinates_runs_without_pyspark(zk_url: str) -> None:
    done = _check_config("--source", zk_url, env={"METASHIFT_COORDINATOR_ENABLED": "false"})
    assert done.returncode == 0, done.stderr
    assert "configuration ok" in done.stdout and "never (coordinator.enabled = false)" in done.stdout


def test_a_coordinator_candidate_without_java_is_exit_2(zk_url: str, tmp_path: Path) -> None:
    done = _check_config("--source", zk_url, code=_WITH_PYSPARK, env={"JAVA_HOME": str(tmp_path)})
    assert done.returncode == cli.EXIT_USER_ERROR, done.stderr
    assert "coordinator.enabled" in done.stderr and f"JAVA_HOME={tmp_path} holds no bin/java" in done.stderr


def test_copy_without_pyspark_is_exit_2_naming_it(zk_url: str) -> None:
    done = _metashift("copy", "--source", zk_url, "--target", zk_url + "/elsewhere")
    assert done.returncode == cli.EXIT_USER_ERROR, done.stderr
    assert "runs a Spark job" in done.stderr and "PySpark is not installed" in done.stderr
    assert "Traceback" not in done.stderr
