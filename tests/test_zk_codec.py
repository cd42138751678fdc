"""The ZooKeeper codec (metashift.stores.zookeeper.wire) against the bytes kazoo itself serializes and parses."""

from __future__ import annotations

import struct
from dataclasses import astuple

import pytest
from kazoo.protocol import serialization as ks
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL as KACL
from kazoo.security import OPEN_ACL_UNSAFE, Id

from metashift.stores.zookeeper import wire
from metashift.stores.zookeeper.wire import ACL, Err, MultiResult, Op, Reader, Writer, ZStat


def packet(xid: int, request: object) -> bytes:
    """A request as kazoo puts it on the wire (without the length prefix): header, then body."""
    return struct.pack("!ii", xid, request.type) + bytes(request.serialize())  # type: ignore[attr-defined]


def test_connect_request_from_kazoo() -> None:
    data = bytes(ks.Connect(0, 1234, 30000, 0x55, b"p" * 16, True).serialize())
    req = wire.ConnectRequest.decode(data)
    assert (req.protocol_version, req.last_zxid_seen, req.timeout, req.session_id) == (0, 1234, 30000, 0x55)
    assert req.passwd == b"p" * 16 and req.read_only is True
    assert wire.ConnectRequest.decode(req.encode()) == req


def test_connect_request_without_read_only_flag() -> None:
    data = struct.pack("!iqiq", 0, 0, 10000, 0) + struct.pack("!i", 16) + bytes(16)
    assert wire.ConnectRequest.decode(data).read_only is None


def test_connect_response_read_by_kazoo() -> None:
    data = wire.ConnectResponse(0, 12000, 0x1234, b"s" * 16, False).encode()
    got, _ = ks.Connect.deserialize(data, 0)
    assert (got.time_out, got.session_id, got.passwd, got.read_only) == (12000, 0x1234, b"s" * 16, False)


@pytest.mark.parametrize(("request_", "expected"), [
    (ks.Create("/a/b", b"v", OPEN_ACL_UNSAFE, 3),
     wire.CreateRequest("/a/b", b"v", [ACL(31, "world", "anyone")], 3)),
    (ks.Create2("/a", b"", [KACL(1, Id("digest", "u:h"))], 0),
     wire.CreateRequest("/a", b"", [ACL(1, "digest", "u:h")], 0)),
    (ks.Delete("/a", 7), wire.DeleteRequest("/a", 7)),
    (ks.Exists("/a", True), wire.PathWatchRequest("/a", True)),
    (ks.GetData("/a", False), wire.PathWatchRequest("/a", False)),
    (ks.SetData("/a", b"xyz", -1), wire.SetDataRequest("/a", b"xyz", -1)),
    (ks.GetACL("/a"), wire.PathRequest("/a")),
    (ks.SetACL("/a", OPEN_ACL_UNSAFE, 2), wire.SetACLRequest("/a", [ACL(31, "world", "anyone")], 2)),
    (ks.GetChildren("/a", True), wire.PathWatchRequest("/a", True)),
    (ks.GetChildren2("/a", False), wire.PathWatchRequest("/a", False)),
    (ks.Sync("/a"), wire.PathRequest("/a")),
    (ks.Auth(0, "digest", "user:pw"), wire.AuthRequest(0, "digest", b"user:pw")),
])
def test_requests_from_kazoo(request_: object, expected: object) -> None:
    header, body = wire.decode_request(packet(5, request_))
    assert header == wire.RequestHeader(5, request_.type)  # type: ignore[attr-defined]
    assert body == expected


@pytest.mark.parametrize("request_", [
    ks.Create("/a/b", b"v" * 300, OPEN_ACL_UNSAFE, 3),
    ks.Create2("/a", b"", [KACL(1, Id("digest", "u:h")), KACL(31, Id("ip", "10.0.0.1"))], 1),
    ks.Create("/\u00e9", None, OPEN_ACL_UNSAFE, 0),  # null data
    ks.Create("/a", b"x", [], 0),  # no ACL: refused by the front's ordinary path (INVALIDACL)
])
def test_create_fields_read_what_the_full_record_reads(request_: object) -> None:
    """What a forwarder reads of a create (the ACL read past, not decoded) agrees with the full
    record, and its data field is the data in wire form: null data becomes empty."""
    data = packet(5, request_)
    full = wire.CreateRequest.read(Reader(data, 8))
    fields = wire.CreateFields.read(Reader(data, 8))
    assert (fields.path, fields.data, fields.acl_count, fields.flags) == (full.path, full.data, len(full.acl),
                                                                           full.flags)
    assert fields.data_field == struct.pack("!i", len(full.data)) + full.data


