"""metashift: move an Apache Pulsar cluster's metadata between stores without downtime.

The names a user script needs are here: ``await metashift.open_store("zk://127.0.0.1:2181")``
and the store errors.
"""

from metashift.stores import (
    AlreadyExists,
    AuthFailed,
    BadVersion,
    InvalidPath,
    InvalidStoreURL,
    MetadataStore,
    MetadataStoreError,
    NotEmpty,
    NotFound,
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
    Store,
    StoreFull,
    StoreUnavailable,
    ValueTooLarge,
    open_store,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "AuthFailed",
    "BadVersion",
    "InvalidPath",
    "InvalidStoreURL",
    "MetadataStore",
    "MetadataStoreError",
    "NotEmpty",
    "NotFound",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "Stat",
    "Store",
    "StoreFull",
    "StoreUnavailable",
    "ValueTooLarge",
    "open_store",
]
