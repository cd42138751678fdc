"""ZooKeeper's numbers: opcodes (``ZooDefs.OpCode``), error codes (``KeeperException.Code``),
create modes, watch event types and states, watcher types, addWatch modes, permissions, the
special xids of packets outside the request/response order, and the limits of its fields."""

from __future__ import annotations

# ---- opcodes (ZooDefs.OpCode) -------------------------------------------------------------------


class Op:
    """ZooKeeper's request opcodes."""

    NOTIFICATION = 0
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    GET_EPHEMERALS = 103
    GET_ALL_CHILDREN_NUMBER = 104
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    WHO_AM_I = 107
    CREATE_SESSION = -10
    CLOSE_SESSION = -11
    ERROR = -1


# ---- error codes (KeeperException.Code) ---------------------------------------------------------


class Err:
    """ZooKeeper's error codes (KeeperException.Code)."""

    OK = 0
    SYSTEMERROR = -1
    RUNTIMEINCONSISTENCY = -2
    DATAINCONSISTENCY = -3
    CONNECTIONLOSS = -4
    MARSHALLINGERROR = -5
    UNIMPLEMENTED = -6
    OPERATIONTIMEOUT = -7
    BADARGUMENTS = -8
    UNKNOWNSESSION = -12
    APIERROR = -100
    NONODE = -101
    NOAUTH = -102
    BADVERSION = -103
    NOCHILDRENFOREPHEMERALS = -108
    NODEEXISTS = -110
    NOTEMPTY = -111
    SESSIONEXPIRED = -112
    INVALIDCALLBACK = -113
    INVALIDACL = -114
    AUTHFAILED = -115
    SESSIONMOVED = -118
    NOTREADONLY = -119
    NOWATCHER = -121
    REQUESTTIMEOUT = -122
    SESSIONCLOSEDREQUIRESASLAUTH = -124


class CreateMode:
    """ZooKeeper's create modes (persistent, ephemeral, sequential, container, TTL)."""

    PERSISTENT = 0
    EPHEMERAL = 1
    PERSISTENT_SEQUENTIAL = 2
    EPHEMERAL_SEQUENTIAL = 3
    CONTAINER = 4
    PERSISTENT_WITH_TTL = 5
    PERSISTENT_SEQUENTIAL_WITH_TTL = 6

    @staticmethod
    def of(ephemeral: bool, sequential: bool) -> int:
        """The mode of a create that is (or not) ephemeral and (or not) sequential."""
        return (CreateMode.EPHEMERAL if ephemeral else 0) | (CreateMode.PERSISTENT_SEQUENTIAL if sequential else 0)

    @staticmethod
    def ephemeral(flags: int) -> bool:
        return flags in (CreateMode.EPHEMERAL, CreateMode.EPHEMERAL_SEQUENTIAL)

    @staticmethod
    def sequential(flags: int) -> bool:
        return flags in (
            CreateMode.PERSISTENT_SEQUENTIAL, CreateMode.EPHEMERAL_SEQUENTIAL, CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL
        )


class EventType:
    """The types of watch events."""

    NONE = -1
    NODE_CREATED = 1
    NODE_DELETED = 2
    NODE_DATA_CHANGED = 3
    NODE_CHILDREN_CHANGED = 4
    DATA_WATCH_REMOVED = 5
    CHILD_WATCH_REMOVED = 6
    PERSISTENT_WATCH_REMOVED = 7


class KeeperState:
    """The session states a watch event carries."""

    DISCONNECTED = 0
    SYNC_CONNECTED = 3
    AUTH_FAILED = 4
    CONNECTED_READ_ONLY = 5
    EXPIRED = -112
    CLOSED = 7


class WatcherType:
    """Which watches removeWatches / checkWatches name (``PERSISTENT_RECURSIVE``, 5, exists only
    from 3.9: a 3.8 answers MarshallingError; ``ANY`` ends a persistent recursive watch too)."""

    CHILDREN = 1
    DATA = 2
    ANY = 3


class AddWatchMode:
    """addWatch's modes: persistent, persistent recursive."""

    PERSISTENT = 0
    PERSISTENT_RECURSIVE = 1


class Perms:
    """ACL permission bits."""

    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


#: Special xids of packets outside the request/response order.
XID_WATCH_EVENT = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

#: The protocol version a ConnectRequest names (the only one there is).
PROTOCOL_VERSION = 0
#: The ``type`` of an AuthPacket (ZooKeeper reads none other).
AUTH_TYPE = 0

#: The largest xid; the next one wraps to 1 (xids are 32-bit, the negative ones are special).
MAX_XID = 0x7FFFFFFF
#: The largest version of a node (versions are 32-bit).
MAX_VERSION = 2**31 - 1
#: The server's default ``jute.maxbuffer``: the largest packet (path, data, ACL, headers) it takes.
JUTE_MAXBUFFER = 0xFFFFF
