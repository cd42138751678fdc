"""The store layer: Pulsar's ``MetadataStore`` API (``api.py``), the bulk interface of the copy
(``bulk.py``), and one package per backend (``zookeeper/``, ``etcd/``, ``oxia/``) implementing both."""

from __future__ import annotations

from .api import MetadataStore
from .bulk import BulkStore, NodeInfo, NodeRead, Restore, SessionLife
from .errors import (
    AlreadyExists,
    AuthFailed,
    BadVersion,
    InvalidPath,
    InvalidStoreURL,
    MetadataStoreError,
    NotEmpty,
    NotFound,
    StoreFull,
    StoreUnavailable,
    ValueTooLarge,
)
from .handover import SessionHandle
from .notifications import Notification, NotificationType, SessionEvent
from .ops import DeleteOp, ExistsOp, GetChildrenOp, GetOp, Op, OpResult, PutOp
from .stat import Stat
from .store import Store
from .urls import StoreURL
from .urls import parse as parse_url


async def open_store(
    url: str | StoreURL, *, watch: bool = True, create_root: bool = True, resume: SessionHandle | None = None
) -> Store:
    """Connect to the store named by ``url`` (``zk://...``, ``etcd://...`` or ``oxia://...``) and open
    a session.

    Raises ``InvalidStoreURL`` for a malformed URL (nothing is contacted), ``StoreUnavailable``
    when no server answers, ``AuthFailed`` when credentials are refused. ``watch=False``: no
    notifications (bulk jobs, which do not want every write they make streamed back to them).
    ``create_root=False``: a ZooKeeper chroot that does not exist is ``NotFound`` instead of
    being created (a store that must only be read: the copy's source, both sides of a verify).
    ``resume``: a session a predecessor process handed over (``Store.session_handle()``), taken
    back where the store still has it (``Store.resumed``); else a new session.
    """
    parsed = parse_url(url) if isinstance(url, str) else url
    if parsed.scheme == "zk":
        from .zookeeper import ZooKeeperStore

        return await ZooKeeperStore.connect(parsed, watch=watch, create_root=create_root, resume=resume)
    if parsed.scheme == "oxia":
        from .oxia import OxiaStore

        return await OxiaStore.connect(parsed, watch=watch, resume=resume)
    from .etcd import EtcdStore

    return await EtcdStore.connect(parsed, watch=watch, resume=resume)


__all__ = [
    "AlreadyExists",
    "AuthFailed",
    "BadVersion",
    "BulkStore",
    "DeleteOp",
    "ExistsOp",
    "GetChildrenOp",
    "GetOp",
    "InvalidPath",
    "InvalidStoreURL",
    "MetadataStore",
    "MetadataStoreError",
    "NodeInfo",
    "NodeRead",
    "NotEmpty",
    "NotFound",
    "Notification",
    "NotificationType",
    "Op",
    "OpResult",
    "PutOp",
    "Restore",
    "SessionEvent",
    "SessionHandle",
    "SessionLife",
    "Stat",
    "Store",
    "StoreFull",
    "StoreURL",
    "StoreUnavailable",
    "ValueTooLarge",
    "open_store",
    "parse_url",
]
