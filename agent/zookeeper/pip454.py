"""PIP-454's migration flag as the ZooKeeper front shows it to Pulsar 4.2+.

Pulsar 4.2's brokers and bookies wrap every ``zk:`` store in a ``DualMetadataStore`` that reads
``/pulsar/migration-coordinator/migration`` and acts on it: in PREPARATION or COPYING it fails its
own writes and opens the flag's ``targetUrl`` itself, at COMPLETED it goes there directly, and an
unknown phase (metashift's SYNCING) breaks every call. Behind an agent, only metashift migrates:
so the front serves that node itself, never from a store. It always reads
``{"phase":"NOT_STARTED","targetUrl":...}`` (Pulsar ignores the target of a flag that is not
started; ``pulsar-admin metadata-migration status`` shows it, so it says where metashift's
migration stands and which command follows it), and every write of it is refused: a
``metadata-migration start`` gets NODEEXISTS for its flag, then NOAUTH for its FAILED, and
starts nothing beside metashift's migration. The next status read names the refused start and
the ``metashift migrate start`` command to use instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from metashift.migration import paths
from metashift.stores.zookeeper.wire import Err, ZStat

log = logging.getLogger(__name__)

#: PIP-454's flag and its parent.
FLAG = paths.LEGACY_FLAG
PARENT = paths.LEGACY_ROOT
NAME = FLAG.rsplit("/", 1)[1]


class Pip454Flag:
    """The front's own PIP-454 flag (the module's doc)."""

    def __init__(self, describe: Callable[[], tuple[str, str]] | None = None) -> None:
        self._describe = describe or (lambda: ("no migration in progress", ""))
        """What metashift's migration is doing, and the store URL its commands take."""
        self.refused: tuple[float, str] | None = None
        """When a PIP-454 start was last refused here, and the target it asked for."""

    def text(self) -> str:
        """The flag's ``targetUrl``: where metashift's migration stands, and what to run."""
        state, home = self._describe()
        source = f" --source {home}" if home else ""
        text = f"metashift fronts this cluster ({state}): follow it with metashift migrate status{source}"
        if self.refused is not None:
            at, target = self.refused
            stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
            text = (f"pulsar-admin metadata-migration start{' --target ' + target if target else ''} was refused at "
                    f"{stamp}: PIP-454's migration does not run beside metashift's; use metashift migrate start"
                    f"{source} --target {target or 'URL'}. " + text)
        return text

    def value(self) -> bytes:
        return json.dumps({"phase": "NOT_STARTED", "targetUrl": self.text()}, separators=(",", ":")).encode()

    def node(self) -> tuple[bytes, ZStat, list[str]]:
        value = self.value()
        return value, ZStat(data_length=len(value)), []

    def listed(self, path: str, kids: list[str]) -> list[str]:
        """The children of ``path`` as the front lists them: the flag's parent shows the flag."""
        return sorted({*kids, NAME}) if path == PARENT else kids

    def refuse(self, op: str, data: bytes | None = None) -> int:
        """A write of the flag: refused (nothing written). ``op`` "create" answers NODEEXISTS (the
        flag is there), any other NOAUTH. A create names the target Pulsar wanted: remembered."""
        target = ""
        if data:
            try:
                body = json.loads(data)
                target = str(body.get("targetUrl") or "") if isinstance(body, dict) else ""
            except (ValueError, UnicodeDecodeError):
                pass
        if op == "create":
            self.refused = (time.time(), target)
        log.warning("refused a write of PIP-454's flag (%s%s): Pulsar's own migration does not run beside "
                    "metashift's; use metashift migrate start", op, f", target {target}" if target else "",
                    extra={"fields": {"path": FLAG}})
        return Err.NODEEXISTS if op == "create" else Err.NOAUTH


def is_flag(path: str) -> bool:
    """``path`` is PIP-454's flag, or below it (nothing may be)."""
    return path == FLAG or path.startswith(FLAG + "/")
