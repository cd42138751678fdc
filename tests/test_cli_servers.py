"""``metashift servers``: a local ZooKeeper and etcd until Ctrl-C or SIGTERM, then nothing left."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_servers_stop_cleanly_on_ctrl_c_and_sigterm(sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "metashift.cli", "servers"], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        found = [re.search(r"//127\.0\.0\.1:(\d+)\s+\(data (.+)\)", line) for line in lines[:2]]
        assert all(found), lines
        ports = [int(m.group(1)) for m in found if m]
        dirs = [Path(m.group(2)) for m in found if m]
        for port in ports:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert not any(d.exists() for d in dirs)
