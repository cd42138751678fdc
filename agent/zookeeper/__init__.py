"""ZooKeeper's client protocol served by the agent (the "ZooKeeper front"), one file per concern:

- the codec (jute encoding, opcodes, error codes, records) is the store layer's, shared with its
  ZooKeeper connection: ``metashift.stores.zookeeper.wire``;
- ``server``: ``ZooKeeperServer``, the TCP listener, a connection's handshake, the four-letter facts;
- ``connection``: ``ClientConnection``, a connection's send side, and ZooKeeper's framing;
- ``request_loop``: ``RequestLoop``, a connection's requests: passed through or queued in order;
- ``replies``: ``Replies``, a connection's answers in request order;
- ``backend``: ``Backend``, the store behind the front, one implementation per kind of store
  (``StoreBackend`` for etcd and Oxia); ``passthrough``: ``PassThroughBackend``, a ZooKeeper
  store's; ``owners``: the ephemerals in its answers; ``backends``: ``ActiveBackend``, the one
  of the router's active store, swapped at every switch;
- ``handlers/``: the ordinary path through the ``MetadataStore`` API, one collaborator per kind of
  request, one method per opcode (``Handlers``: the table);
- ``session``: ZooKeeper sessions, each one an agent client session (``ZkSessions``);
- ``watches``: one-shot, persistent and persistent recursive watches fed by the active store;
- ``stat``: a store ``Stat`` as ZooKeeper's 11-field Stat;
- ``four_letter``: ``ruok``, ``srvr``, ``mntr``, ...; ``pip454``: PIP-454's flag, the front's own;
- ``sasl``: SASL at the front, per connection (``FrontSasl``, ``SaslExchange``); ``sasl_digest``:
  DIGEST-MD5's server side; ``sasl_users``: the users file (``zookeeper.sasl_users_file``).
"""