def test_create_fields_refuse_a_truncated_or_impossible_acl() -> None:
    data = packet(5, ks.Create("/a", b"v", [KACL(1, Id("digest", "u:h"))], 0))
    for cut in range(9, len(data)):
        with pytest.raises(wire.DecodeError):
            wire.CreateFields.read(Reader(data[:cut], 8))
    at = data.index(struct.pack("!i", 1) + struct.pack("!i", 1))  # the ACL count, then perms
    huge = data[:at] + struct.pack("!i", 10**9) + data[at + 4 :]
    with pytest.raises(wire.DecodeError):
        wire.CreateFields.read(Reader(huge, 8))


def test_ping_and_close_from_kazoo() -> None:
    assert wire.decode_request(packet(-2, ks.Ping)) == (wire.RequestHeader(-2, Op.PING), wire.EmptyRequest())
    assert wire.decode_request(packet(9, ks.Close)) == (wire.RequestHeader(9, Op.CLOSE_SESSION), wire.EmptyRequest())


def test_multi_from_kazoo() -> None:
    txn = ks.Transaction([
        ks.Create("/x", b"1", OPEN_ACL_UNSAFE, 0), ks.Delete("/y", 3),
        ks.SetData("/z", b"2", 1), ks.CheckVersion("/w", 4),
    ])
    header, body = wire.decode_request(packet(1, txn))
    assert header.type == Op.MULTI
    assert body.ops == [
        (Op.CREATE, wire.CreateRequest("/x", b"1", [ACL(31, "world", "anyone")], 0)),
        (Op.DELETE, wire.DeleteRequest("/y", 3)),
        (Op.SET_DATA, wire.SetDataRequest("/z", b"2", 1)),
        (Op.CHECK, wire.CheckVersionRequest("/w", 4)),
    ]


def test_set_watches_and_add_watch() -> None:
    w = Writer().long(77).strings(["/d"]).strings(["/e"]).strings(["/c"]).strings(["/p"]).strings(["/r"])
    data = struct.pack("!ii", -8, Op.SET_WATCHES2) + w.bytes()
    _, body = wire.decode_request(data)
    assert body == wire.SetWatchesRequest(77, ["/d"], ["/e"], ["/c"], ["/p"], ["/r"])
    data = struct.pack("!ii", 3, Op.ADD_WATCH) + Writer().string("/a").int(1).bytes()
    assert wire.decode_request(data)[1] == wire.AddWatchRequest("/a", 1)


def test_unknown_opcode_has_no_body_and_truncated_body_fails() -> None:
    assert wire.decode_request(struct.pack("!ii", 1, 9999)) == (wire.RequestHeader(1, 9999), None)
    with pytest.raises(wire.DecodeError):
        wire.decode_request(packet(1, ks.SetData("/a", b"x", 1))[:-2])


