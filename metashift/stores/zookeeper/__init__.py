"""ZooKeeper backend of the store layer, on aiozk, with Pulsar's ``ZKMetadataStore`` semantics.

``store.ZooKeeperStore`` opens and closes it and delegates to its parts, one module each:

- ``session``: aiozk's session made fit for a long-lived service (``ZKSession``), on the
  connection of ``connection``; ``session_events``: its states as Pulsar's session events;
- ``tls``: the TLS context of a ``tls=true`` URL and the one line of a failed handshake;
  ``sasl``: ZooKeeper's SASL exchange after the handshake, and DIGEST-MD5 (pure-sasl);
  ``kerberos``: GSSAPI (RFC 4752 on python-gssapi); ``session_lives``: what the four-letter
  commands tell of other sessions;
- ``calls``: sending a request (bounded, errors mapped by ``errors``) and building it;
- ``operations``: single operations and the ``multi`` of a batch of writes;
- ``watches``: the persistent recursive watches and their notifications;
- ``bulk_reads``: many reads at once (multiRead, or pipelined); ``tree_reads``: the copy's walk
  and reads of subtrees; ``restores``: its writes at given versions; ``sequence_counters``:
  sequence counters, raised by ``counter_bumps``;
- ``forward``: the agent's requests forwarded in wire form (``raw``: such requests);
- ``fast_reads``, ``fast_writes``: answers parsed with ``struct``; ``wire``: the codec, where
  every ZooKeeper number and the one parser of a Stat's bytes live.
"""

from __future__ import annotations

from .operations import DEFAULT_MAX_VALUE_SIZE
from .store import ZooKeeperStore

__all__ = ["DEFAULT_MAX_VALUE_SIZE", "ZooKeeperStore"]
