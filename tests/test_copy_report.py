"""The copy's reports as typed records (``metashift.copy.report``): what the copy job prints on its
JSON line is what the coordinator reads back, field for field, mismatches and counters included."""

from __future__ import annotations

import json

import pytest

from metashift.coordinator.copy_runner import CopyOutcome
from metashift.copy.counters import CounterCarry, CounterCheck
from metashift.copy.report import CopyReport, Mismatch, VerifyReport


def _report() -> CopyReport:
    verify = VerifyReport(
        "zk://a", "etcd://b", nodes=12, bytes=340, counters=1,
        counter_checks={"/ledgers/idgen": CounterCheck("ledger-ids", "jump", 80, 98, True)},
        mismatches=[Mismatch("/admin/x", "value", "differs"), Mismatch("/gone", "extra", "only in the target")],
        seconds=1.5,
    )  # fmt: skip
    return CopyReport(
        "zk://a", "etcd://b", nodes=12, bytes=340, written=11,
        counters={"/ledgers/idgen": CounterCarry("ledger-ids", "jump", 80, 0, 98, 2, 0.25)},
        conflicts=[("/managed-ledgers/t", "ahead in the target")], seconds=4.0, listing_seconds=0.5,
        copy_seconds=2.0, timeline={"spark_ready": 1.25}, verify=verify,
    )  # fmt: skip


def test_the_job_line_reads_back_as_the_report_it_was() -> None:
    report = _report()
    line = json.dumps({"event": "report", **report.to_dict()})
    back = CopyReport.from_dict(json.loads(line))
    assert back == report
    assert back.verify is not None and back.verify.mismatches[1] == Mismatch("/gone", "extra", "only in the target")
    assert back.counters["/ledgers/idgen"].target == 98
    assert back.conflict_paths == ["/managed-ledgers/t"]
    assert not back.passed  # mismatches and a conflict


def test_the_outcome_says_what_the_report_found() -> None:
    outcome = CopyOutcome(_report())
    assert not outcome.ok and outcome.verified
    assert [m.path for m in outcome.mismatches] == ["/admin/x", "/gone"]
    assert outcome.failure() == "verification found 2 mismatch(es): /admin/x (value), /gone (extra)"
    clean = CopyReport("zk://a", "etcd://b", nodes=3, verify=VerifyReport("zk://a", "etcd://b", nodes=3))
    assert CopyOutcome(clean).ok and CopyReport.from_dict(clean.to_dict()).passed
    unverified = CopyOutcome(CopyReport("zk://a", "etcd://b"))
    assert not unverified.ok and not unverified.verified and unverified.failure() == "verification did not pass"


@pytest.mark.parametrize("value", [["/p", "counter", "next id 3 in the target"],
                                   {"path": "/p", "kind": "counter", "detail": "next id 3 in the target"}])
def test_a_mismatch_reads_from_a_triple_or_an_object(value: object) -> None:
    assert Mismatch.from_value(value) == Mismatch("/p", "counter", "next id 3 in the target")  # type: ignore[arg-type]
