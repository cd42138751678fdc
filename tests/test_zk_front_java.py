"""Java ZooKeeper clients nobody here wrote, through the agent's ZooKeeper port in front of
ZooKeeper and of etcd, with the same assertions as against a real ZooKeeper (the ``zookeeper``
target runs them against one): ZooKeeper's own command line client ``zkCli.sh`` (the Java client
library, 3.8), and Apache Curator's recipes (``tests/java/CuratorProbe.java``).

What the backends cannot show alike is normalized before comparing: zxids and times, cversion (a
child counter; the agent shows numChildren, see ``agent/zookeeper/stat.py``), the owner's session
id (only whether there is one) and sequential numbers (only that there are ten digits)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.zkjava import JavaProgram, run

#: zkCli.sh commands, read from stdin (one JVM, one session, then a second one after ``connect``).
ZKCLI_SCRIPT = """\
create /zc hello
get /zc
set /zc world
get -s /zc
create /zc/kid k
ls /zc
ls -s /zc
create -s /zc/q- x
create -e /zc/eph e
stat /zc/eph
get /zc/missing
set /zc/missing x
create /zc/kid again
create /zc/nope/deeper x
set -v 7 /zc x
delete -v 3 /zc/kid
delete /zc
delete /zc/kid
getAllChildrenNumber /zc
getAcl /zc
addauth digest alice:secret
whoami
close
connect {hosts}
ls /zc
deleteall /zc
stat /zc
quit
"""

_ANY_STAT = ["cZxid = *", "ctime = *", "mZxid = *", "mtime = *", "pZxid = *", "cversion = *"]
#: What ZooKeeper 3.8 prints for ZKCLI_SCRIPT (normalized); the agent must print the same.
ZKCLI_EXPECTED = [
    "Created /zc",
    "hello",
    "world",
    *_ANY_STAT, "dataVersion = 1", "aclVersion = 0", "ephemeralOwner = 0x0", "dataLength = 5", "numChildren = 0",
    "Created /zc/kid",
    "[kid]",
    "[kid]",
    *_ANY_STAT, "dataVersion = 1", "aclVersion = 0", "ephemeralOwner = 0x0", "dataLength = 5", "numChildren = 1",
    "Created /zc/q-<seq>",
    "Created /zc/eph",
    *_ANY_STAT, "dataVersion = 0", "aclVersion = 0", "ephemeralOwner = <session>", "dataLength = 1",
    "numChildren = 0",
    "Node does not exist: /zc/missing",
    "Node does not exist: /zc/missing",
    "Node already exists: /zc/kid",
    "Node does not exist: /zc/nope/deeper",
    "version No is not valid : /zc",
    "version No is not valid : /zc/kid",
    "Node not empty: /zc",
    "2",  # getAllChildrenNumber: the sequential node and the ephemeral
    "'world,'anyone", ": cdrwa",  # getAcl
    "Auth scheme: User", "digest: alice", "ip: 127.0.0.1",  # whoami after addauth
    "[q-<seq>]",  # the ephemeral ended with the closed session; the sequential node stays
    "Node does not exist: /zc",
]
CONNECTED = "WatchedEvent state:SyncConnected type:None path:null"
CLOSED = "WatchedEvent state:Closed type:None path:null"


def normalize(lines: list[str]) -> tuple[list[str], list[str]]:
    """The commands' output, normalized, and the session events apart."""
    out, events = [], []
    for line in lines:
        if line.startswith("WatchedEvent "):
            events.append(line)
            continue
        if line in ("", "WATCHER::") or line.startswith(("Connecting to ", "Welcome to ZooKeeper!", "JLine")):
            continue
        line = re.sub(r"^(cZxid|mZxid|pZxid|ctime|mtime|cversion) = .*$", r"\1 = *", line)
        line = re.sub(r"^ephemeralOwner = 0x0*[1-9a-f][0-9a-f]*$", "ephemeralOwner = <session>", line)
        line = re.sub(r"-\d{10}\b", "-<seq>", line)
        out.append(line)
    # whoami: ZooKeeper keeps a connection's auth ids in a hash set, in no order of the protocol's
    start = out.index("Auth scheme: User") + 1 if "Auth scheme: User" in out else len(out)
    end = start
    while end < len(out) and re.match(r"(ip|digest): ", out[end]):
        end += 1
    out[start:end] = sorted(out[start:end])
    return out, sorted(events)


async def test_zkcli(zk_front: str, zkcli: Path) -> None:
    code, lines = await run([str(zkcli), "-server", zk_front], ZKCLI_SCRIPT.format(hosts=zk_front))
    created = [line for line in lines if line.startswith("Created /zc/q-")]
    assert len(created) == 1 and re.fullmatch(r"Created /zc/q-\d{10}", created[0]), lines
    output, events = normalize(lines)
    assert output == ZKCLI_EXPECTED
    # zkCli prints session events from its event thread, a daemon thread: their place among the
    # commands' output is not fixed, and the second session's may die unprinted when `quit` ends
    # the JVM (the client queues Closed itself after the server's closeSession answer, then
    # System.exit runs; on a loaded machine the exit wins now and then, against ZooKeeper too).
    # The first session's two are printed while later commands run. What would show an agent's
    # fault is any other state (Disconnected, Expired, AuthFailed) or a missing first session.
    assert set(events) <= {CONNECTED, CLOSED}, events
    assert 1 <= events.count(CONNECTED) <= 2 and 1 <= events.count(CLOSED) <= 2, events
    assert code == 1  # zkCli exits with the last command's outcome: `stat` of a missing node


#: What CuratorProbe prints in ``recipes`` mode against ZooKeeper; the agent must print the same.
CURATOR_EXPECTED = [
    "latch.a.leads true",
    "latch.leader a",
    "latch.b.leads false",
    "latch.b.leads.after.a.closes true",
    "latch.leader.after.a.closes b",
    "mutex.a.acquires true",
    "mutex.a.reenters true",
    "mutex.b.acquires.while.a.holds false",
    "mutex.participants 1",
    "mutex.a.holds.after.one.release true",
    "mutex.b.acquires.after.a.releases true",
    "mutex.participants.after.release 0",
    "pnode.created true",
    "pnode.value one",
    "pnode.owner.is.a true",
    "pnode.value.after.delete one",
    "pnode.value.after.set two",
    "pnode.exists.after.close false",
    "counter.increment true 0 1",
    "counter.add true 1 6",
    "counter.cas.right true 10",
    "counter.cas.wrong false 0",
    "counter.decrement true 9",
    "counter.get 9",
    "DONE",
]


async def test_curator_recipes(zk_front: str, curator_probe: JavaProgram) -> None:
    code, lines = await run(curator_probe.command("recipes", zk_front))
    # connection states come from Curator's own thread: their place among the results is not fixed
    states = [line for line in lines if line.startswith("STATE ")]
    assert [line for line in lines if not line.startswith("STATE ")] == CURATOR_EXPECTED
    assert states == ["STATE CONNECTED", "STATE CONNECTED"]  # two clients, connected once each
    assert code == 0
