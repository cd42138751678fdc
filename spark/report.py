"""The copy's errors on Spark and the progress display of the copy and the verification (the
reports themselves: ``metashift.copy.report``)."""

from __future__ import annotations

import sys
from typing import Any, Protocol

from metashift.copy.report import size_text
from metashift.stores import MetadataStoreError, errors, parse_url

# ---- errors ---------------------------------------------------------------------------------------


class CopyConflict(MetadataStoreError):
    """Target nodes the copy must not overwrite (ahead of the source, or different at the same
    version, or ephemeral). Nothing is lost: the other nodes were copied, these were left alone."""

    def __init__(self, conflicts: list[tuple[str, str]]) -> None:
        self.conflicts = sorted(conflicts)
        path, why = self.conflicts[0]
        more = f" (and {len(self.conflicts) - 1} more conflicting nodes)" if len(self.conflicts) > 1 else ""
        super().__init__(f"conflict in the target, {why}{more}", path)


class SameStore(MetadataStoreError):
    def __init__(self, url: str) -> None:
        super().__init__(f"source and target are the same store ({url})")


class SparkUnavailable(MetadataStoreError):
    """Spark could not be started (a malformed master URL, no Java, a master that refused us)."""


class EmptySource(MetadataStoreError):
    def __init__(self, url: str) -> None:
        super().__init__(f"the source holds no nodes at {parse_url(url)}: is its chroot or prefix right?")


def raise_task_error(error: dict[str, Any]) -> None:
    """Raise the store error an executor reported (by class name, ``MetadataStoreError`` when
    the name is unknown), keeping its message and path."""
    cls = getattr(errors, str(error.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, MetadataStoreError)):
        cls = MetadataStoreError
    e = MetadataStoreError.__new__(cls)
    Exception.__init__(e, error["message"])
    e.path = error.get("path")
    raise e


# ---- progress -------------------------------------------------------------------------------------


class Progress(Protocol):
    def listing(self, what: str, count: int) -> None: ...

    def start(self, what: str, nodes: int, size: int) -> None: ...

    def update(self, nodes: int, size: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def listing(self, what: str, count: int) -> None:
        pass

    def start(self, what: str, nodes: int, size: int) -> None:
        pass

    def update(self, nodes: int, size: int) -> None:
        pass

    def finish(self) -> None:
        pass


class RichProgress:
    """Progress bars on stderr: nodes and bytes of the total."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as _Progress

        self._bar = _Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("nodes"),
            TaskProgressColumn(),
            TextColumn("{task.fields[size]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=sys.stderr),
            transient=False,
        )
        self._bar.start()
        self._task: Any = None
        self._total_size = 0

    def listing(self, what: str, count: int) -> None:
        if self._task is None or self._bar.tasks[self._task].description != what:
            self._task = self._bar.add_task(what, total=None, size="")
        self._bar.update(self._task, completed=count)

    def start(self, what: str, nodes: int, size: int) -> None:
        self._total_size = size
        # the total is unknown (0) when the executors list the tree as they go
        self._task = self._bar.add_task(what, total=nodes or None, size=f"0 B / {size_text(size)}" if size else "")

    def update(self, nodes: int, size: int) -> None:
        if self._task is not None:
            shown = f"{size_text(size)} / {size_text(self._total_size)}" if self._total_size else size_text(size)
            self._bar.update(self._task, completed=nodes, size=shown)

    def finish(self) -> None:
        self._bar.stop()


def make_progress(enabled: bool | None) -> Progress:
    """Rich progress on stderr when ``enabled``, or (``None``) when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return RichProgress() if enabled else NoProgress()
