"""ZooKeeper's client protocol served by the agent (the "ZooKeeper front"), one file per concern:

- the codec (jute encoding, opcodes, error codes, records) is the store layer's, shared with its
  ZooKeeper connection: ``metashift.stores.zookeeper.wire``;
- ``stat``: a store ``Stat`` as ZooKeeper's 11-field Stat;
- ``session``: ZooKeeper sessions, each one an agent client session (``SessionRegistry``);
- ``watches``: one-shot, persistent and persistent recursive watches fed by the active store;
- ``handlers/``: one coroutine per request type, reads on the router, writes through the gate
  (one module per kind of request);
- ``server``: the TCP listener, framing, request order, pings.
"""
