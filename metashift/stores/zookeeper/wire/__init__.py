"""ZooKeeper's client wire protocol (jute): a 3.5-3.9 client's and server's records, written once
for the project (the agent's ZooKeeper front serves it, the store layer's ZooKeeper connection
sends it and parses its answers). Pure encoding; no I/O, no store. One module per concern:

- ``constants``: opcodes, error codes, create modes, event types, permissions, special xids,
  limits; every ZooKeeper number the project uses is here;
- ``jute``: the primitives, the framing, and the ACL and Stat records (``ZStat``: the one parser
  of a Stat's bytes);
- ``headers``: the connection handshake and the request/reply headers;
- ``requests``: the request records and ``decode_request``;
- ``responses``: framed replies, multi results, watch notifications.

Framing: every packet is a 4-byte big-endian length, then the record(s). The first packet of a
connection is a ``ConnectRequest`` (no header); after it, requests are ``RequestHeader`` + body and
replies ``ReplyHeader`` + body (no body when ``err`` is not 0).
"""

from metashift.stores.zookeeper.wire.constants import (
    AUTH_TYPE,
    JUTE_MAXBUFFER,
    MAX_VERSION,
    MAX_XID,
    PROTOCOL_VERSION,
    XID_AUTH,
    XID_PING,
    XID_SET_WATCHES,
    XID_WATCH_EVENT,
    AddWatchMode,
    CreateMode,
    Err,
    EventType,
    KeeperState,
    Op,
    Perms,
    WatcherType,
)
from metashift.stores.zookeeper.wire.headers import ConnectRequest, ConnectResponse, ReplyHeader, RequestHeader
from metashift.stores.zookeeper.wire.jute import (
    ACL,
    OPEN_ACL_UNSAFE,
    DecodeError,
    Reader,
    Writer,
    ZStat,
    frame,
    owner_at_end,
    stat_at_end,
    with_owner_at_end,
)
from metashift.stores.zookeeper.wire.requests import (
    MULTI_OPS,
    REQUESTS,
    AddWatchRequest,
    AuthRequest,
    CheckVersionRequest,
    CreateFields,
    CreateRequest,
    DeleteRequest,
    EmptyRequest,
    MultiRequest,
    PathRequest,
    PathWatchRequest,
    RemoveWatchesRequest,
    SetACLRequest,
    SetDataRequest,
    SetWatchesRequest,
    decode_request,
)
from metashift.stores.zookeeper.wire.responses import (
    ChildInfo,
    MultiResult,
    encode_multi,
    reply,
    stat_body,
    watch_event,
)

__all__ = [
    "ACL",
    "AUTH_TYPE",
    "JUTE_MAXBUFFER",
    "MAX_VERSION",
    "MAX_XID",
    "MULTI_OPS",
    "OPEN_ACL_UNSAFE",
    "PROTOCOL_VERSION",
    "REQUESTS",
    "XID_AUTH",
    "XID_PING",
    "XID_SET_WATCHES",
    "XID_WATCH_EVENT",
    "AddWatchMode",
    "AddWatchRequest",
    "AuthRequest",
    "CheckVersionRequest",
    "ChildInfo",
    "ConnectRequest",
    "ConnectResponse",
    "CreateFields",
    "CreateMode",
    "CreateRequest",
    "DecodeError",
    "DeleteRequest",
    "EmptyRequest",
    "Err",
    "EventType",
    "KeeperState",
    "MultiRequest",
    "MultiResult",
    "Op",
    "PathRequest",
    "PathWatchRequest",
    "Perms",
    "Reader",
    "RemoveWatchesRequest",
    "ReplyHeader",
    "RequestHeader",
    "SetACLRequest",
    "SetDataRequest",
    "SetWatchesRequest",
    "WatcherType",
    "Writer",
    "ZStat",
    "decode_request",
    "encode_multi",
    "frame",
    "owner_at_end",
    "reply",
    "stat_at_end",
    "stat_body",
    "watch_event",
    "with_owner_at_end",
]
