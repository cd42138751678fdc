"""The parts of ``bench/pip454_vs_metashift.py`` that judge what a run left behind, on made-up logs
and reports (the benchmark itself starts two Pulsar clusters: minutes, not a test): ledger ids
handed out again after a switch, what PIP-454's code logged, ``metashift verify`` summed up, and
the table."""

from __future__ import annotations

from metashift_lab.pulsar_cluster import evidence
from metashift_lab.pulsar_cluster.pip454_run import Pip454Logs, _reason
from metashift_lab.pulsar_cluster.side_by_side import METASHIFT, PIP454, Side, table
from metashift_lab.pulsar_cluster.target_check import summarize_verify

SWITCH_MS = 1_700_000_010_000


def _line(ms: int, text: str, level: str = "INFO") -> str:
    return f"{ms} {level:<5} [thread] {text}"


def _handed(ms: int, ledger: int) -> str:
    return _line(ms, f"AbstractMetadataStore - Deleting path: /ledgers/idgen/ID-{ledger:010d} (v. Optional.empty)")


def _created(ms: int, ledger: int) -> str:
    return _line(ms, f"ManagedLedgerImpl - [t/ns/persistent/a] Created new ledger {ledger}")


def test_ids_handed_out_again_right_after_the_switch_are_found_without_settling() -> None:
    before = [_handed(SWITCH_MS - 5000 + i, i) for i in range(10)] + [_created(SWITCH_MS - 4000, 9)]
    after = [
        _handed(SWITCH_MS + 100, 1),  # the target's counter started again at 1
        _line(SWITCH_MS + 120, "PulsarLedgerManager - Failed to create ledger 1: ... key already exists", "ERROR"),
        _handed(SWITCH_MS + 200, 2),
        _created(SWITCH_MS + 210, 2),  # a second ledger 2
        _created(SWITCH_MS + 300, 7),  # handed out before the switch, created after it: not again
        _handed(SWITCH_MS + 400, 11),
    ]
    text = "\n".join(before + after)
    found = evidence.handed_out_again([text], SWITCH_MS / 1000)
    assert found.ids == [1, 2] and found.created == [2] and found.refused == 1
    # the tests' check waits 5 s after the switch: it sees none of it
    settled = evidence.ledger_ids(evidence.ledger_creations([text]), (SWITCH_MS - 1000) / 1000, SWITCH_MS / 1000)
    assert settled.reused == []


def test_pip454_logs_count_refused_writes_by_record_and_name_its_steps() -> None:
    broker = "\n".join([
        _line(SWITCH_MS, "DualMetadataStore - === Starting Metadata Migration Preparation ==="),
        _line(SWITCH_MS + 1, "PulsarLedgerIdGenerator - Error generating ledger id", "ERROR"),
        "java.lang.IllegalStateException: Write operations not allowed during migrations",
        "\tat org.apache.pulsar.metadata.impl.DualMetadataStore.put(DualMetadataStore.java:300)",
        _line(SWITCH_MS + 2, "X - IllegalStateException: Write operations not allowed during migrations", "ERROR"),
        _line(SWITCH_MS + 3, "MigrationCoordinator - All data copied. total records=173"),
        _line(SWITCH_MS + 4, "DualMetadataStore - === Metadata Migration Complete ==="),
    ])  # fmt: skip
    logs = Pip454Logs.read({"broker-1.log": broker, "bookie-1.log": _line(SWITCH_MS, "nothing")})
    assert logs.refused_writes == 2 and logs.refused_by == {"broker-1.log": 2}
    assert logs.copied == 173
    assert logs.steps["DualMetadataStore: === Metadata Migration Complete ==="] == 1


def test_pulsars_error_reason_is_read_from_its_json_body() -> None:
    error = ('POST http://x/admin/v2/metadata/migration/start?target=zk:h: 500 {"reason":"\\n --- An unexpected '
             'error occurred in the server ---\\n\\nMessage: Expected target metadata store to be Oxia\\n\\nStack')
    assert _reason(error) == "Message: Expected target metadata store to be Oxia"
    assert _reason("POST x: 0 connection refused") == "POST x: 0 connection refused"


def test_verify_summary_tells_moved_on_from_lacking() -> None:
    report = {
        "ok": False, "nodes": 10,
        "mismatches": [
            {"path": "/a", "kind": "version", "detail": "target version 3 is ahead of source version 2"},
            {"path": "/b", "kind": "extra", "detail": "only in the target (version 0, 3 bytes)"},
            {"path": "/c", "kind": "version", "detail": "target version 1 is behind source version 2"},
            {"path": "/counters/producer-name", "kind": "counter", "detail": "next sequential suffix 1 ..."},
        ],
        "counter_checks": {"/counters/producer-name": {"source": 2, "target": 1, "ok": False},
                           "/ledgers/idgen": {"source": 54, "target": 118, "ok": True}},
    }  # fmt: skip
    found = summarize_verify(report)
    assert (found["moved_on"], found["differs"], found["counters"]) == (2, 2, 2)
    assert found["counters_below"] == {"/counters/producer-name": {"source_next": 2, "target_next": 1}}


def test_the_table_has_a_column_per_run_and_a_row_per_measure() -> None:
    pip454 = Side(PIP454, how="POST ...", phase="COMPLETED", lost=51, handed_out_again=[1, 2, 3, 4])
    ours = Side(METASHIFT, how="metashift migrate start ...", phase="COMPLETED", paused_s=0.21)
    text = table([pip454, ours])
    lines = text.splitlines()
    assert lines[0].count("|") == 4 and "PIP-454" in lines[0] and "metashift" in lines[0]
    assert all(line.count("|") - line.count("\\|") == 4 for line in lines)
    assert "| messages lost / duplicated | 51 / 0 | 0 / 0 |" in lines
    assert "4 (1, 2, 3, ...)" in text and "0.21 s" in text
