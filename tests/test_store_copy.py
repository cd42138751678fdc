"""A full pass on the store layer (``coordinator.copy_engine = "store"``): the same report as the
Spark job's, the copy exact (values and versions), a ledger-id generator carried by its jump, and
the verification finding what the target holds that the source does not, or holds otherwise; a bad
engine name is refused by the agent's configuration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from metashift.agent.config import ConfigError, build
from metashift.coordinator.store_copy import StoreCopyRunner
from metashift.copy.rules import Rules


async def test_a_store_layer_pass_copies_exactly_and_verifies(
    zk_url: str, etcd_url: str, open_stores: Callable[..., Any]
) -> None:
    source, target = await open_stores(zk_url), await open_stores(etcd_url)
    await source.put("/admin/policies", b"p0", expected_version=-1)
    for i in range(1, 4):
        await source.put("/admin/policies", b"p%d" % i, expected_version=i - 1)
    await source.put("/managed-ledgers/t/topic", b"ml", expected_version=-1)
    for _ in range(7):
        await source.put("/ledgers/idgen/ID-", b"", sequential=True)
    await source.put("/loadbalance/brokers/b1", b"live", ephemeral=True)
    stages: list[tuple[str, int, int]] = []
    outcome = await StoreCopyRunner(zk_url, etcd_url, Rules()).run(lambda *s: stages.append(s))
    assert outcome.ok and outcome.report is not None, outcome.failure()
    report = outcome.report
    assert report.ephemerals_skipped == 1 and report.verify is not None and report.verify.mismatches == []
    assert [s[0] for s in stages] == ["copying", "copying", "verifying", "verifying"]
    got = await target.get("/admin/policies")
    assert got is not None and (got[0], got[1].version) == (b"p3", 3)
    assert await target.get("/loadbalance/brokers/b1") is None
    # the ledger-id generator carried (its next id in the target above the source's), and checked
    assert report.counters and report.verify.counter_checks
    assert all(c.ok for c in report.verify.counter_checks.values()), report.verify.counter_checks
    # a second pass finds everything equal and writes nothing
    again = await StoreCopyRunner(zk_url, etcd_url, Rules()).run(lambda *s: None)
    assert again.ok and again.report is not None and again.report.written == 0
    # what only the target holds, or holds otherwise, is a mismatch
    await target.put("/admin/only-here", b"x")
    await source.put("/managed-ledgers/t/topic", b"ml2")
    await target.put("/managed-ledgers/t/topic", b"other")
    await target.put("/managed-ledgers/t/topic", b"other2")
    checked = await StoreCopyRunner(zk_url, etcd_url, Rules()).run(lambda *s: None)
    assert not checked.ok
    assert {(m.path, m.kind) for m in checked.mismatches} >= {("/admin/only-here", "extra")}
    # a node the target holds ahead of the source: taken as deleted and created again in the
    # source, as the delta's carry takes it (the target is written by the migration only), and
    # carried again
    assert "/managed-ledgers/t/topic" not in {m.path for m in checked.mismatches}
    got = await target.get("/managed-ledgers/t/topic")
    assert got is not None and (got[0], got[1].version) == (b"ml2", 1)


def test_an_unknown_copy_engine_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        build({"source.url": "zk://127.0.0.1:2181", "coordinator.enabled": False, "coordinator.copy_engine": "hadoop"})
    assert "coordinator.copy_engine" in str(err.value) and "spark, store" in str(err.value)
