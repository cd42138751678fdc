"""``migrate start --wait`` and ``migrate status`` at any size (issue 45): what was written in the
store the cluster left since the switch (``writes_after_switch``) is kept by the coordinator
elected where the cluster lives, which follows the old store, so that ``status`` and the end of
``--wait`` read one node there instead of walking the whole tree; ``status --scan`` still walks it,
for a store nobody follows any more.

On ZooKeeper, etcd and Oxia as the store left: agents are ``metashift agent`` processes (each a
coordinator candidate running the Spark copy), so that the store reads this test process makes
are the commands' alone; those are counted (the real stores, every call still sent to its
server) to show that no walk is made.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from metashift import processes
from metashift.cli import build_parser
from metashift.cli import migrate as migrate_cli
from metashift.coordinator import control
from metashift.migration.flag import read_flag
from metashift.migration.phase import Phase
from metashift.stores import BulkStore, MetadataStore, Store
from metashift_lab.sample_tree import generate
from tests.agent_processes import Agents, cli
from tests.harness import eventually

pytestmark = pytest.mark.timeout(900)

#: The store left first: ZooKeeper, etcd and Oxia.
PAIRS = ["zk-to-etcd", "etcd-to-zk", "oxia-to-zk"]
#: A tree a walk could not read in a handful of calls.
TOPICS = 60
POLICY = "/admin/policies/public/default"
LATE = "/admin/policies/public/late"
GONE = "/admin/policies/public/gone"


class Reads:
    """The reads this process makes through the store layer, counted by kind (``walk nodes``:
    the nodes the walks listed), with the wall-clock time of each walk's start."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.walks: list[float] = []
        for name in ("get", "get_children", "exists"):
            monkeypatch.setattr(MetadataStore, name, self._counted(name, getattr(MetadataStore, name)))
        monkeypatch.setattr(BulkStore, "walk", self._counted_walk(BulkStore.walk))

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(store: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(store, *args, **kwargs)

        return counted

    def _counted_walk(self, method: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        async def counted(store: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self.calls["walk"] += 1
            self.walks.append(time.time())
            async for page in method(store, *args, **kwargs):
                self.calls["walk nodes"] += len(page)
                yield page

        return counted

    def taken(self) -> Counter[str]:
        """The counts so far, starting again from zero."""
        taken, self.calls = self.calls, Counter()
        return taken


def _status(url: str, *more: str) -> dict[str, Any]:
    done = cli("migrate", "status", "--source", url, "--json", *more)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


async def _followed(url: str, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """``status --json`` of the store left, once its follower's first walk is done and ``holds``."""
    found: dict[str, Any] = {}

    def followed() -> bool:
        found.clear()
        found.update(_status(url))
        written = found["writes_after_switch"] or {}
        return bool(written.get("complete") and written.get("followed_by") and holds(written))

    await eventually(followed, within=120, what="the store left followed by the coordinator where the cluster lives")
    return found


@pytest.mark.parametrize("direction", PAIRS)
async def test_status_of_the_store_left_reads_what_its_follower_keeps_and_finds_a_write_made_after_the_switch(
    direction: str, request: pytest.FixtureRequest, agents: Agents, open_stores: Any,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    src, dst = direction.split("-to-")
    source_url, target_url = request.getfixturevalue(f"{src}_url"), request.getfixturevalue(f"{dst}_url")
    source: Store = await open_stores(source_url)
    tree = await generate(source, TOPICS, seed=3, ephemerals=False)
    assert tree.persistent > 300
    await source.put(POLICY, b'{"ttl":1}')
    await agents.start(source_url, "broker-1", "broker")
    await agents.start(source_url, "bookie-1", "bookie")

    # --wait, in this process: it follows the flag to COMPLETED and reads the end of the story,
    # never walking the tree (the pre-flight check before the start looks at the source's
    # ephemerals: that is before the flag)
    reads = Reads(monkeypatch)
    args = build_parser().parse_args(["migrate", "start", "--source", source_url, "--target", target_url,
                                      "--wait", "--json"])
    capsys.readouterr()
    assert await migrate_cli._start(migrate_cli._rooted(args)) == 0
    final = json.loads(capsys.readouterr().out)
    flag = await read_flag(source)
    assert flag is not None and flag.phase is Phase.COMPLETED and flag.switch_position is not None
    assert final["phase"] == "COMPLETED" and final["lives_on"] == flag.target_url, final
    assert final["writes_after_switch"]["position"] == flag.switch_position, final
    assert [at for at in reads.walks if at >= flag.started_at / 1000] == [], "--wait walked a store"

    # followed: the coordinator elected in the target walked the store left once; nothing there
    quiet = (await _followed(source_url, lambda written: True))["writes_after_switch"]
    assert {k: quiet[k] for k in ("position", "count", "paths", "complete", "scanned")} == {
        "position": flag.switch_position, "count": 0, "paths": [], "complete": True, "scanned": False}, quiet
    assert quiet["followed_by"] in ("broker-1", "bookie-1"), quiet

    # a status is a handful of reads, whatever the tree; a scan reads every node
    reads.taken()
    status = await control.status(source, after_switch=True)
    one = reads.taken()
    assert status.after_switch is not None and status.after_switch.count == 0
    assert one["walk"] == 0 and one["get"] + one["get_children"] + one["exists"] <= 15, one
    scanned = await control.status(source, after_switch=True, scan=True)
    assert scanned.after_switch is not None and scanned.after_switch.count == 0
    assert reads.taken()["walk nodes"] >= tree.persistent

    # a member still on the old store writes there: a change, a new node, one created and deleted
    writer: MetadataStore = await open_stores(source_url)
    await writer.put(POLICY, b'{"ttl":2}')
    await writer.put(LATE, b"{}")
    await writer.put(GONE, b"{}")
    await writer.delete(GONE)
    written = (await _followed(source_url, lambda w: w["count"] == 2))["writes_after_switch"]
    assert written["paths"] == [POLICY, LATE], written
    text = cli("migrate", "status", "--source", source_url).stdout
    assert ("written here after the switch: 2 node(s) written in this store after the cluster left it, not seen "
            "by the cluster") in text, text
    assert f"{POLICY}, {LATE}; followed by {written['followed_by']}" in text, text
    by_walk = _status(source_url, "--scan")["writes_after_switch"]
    assert {k: by_walk[k] for k in ("count", "paths", "scanned")} == {"count": 2, "paths": written["paths"],
                                                                       "scanned": True}, by_walk

    # the agents gone, nobody follows the store left: status says it does not know, --scan walks it
    for agent in agents.started:
        await agent.stop()

    def unfollowed() -> bool:
        return bool(_status(source_url)["writes_after_switch"]["count"] is None)

    await eventually(unfollowed, within=60, what="the follower's record gone with its agent")
    text = cli("migrate", "status", "--source", source_url).stdout
    assert "written here after the switch: not known: no coordinator follows this store now" in text, text
    assert _status(source_url, "--scan")["writes_after_switch"]["count"] == 2


async def test_status_read_from_the_store_left_says_so_when_no_follower_keeps_it(
    zk_url: str, etcd_url: str, open_stores: Any,
) -> None:
    """A store a migration left, as an older metashift or a cluster whose agents are gone leaves
    it: status reads the record's place once, finds nobody following, and says how to know."""
    from metashift.migration.flag import MigrationFlag, write_flag
    from metashift.migration.origin import read_state

    source: Store = await open_stores(zk_url)
    await source.put(POLICY, b"{}")
    position = await source.position_of(POLICY)
    flag = MigrationFlag(Phase.COMPLETED, etcd_url, 1, switch_position=position)
    await write_flag(source, flag, -1)
    assert (await read_state(source)).left_for == etcd_url
    await source.put(LATE, b"{}")
    left = _status(zk_url)
    assert left["writes_after_switch"] == {"position": position, "count": None, "paths": [], "at_least": False,
                                           "followed_by": None, "complete": False, "scanned": False}, left
    assert _status(zk_url, "--scan")["writes_after_switch"]["paths"] == [LATE]



def test_the_status_benchmark_runs_and_reports_every_figure() -> None:
    """``bench/status_latency.py`` at a tiny size (its own servers and agents): every figure is
    there, and what it read after the switch is what the follower keeps. Figures are not judged."""
    bench = Path(__file__).resolve().parent.parent / "bench" / "status_latency.py"
    done = processes.run([sys.executable, str(bench), "--topics", "60", "--calls", "1", "--json"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(done.stdout)["runs"]
    assert run["wait"]["exit"] == 0 and run["wait"]["completed_to_exit_s"] >= 0, run["wait"]
    assert run["followed_s"] is not None, run
    for moment in ("before", "after"):
        for store in ("source", "target"):
            assert run[moment][store]["cli"]["calls"] == 1 and run[moment][store]["call"]["calls"] == 1, run
    left = run["after"]["source"]
    assert left["phase"] == "COMPLETED" and left["lives_here"] is False, left
    assert left["writes_after_switch"]["count"] == 0 and left["writes_after_switch"]["followed_by"], left
    assert run["after"]["target"]["lives_here"] is True, run["after"]["target"]