STAT = ZStat(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def _kazoo_reply(data: bytes) -> tuple[ks.ReplyHeader, int]:
    length = struct.unpack_from("!i", data)[0]
    assert length == len(data) - 4
    return ks.ReplyHeader.deserialize(data[4:], 0)


def test_replies_read_by_kazoo() -> None:
    data = wire.reply(4, 99, 0, Writer().buffer(b"val").stat(STAT).bytes())
    header, offset = _kazoo_reply(data)
    assert header == ks.ReplyHeader(4, 99, 0)
    value, stat = ks.GetData.deserialize(data[4:], offset)
    assert value == b"val" and stat == ZnodeStat(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    data = wire.reply(5, 100, 0, Writer().strings(["a", "b"]).stat(STAT).bytes())
    header, offset = _kazoo_reply(data)
    assert ks.GetChildren2.deserialize(data[4:], offset) == (["a", "b"], ZnodeStat(*STAT.__dict__.values()))
    data = wire.reply(6, 101, 0, Writer().string("/p0000000001").stat(STAT).bytes())
    header, offset = _kazoo_reply(data)
    assert ks.Create2.deserialize(data[4:], offset)[0] == "/p0000000001"
    data = wire.reply(7, 102, 0, Writer().acls([ACL(31, "world", "anyone")]).stat(STAT).bytes())
    header, offset = _kazoo_reply(data)
    acls, stat = ks.GetACL.deserialize(data[4:], offset)
    assert acls[0].perms == 31 and acls[0].id == Id("world", "anyone")


def test_error_reply_has_no_body() -> None:
    data = wire.reply(8, 5, Err.NONODE, b"ignored")
    assert _kazoo_reply(data)[0] == ks.ReplyHeader(8, 5, Err.NONODE) and len(data) == 4 + 16


def test_multi_reply_read_by_kazoo() -> None:
    ok = wire.encode_multi([
        MultiResult(Op.CREATE, 0, "/x"), MultiResult(Op.DELETE),
        MultiResult(Op.SET_DATA, 0, STAT), MultiResult(Op.CHECK),
    ])
    results = ks.Transaction.deserialize(ok, 0)
    assert results == ["/x", True, ZnodeStat(*STAT.__dict__.values()), True]
    failed = wire.encode_multi([
        MultiResult(Op.ERROR, Err.OK), MultiResult(Op.ERROR, Err.BADVERSION),
        MultiResult(Op.ERROR, Err.RUNTIMEINCONSISTENCY),
    ])
    kinds = [type(r).__name__ for r in ks.Transaction.deserialize(failed, 0)]
    assert kinds == ["RolledBackError", "BadVersionError", "RuntimeInconsistency"]


def test_watch_event_read_by_kazoo() -> None:
    data = wire.watch_event(wire.EventType.NODE_DELETED, "/gone")
    header, offset = _kazoo_reply(data)
    assert header.xid == -1 and header.zxid == -1
    event, _ = ks.Watch.deserialize(data[4:], offset)
    assert (event.type, event.state, event.path) == (2, 3, "/gone")


def test_reader_refuses_impossible_lengths() -> None:
    with pytest.raises(wire.DecodeError):
        Reader(struct.pack("!i", 1000) + b"abc").buffer()
    with pytest.raises(wire.DecodeError):
        Reader(struct.pack("!i", 10**9)).strings()


def _aiozk_stat(stat: object) -> tuple[int, ...]:
    names = ("created_zxid", "last_modified_zxid", "created", "modified", "version", "child_version",
             "acl_version", "ephemeral_owner", "data_length", "num_children", "last_modified_children")
    return tuple(getattr(stat, n) for n in names)


def test_store_answers_parsed_as_aiozk_parses_them() -> None:
    """The store's struct parsers of write answers, exists and notifications (``fast_writes``)
    read the fields aiozk's generic parts read from the same bytes."""
    from aiozk import protocol

    from metashift.stores.zookeeper import fast_reads, fast_writes

    body = Writer().stat(STAT).bytes()
    for opcode in (Op.SET_DATA, Op.EXISTS):
        ours = fast_writes.answer(opcode, body, 0)
        theirs = protocol.response_xref[opcode].deserialize(body)
        assert astuple(ours.stat) == _aiozk_stat(theirs.stat) == tuple(STAT.__dict__.values())
    body = Writer().string("/p0000000001").stat(STAT).bytes()
    ours = fast_writes.answer(Op.CREATE2, body, 0)
    theirs = protocol.response_xref[Op.CREATE2].deserialize(body)
    assert ours.path == theirs.path == "/p0000000001"
    assert astuple(ours.stat) == _aiozk_stat(theirs.stat)
    deleted = fast_writes.answer(Op.DELETE, b"", 0)
    assert deleted and deleted.stat is None  # true: aiozk's session sends a false answer again
    assert fast_writes.answer(Op.GET_ACL, b"", 0) is None  # not parsed here: aiozk's parts do it
    body = Writer().strings(["a", "é"]).stat(STAT).bytes()
    children2 = fast_reads.get_children2_response(body, 0)
    theirs = protocol.response_xref[Op.GET_CHILDREN2].deserialize(body)
    assert children2.children == theirs.children == ["a", "é"]
    assert children2.stat is not None and astuple(children2.stat) == _aiozk_stat(theirs.stat)

    multi = wire.encode_multi([
        MultiResult(Op.CREATE, 0, "/x"), MultiResult(Op.CREATE2, 0, ("/y1", STAT)), MultiResult(Op.DELETE),
        MultiResult(Op.SET_DATA, 0, STAT), MultiResult(Op.CHECK),
    ])
    ours, theirs = fast_writes.answer(Op.MULTI, multi, 0), protocol.TransactionResponse.deserialize(multi)
    assert [getattr(r, "path", None) for r in ours.responses] == [getattr(r, "path", None) for r in theirs.responses]
    assert astuple(ours.responses[1].stat) == _aiozk_stat(theirs.responses[1].stat)
    assert astuple(ours.responses[3].stat) == _aiozk_stat(theirs.responses[3].stat)
    failed = wire.encode_multi([MultiResult(Op.ERROR, Err.OK), MultiResult(Op.ERROR, Err.BADVERSION)])
    ours, theirs = fast_writes.answer(Op.MULTI, failed, 0), protocol.TransactionResponse.deserialize(failed)
    assert [type(r) for r in ours.responses] == [type(r) for r in theirs.responses]
    assert type(ours.responses[1]).__name__ == "BadVersion"

    raw = wire.watch_event(wire.EventType.NODE_DATA_CHANGED, "/changed/é")
    ours_event = fast_writes.watch_event(raw, 4 + 16)
    theirs_event = protocol.WatchEvent.deserialize(raw[4 + 16 :])
    assert (ours_event.type, ours_event.state, ours_event.path) == (theirs_event.type, theirs_event.state,
                                                                     theirs_event.path) == (3, 3, "/changed/é")
