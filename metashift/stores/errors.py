"""Errors every store raises, each naming the path it is about.

The hierarchy mirrors Pulsar's ``MetadataStoreException`` family so that code written against
Pulsar's semantics catches the same things: ``AlreadyExists`` is a ``BadVersion`` because Pulsar
reports a failed ``expected_version=-1`` create as a bad version.
"""

from __future__ import annotations


class MetadataStoreError(Exception):
    """Base of every error a store raises."""

    write_may_have_happened: bool = True
    """False: the call wrote nothing and never will (safe to retry as is). True: a write's outcome
    is unknown, as after ZooKeeper's ConnectionLoss; it may have been applied or be applied later:
    read before retrying. Through the agent (``metashift.client``) it is exact for every answer
    (reads always False); on a store opened directly it follows the error's class."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}: {path}" if path is not None else message)


class NotFound(MetadataStoreError):
    """The node does not exist (the store refused the call)."""

    write_may_have_happened = False

    def __init__(self, path: str, message: str = "node does not exist") -> None:
        super().__init__(message, path)


class BadVersion(MetadataStoreError):
    """The node's version is not the expected one (the store refused the call)."""

    write_may_have_happened = False

    def __init__(self, path: str, message: str = "version does not match") -> None:
        super().__init__(message, path)


class AlreadyExists(BadVersion):
    """A create (``expected_version=-1``) found the node already there."""

    def __init__(self, path: str, message: str = "node already exists") -> None:
        super().__init__(path, message)


class NotEmpty(MetadataStoreError):
    """ZooKeeper refuses to delete a node that has children; etcd (like Pulsar's) does not."""

    write_may_have_happened = False

    def __init__(self, path: str, message: str = "node has children") -> None:
        super().__init__(message, path)


class ValueTooLarge(MetadataStoreError):
    """The value (with its path) is over the store's request limit; refused before sending."""

    write_may_have_happened = False

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"value of {size} bytes is over the store's limit of {limit} bytes", path)


class InvalidPath(MetadataStoreError):
    """The path breaks the path rules; refused before sending."""

    write_may_have_happened = False

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"invalid path ({reason})", path)


class StoreUnavailable(MetadataStoreError):
    """The store could not be reached (or stopped answering) for this call; the call may be retried."""


class StoreFull(StoreUnavailable):
    """The store refuses writes because it ran out of space (etcd's NOSPACE alarm, "mvcc: database
    space exceeded"): an operator must compact, defragment and disarm the alarm (or raise the quota)."""

    write_may_have_happened = False


class AuthFailed(MetadataStoreError):
    """The store refused our credentials."""

    write_may_have_happened = False


class InvalidStoreURL(MetadataStoreError, ValueError):
    """A store URL that cannot be parsed; raised before anything is contacted."""

    write_may_have_happened = False
