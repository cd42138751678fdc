"""A store session handed from one process to the next: what a successor needs to resume it.

An agent that restarts (an upgrade, a crash) gives its members their sessions back only if the
store-side session that holds their ephemerals is still its own. Each store allows that to a
different degree, and ``SessionHandle`` carries exactly what each needs:

- ZooKeeper: the session id and password. A client that reconnects with them within the session
  timeout gets the session back (ZooKeeper's own reconnect), with its ephemerals and their owner.
- etcd: the lease id. A lease belongs to nobody: whoever refreshes it keeps it alive, and a
  process that puts under the same id holds the same keys (``created_by_self`` compares the id).
- Oxia: the client identity and the session id on each shard. Oxia's sessions are kept alive by
  ``KeepAlive(shard, session_id)`` from any client; its docs say sessions are "not designed to be
  reattached across process restarts", meaning its own clients make new ones: the server keeps a
  session for as long as heartbeats come, whoever sends them; ``created_by_self`` compares a
  record's ``client_identity`` and its session with the ones the store holds.

The password and the ids are secrets of the session (whoever has them can act as it): they are
kept in the agent's state file (mode 0600 on a tmpfs), never logged, never in the store.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SessionHandle:
    """What a successor process needs to resume one store's session (``open_store(resume=)``)."""

    kind: str
    """The store's scheme: ``zk``, ``etcd`` or ``oxia``."""
    id: int = 0
    """ZooKeeper: the session id; etcd: the lease id; Oxia: unused (0)."""
    secret: bytes = field(default=b"", repr=False)
    """ZooKeeper: the session's password."""
    identity: str = ""
    """Oxia: the client identity of the store's ephemeral records."""
    shards: tuple[tuple[int, int], ...] = ()
    """Oxia: (shard id, session id) of every shard the store holds a session on."""
    timeout: float = 0.0
    """The session's timeout (seconds) as the store granted it."""
    last_zxid: int = 0
    """ZooKeeper: the last zxid the session saw (a reconnect must not go back in time)."""

    def to_json(self) -> dict[str, Any]:
        """The handle as JSON values (the secret base64)."""
        return {"kind": self.kind, "id": self.id, "secret": base64.b64encode(self.secret).decode(),
                "identity": self.identity, "shards": [list(s) for s in self.shards],
                "timeout": self.timeout, "last_zxid": self.last_zxid}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionHandle:
        """The handle ``to_json`` wrote; ``ValueError`` on anything else."""
        try:
            return cls(
                kind=str(data["kind"]), id=int(data["id"]), secret=base64.b64decode(data.get("secret", "")),
                identity=str(data.get("identity", "")),
                shards=tuple((int(s), int(i)) for s, i in data.get("shards", [])),
                timeout=float(data.get("timeout", 0.0)), last_zxid=int(data.get("last_zxid", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a session handle: {e}") from None
