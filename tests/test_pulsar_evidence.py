"""What the lab reads in Pulsar's logs as a metadata error: every ERROR about the metadata store,
except Pulsar's own schema race (a broker deleting the ledger of a schema it lost the race for,
while that ledger's close still updates its metadata), and only for the ledger of that race.
The lines are as Pulsar 4.2.4 logged them in a sandbox run (CI, 2026-12-04)."""

from __future__ import annotations

from metashift_lab.pulsar_cluster import evidence

LOST_RACE = (
    "1796348973791 WARN  [metadata-store-event-10-1] BookkeeperSchemaStorage - Failed to create schema locator "
    "with position, schemaId metashift/ns-a/__change_events, ledgerId 1\n"
    "org.apache.pulsar.metadata.api.MetadataStoreException$BadVersionException: "
    "KeeperErrorCode = BadVersion for /schemas/metashift/ns-a/__change_events\n"
)


def _update_loop_error(ledger: int) -> str:
    return (
        f"1796347481863 ERROR [metadata-store-worker-OrderedExecutor-0-0] MetadataUpdateLoop - "
        f"UpdateLoop(ledgerId={ledger},loopId=4724c2db) Failed to read metadata from store\n"
        "org.apache.bookkeeper.client.BKException$BKNoSuchLedgerExistsOnMetadataServerException: "
        "No such ledger exists on Metadata Server\n"
    )


def test_the_schema_race_of_its_own_ledger_is_pulsars_not_the_stores() -> None:
    other_broker = LOST_RACE
    this_broker = _update_loop_error(1)
    races = evidence.schema_race_ledgers([other_broker, this_broker])
    assert races == {1}
    assert evidence.metadata_errors(this_broker, races) == []


def test_an_update_loop_error_of_any_other_ledger_is_a_metadata_error() -> None:
    text = LOST_RACE + _update_loop_error(7)
    races = evidence.schema_race_ledgers([text])
    errors = evidence.metadata_errors(text, races)
    assert len(errors) == 1
    assert "UpdateLoop(ledgerId=7," in errors[0] and errors[0].endswith("No such ledger exists on Metadata Server")
    # without the race in the logs, ledger 1's error counts too
    assert len(evidence.metadata_errors(_update_loop_error(1))) == 1
