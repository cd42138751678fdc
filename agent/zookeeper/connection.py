"""One client connection's transport: ZooKeeper's framing (a length, then the packet) and the
send side that replies, pings and watch events share (``ClientConnection``)."""

from __future__ import annotations

import asyncio

from metashift.agent.zookeeper.four_letter import ConnectionFacts
from metashift.agent.zookeeper.replies import Replies
from metashift.stores.zookeeper import wire

#: Largest packet accepted (ZooKeeper's jute.maxbuffer is 1 MiB; a multi may carry more).
MAX_PACKET = 16 * 1024 * 1024
_LENGTH = 4


class Totals:
    """Packets in and out of the whole front (the four-letter words report them)."""

    received = 0
    sent = 0


class ClientConnection:
    """One client connection: the send side shared by replies, pings and watch events."""

    def __init__(self, writer: asyncio.StreamWriter, totals: Totals) -> None:
        self.writer = writer
        self.closed = False
        peer = writer.get_extra_info("peername")
        self.facts = ConnectionFacts(f"{peer[0]}:{peer[1]}" if peer else "?")
        self._totals = totals
        self.replies = Replies(self._send_many, self.close)
        self.ordinary = 0
        """Requests on the ordinary path not yet answered: while there are, later requests of the
        connection take it too (a session's requests keep their order)."""

    def send(self, data: bytes) -> None:
        """Send ``data`` (a ping's answer, a watch event) now, after the answers already made at
        the head of the line: the answer that set a watch goes out before its event."""
        self.replies.flush()
        self._send_many(data, 1)

    def _send_many(self, data: bytes, count: int) -> None:
        if not self.closed:
            self.writer.write(data)
            self.facts.sent += count
            self._totals.sent += count

    def close(self) -> None:
        """Close the connection (once)."""
        if not self.closed:
            self.closed = True
            self.writer.close()


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A packet's four length bytes (``None``: the connection ended)."""
    try:
        return await reader.readexactly(_LENGTH)
    except asyncio.IncompleteReadError:
        return None


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """The packet whose length is ``head``."""
    size = int.from_bytes(head, "big", signed=True)
    if size < 0 or size > MAX_PACKET:
        raise wire.DecodeError(f"packet of {size} bytes")
    return await reader.readexactly(size)


async def read_packet(reader: asyncio.StreamReader) -> bytes | None:
    """The next packet (``None``: the connection ended)."""
    head = await read_head(reader)
    return None if head is None else await read_body(reader, head)
