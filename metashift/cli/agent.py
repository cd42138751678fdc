"""The coordinator inside an agent process: what ``metashift agent`` runs beside the gateway
unless the config says ``coordinator.enabled = false``.

It stands for election in the agent's home store (where the cluster lives), and when a migration
completes and the agent's home moves to its target, it resigns there and stands again in the new
home: the way back is a new migration from there, coordinated by the same agents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from metashift.agent.server import Agent
from metashift.stores import Store

from .copy_job import copy_rules
from .driver import Coordinator

log = logging.getLogger(__name__)


def coordinator_for(agent: Agent, store: Store) -> Coordinator:
    """A coordinator candidate in ``store`` that shares ``agent``'s session there and its credentials."""
    config = agent.config
    settings = config.coordinator
    return Coordinator(
        store,
        node_id=config.node_id,
        open_target=agent.open_target,
        url_for=agent.url_with_credentials,
        prepare_timeout=settings.prepare_timeout,
        participant_timeout=settings.participant_timeout,
        outage_timeout=settings.outage_timeout,
        spark_master=settings.spark_master,
        spark_delta_threshold=settings.spark_delta_threshold,
        rules=copy_rules(settings.ledgers_roots, settings.counters),
    )


async def run_coordinator(agent: Agent) -> None:
    """Stand for election and coordinate while leader, in whichever store is the agent's home,
    until cancelled."""
    home = agent.home
    assert home is not None, "the agent must be started first"
    loop = asyncio.get_running_loop()
    while True:
        store = home.store
        assert isinstance(store, Store), "the agent's home must be a store of its own"
        coordinator = coordinator_for(agent, store)
        agent.metrics.watch_coordinator(lambda c=coordinator: _view(c))  # type: ignore[misc]
        candidate = loop.create_task(coordinator.run(), name="coordinator")
        moved = loop.create_task(home.wait_moved())
        try:
            await asyncio.wait({candidate, moved}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (candidate, moved):
                task.cancel()
            for task in (candidate, moved):  # a candidate that failed raises here
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        log.info("the agent's home moved to %s: standing for election there", home.store.url)


def _view(coordinator: Coordinator) -> tuple[bool, int, int]:
    """(leading, nodes done, nodes total) of ``coordinator``'s current pass, for the agent's metrics."""
    shown = coordinator.passes.progress if coordinator.leading else {}
    done, total = shown.get("done"), shown.get("total")
    return coordinator.leading, done if isinstance(done, int) else 0, total if isinstance(total, int) else 0

