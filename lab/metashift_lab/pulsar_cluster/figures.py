"""What a run of a real Pulsar cluster through a migration measured (``PulsarFigures``): its
messages, ledger ids, latencies and troubles, as the sandbox report shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import evidence


@dataclass
class PulsarFigures:
    """What a Pulsar migration run measured; ``json_fields`` are the sandbox report's Pulsar fields."""

    pulsar_version: str
    messages_published: int = 0
    messages_acknowledged: int = 0
    messages_received: int = 0
    messages_lost: int = 0
    messages_duplicated: int = 0
    ledger_ids_reused: int = 0
    max_publish_latency_ms: float = 0.0
    native_restart: dict[str, Any] = field(
        default_factory=lambda: {"store": None, "ok": False, "topics": 0, "messages_read": 0})
    """The restart on the target's own URLs with no agent: ``store``, ``ok``, ``topics``, ``messages_read``."""
    # the rest is shown on stderr and in the text report
    messages_failed: int = 0
    ledger_ids: str = ""
    max_metadata_op_ms: float | None = None
    freeze_publish_latency_ms: float = 0.0
    troubles: list[str] = field(default_factory=list)
    """Restarts, lost sessions, metadata errors, failed admin calls, client errors."""
    bundle_owners: dict[str, int] = field(default_factory=dict)
    admin_updates: int = 0
    pip454: dict[str, Any] | None = None
    """A release with PIP-454's own migration: what it did (``Pip454Figures``; nothing, it must)."""
    disconnections: list[str] = field(default_factory=list)
    """Times a process's session watcher got no answer for 2 s (ConnectionLost) and then one
    (reconnected by itself: the session was kept)."""

    def json_fields(self) -> dict[str, Any]:
        return {
            "pulsar_version": self.pulsar_version,
            "messages_published": self.messages_published,
            "messages_acknowledged": self.messages_acknowledged,
            "messages_received": self.messages_received,
            "messages_lost": self.messages_lost,
            "messages_duplicated": self.messages_duplicated,
            "ledger_ids_reused": self.ledger_ids_reused,
            "max_publish_latency_ms": self.max_publish_latency_ms,
            "native_restart": self.native_restart,
            **({"etcd_restart": self.etcd_restart} if self.native_restart.get("store") == "etcd" else {}),
            **({"pip454": self.pip454} if self.pip454 is not None else {}),
        }

    @property
    def etcd_restart(self) -> dict[str, Any]:
        """The restart on etcd (the field of the reports before other targets): ``native_restart``
        without ``store``."""
        return {k: v for k, v in self.native_restart.items() if k != "store"}

    def text_lines(self) -> list[str]:
        restart = self.native_restart
        owners = ", ".join(f"{web} {n}" for web, n in self.bundle_owners.items())
        metadata_op = metadata_op_text(self.max_metadata_op_ms)
        return [
            f"  pulsar         {self.pulsar_version}: a bookie and two brokers beside their agents; bundles {owners}",
            f"  messages       {self.messages_published} published, {self.messages_acknowledged} acknowledged, "
            f"{self.messages_received} received, {self.messages_lost} lost, {self.messages_duplicated} duplicated",
            f"  publish        longest {self.max_publish_latency_ms:.0f} ms ({self.freeze_publish_latency_ms:.0f} ms "
            f"through the freeze); longest broker metadata operation {metadata_op}",
            f"  ledger ids     {self.ledger_ids or '-'}",
            f"  native restart {'ok' if restart.get('ok') else 'FAILED'} on {restart.get('store') or '-'}: "
            f"{restart.get('topics')} topics, {restart.get('messages_read')} kept messages read back with no agent",
            f"  troubles       {len(self.troubles)}; metadata connection lost and regained "
            f"{len(self.disconnections)} time(s)",
            *[f"    {line}" for line in self.disconnections[:10]],
        ]

    @property
    def ok(self) -> bool:
        return self.messages_lost == 0 and self.ledger_ids_reused == 0 and bool(self.native_restart.get("ok"))


def metadata_op_text(bound: float | None) -> str:
    """The brokers' longest metadata operation as their histogram bounds it."""
    if bound is None:
        return "- (no histogram)"
    if bound == float("inf"):
        return f"> {evidence.LARGEST_OPS_BUCKET_MS:g} ms (beyond the histogram's largest bucket)"
    return f"<= {bound:g} ms (histogram bucket)"
