"""aiozk's errors mapped onto the store's (``errors.py``), and the ZooKeeper store's own: a SASL
refusal (``SaslRefused``), ZooKeeper's ``SessionClosedRequireSaslAuth`` (aiozk knows no -124)."""

from __future__ import annotations

from aiozk import exc as zk_exc

from .. import errors
from ..urls import StoreURL
from .wire.constants import Err


class SaslRefused(Exception):
    """SASL failed for good with a server: it refused, or the client could not make its tokens
    (no Kerberos ticket, ...). One line, naming the user or principal, never a secret."""


class SessionClosedRequireSaslAuth(zk_exc.ResponseError):
    """ZooKeeper's answer to a request on a connection not SASL-authenticated, on a server with
    ``zookeeper.sessionRequireClientSASLAuth=true`` (it closes the connection after it). Defining
    it registers the code with aiozk (its errors' metaclass), which otherwise answers
    ``UnknownError`` and prints the code to stdout."""

    error_code = Err.SESSIONCLOSEDREQUIRESASLAUTH


def map_error(e: BaseException, path: str, url: StoreURL) -> errors.MetadataStoreError:
    """The store error for aiozk's (or the socket's) error ``e`` on a call about ``path``."""
    if isinstance(e, errors.MetadataStoreError):
        return e
    if isinstance(e, zk_exc.NoNode):
        return errors.NotFound(path)
    if isinstance(e, zk_exc.NodeExists):
        return errors.AlreadyExists(path)
    if isinstance(e, zk_exc.BadVersion):
        return errors.BadVersion(path)
    if isinstance(e, zk_exc.NotEmpty):
        return errors.NotEmpty(path)
    if isinstance(e, SessionClosedRequireSaslAuth):
        return errors.AuthFailed(f"ZooKeeper at {url.host_string()} requires SASL authentication "
                                 "(sessionRequireClientSASLAuth): give sasl=DIGEST-MD5 or sasl=GSSAPI", path)
    if isinstance(e, zk_exc.NoAuth | zk_exc.AuthFailed | zk_exc.InvalidACL):
        who = f"user {url.username!r}" if url.username else "an unauthenticated client"
        return errors.AuthFailed(f"ZooKeeper denies access to {who}", path)
    if isinstance(e, zk_exc.BadArguments):
        # ZooKeeper checks paths on UTF-16 code units: it refuses any character outside the BMP.
        return errors.InvalidPath(path, "ZooKeeper refuses this path")
    if isinstance(e, zk_exc.NoChildrenForEphemerals):
        return errors.InvalidPath(path, "an ephemeral node cannot have children")
    if isinstance(e, TimeoutError):
        return errors.StoreUnavailable(
            f"ZooKeeper at {url.host_string()} did not answer within {url.call_timeout:g}s", path
        )
    if isinstance(
        e,
        zk_exc.ConnectError
        | zk_exc.ConnectionLoss
        | zk_exc.SessionExpired
        | zk_exc.SessionMoved
        | zk_exc.OperationTimeout
        | zk_exc.FailedRetry
        | zk_exc.SessionLost
        | zk_exc.TimeoutError
        | zk_exc.InvalidStateTransition
        | zk_exc.UnfinishedRead
        | OSError,
    ):
        return errors.StoreUnavailable(f"lost the connection to ZooKeeper at {url.host_string()} ({e!r})", path)
    return errors.MetadataStoreError(f"ZooKeeper error {e!r}", path)
