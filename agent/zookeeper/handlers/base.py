"""What every request handler shares: ZooKeeper errors from store errors, path checks, the tree
rules of a create and of a versioned write, and the zxid."""

from __future__ import annotations

import time

from metashift.proto.errors import HeldForMigration
from metashift.stores import paths
from metashift.stores.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    NotEmpty,
    NotFound,
    StoreUnavailable,
    ValueTooLarge,
)
from metashift.stores.zookeeper.wire import Err

#: ZooKeeper's own subtree, served by the agent itself (never read from nor written to a store).
ZK_ROOT = "/zookeeper"
VIRTUAL_CHILDREN = {ZK_ROOT: ["config", "quota"], f"{ZK_ROOT}/config": [], f"{ZK_ROOT}/quota": []}
#: Attempts of a blind write (or a sequential name) whose node keeps changing under it.
MAX_ATTEMPTS = 50

#: A request's answer body (ZooKeeper's response record, encoded).
Body = bytes


class ZkError(Exception):
    """Answer the request with ZooKeeper error ``code``."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or str(code))
        self.code = code


def error_code(err: BaseException) -> int:
    """ZooKeeper's code for an error of the store or the agent."""
    if isinstance(err, ZkError):
        return err.code
    if isinstance(err, AlreadyExists):
        return Err.NODEEXISTS
    if isinstance(err, BadVersion):
        return Err.BADVERSION
    if isinstance(err, NotFound):
        return Err.NONODE
    if isinstance(err, NotEmpty):
        return Err.NOTEMPTY
    if isinstance(err, InvalidPath | ValueTooLarge | ValueError | TypeError):
        return Err.BADARGUMENTS
    if isinstance(err, HeldForMigration):
        return Err.OPERATIONTIMEOUT  # held past gate.hold_timeout: nothing was written
    if isinstance(err, StoreUnavailable):
        return Err.CONNECTIONLOSS  # ZooKeeper's word for "the outcome of a write is unknown"
    return Err.SYSTEMERROR


def check_path(path: str, sequential: bool = False) -> str:
    """``path`` if the stores take it (with a sequential suffix when ``sequential``), else BADARGUMENTS."""
    try:
        paths.validate(path + "0000000000" if sequential else path)
    except InvalidPath as e:
        raise ZkError(Err.BADARGUMENTS, str(e)) from None
    return path


def is_virtual(path: str) -> bool:
    """``path`` is ZooKeeper's own ``/zookeeper`` or below it."""
    return path == ZK_ROOT or path.startswith(ZK_ROOT + "/")


def parent_of(path: str) -> str:
    """The parent a create of ``path`` needs; a sequential ``/a/`` (-> ``/a/0000000001``) is /a's."""
    if path.endswith("/"):
        return path[:-1] or paths.SEPARATOR
    return paths.parent(path) or paths.SEPARATOR


def check_parent(parent: str, exists: bool, ephemeral: bool) -> None:
    """The check of a create (alone or in a multi) on its parent: there, and not ephemeral."""
    if not exists:
        raise ZkError(Err.NONODE, parent)
    if ephemeral:
        raise ZkError(Err.NOCHILDRENFOREPHEMERALS, parent)


def expect_version(path: str, exists: bool, version: int, expected: int) -> None:
    """The check of delete, setData and check (alone or in a multi): the node exists and, unless
    ``expected`` is -1, is at that version."""
    if not exists:
        raise ZkError(Err.NONODE, path)
    if expected != -1 and version != expected:
        raise ZkError(Err.BADVERSION, path)


class Zxid:
    """The zxid in every reply header: starts at the agent's start time (ms << 16), +1 per write,
    so it never goes back, across agent restarts too."""

    def __init__(self) -> None:
        self.value = int(time.time() * 1000) << 16

    def bump(self) -> int:
        self.value += 1
        return self.value
