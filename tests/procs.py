"""Processes seen through /proc: what a test started, to check that nothing outlives a run."""

from __future__ import annotations

from pathlib import Path

from metashift import processes


def starttime(pid: int) -> str | None:
    """The start time of ``pid`` (field 22 of /proc/pid/stat), None when it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if fields[0] == "Z":
        return None
    return fields[19]


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root`` (pid -> start time)."""
    return processes.descendants(root)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
