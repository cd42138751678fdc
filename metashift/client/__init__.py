"""The Python client of the metashift agent, for broker-side write paths.

```python
import metashift.client

async with metashift.client.connect("unix:/run/metashift/agent.sock") as store:
    await store.put("/loadbalance/brokers/b1", b"{}", ephemeral=True)   # lives as long as `store`
    value, stat = await store.get("/admin/clusters/c1")
    await store.put("/admin/clusters/c1", b"...", expected_version=stat.version, timeout=2.0)
```

``connect`` opens a session with the agent and yields an ``AgentClient``: a ``MetadataStore``
with the same methods, argument checks, semantics and typed errors as a direct store (plus a
``timeout=`` keyword on each call: the call's deadline in seconds). Every error says with
``err.write_may_have_happened`` whether the call may have written anything: ``False``, it wrote
nothing and never will; ``True`` (``WriteOutcomeUnknown``), a write's outcome is unknown: read
before retrying. The ephemerals it creates live
exactly as long as its session. Session events (``add_session_listener``): ConnectionLost when the
agent goes away; after it comes back the client re-attaches by itself and reports SessionLost then
SessionReestablished (the old session's ephemerals are gone, like an expired ZooKeeper session);
events of the agent's own store session are forwarded as they happen.
"""

from __future__ import annotations

from metashift.client.agent_client import DEFAULT_SESSION_TIMEOUT, DEFAULT_TIMEOUT, AgentClient, connect
from metashift.proto.errors import HeldForMigration, WriteOutcomeUnknown

__all__ = [
    "DEFAULT_SESSION_TIMEOUT", "DEFAULT_TIMEOUT", "AgentClient", "HeldForMigration", "WriteOutcomeUnknown", "connect",
]
