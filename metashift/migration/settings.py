"""The migration's settings that more than one side of it reads: the ``[coordinator]`` section
(how a coordinator leads, and how long an agent may stay silent before it is dead to the
migration). Made once at the entry point (``metashift.agent.config``) and passed down as a value:
each default is written here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass

#: The engines a full pass can run on (``CoordinatorSettings.copy_engine``).
COPY_ENGINES = ("spark", "store")


@dataclass(frozen=True)
class CoordinatorSettings:
    """The ``[coordinator]`` section: whether this agent stands for election, and how it leads."""

    enabled: bool = True
    prepare_timeout: float = 20.0
    """Longest wait for every live participant's acknowledgement before the migration FAILS."""
    participant_timeout: float = 5.0
    """Seconds without a heartbeat after which an agent is dead to the migration: a participant is
    no longer waited for, a coordinator is replaced; also the longest a store may stay unreachable
    inside the freeze before the migration FAILS. Agents beat four times as often."""
    outage_timeout: float = 300.0
    """Seconds the source or the target may stay unreachable in SYNCING (the coordinator waits,
    then runs another pass) before the migration FAILS."""
    spark_master: str = "local[*]"
    copy_engine: str = "spark"
    """What runs a full pass: ``spark`` (the copy job on Spark, the engine of real trees) or
    ``store`` (the store layer in the coordinator's process, no JVM: for small trees, the protocol
    simulator and the tests of the protocol). One of ``COPY_ENGINES``."""
    spark_delta_threshold: int = 10_000
    """Changed paths in the freeze's last delta from which a Spark pass carries them (fewer: the
    store layer directly, no Spark job inside the freeze)."""
    ledgers_roots: tuple[str, ...] | None = None
    """BookKeeper ledgers roots whose ledger-id generators the copy carries by a jump (``None``:
    the copy's default, ``/ledgers``)."""
    counters: tuple[str, ...] | None = None
    """Patterns of the other sequential parents, carried exactly (``None``: the copy's default,
    ``/counters/*``)."""
