"""Starting the agent (issue 8): every config error is exit 2 naming the problem, no traceback;
insecure settings start with a warning in the log. Real `metashift agent` processes in front of a
real ZooKeeper."""

from __future__ import annotations

import asyncio
import signal
import sys
import tempfile
from pathlib import Path

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
