"""The coordinator inside an agent process: what ``metashift agent`` runs beside the gateway
unless the config says ``coordinator.enabled = false``."""

from __future__ import annotations

from metashift.agent.server import Agent
from metashift.stores import Store

from .copy_job import copy_rules
from .driver import Coordinator


def coordinator_for(agent: Agent) -> Coordinator:
    """A coordinator candidate that shares ``agent``'s source session and target credentials."""
    config = agent.config
    assert isinstance(agent.source, Store), "the agent must be started first, on a store of its own"
    return Coordinator(
        agent.source,
        node_id=config.node_id,
        source_url=config.source,
        open_target=agent.open_target,
        target_credentials=(config.target_username, config.target_password),
        prepare_timeout=config.coordinator.prepare_timeout,
        spark_master=config.coordinator.spark_master,
        spark_delta_threshold=config.coordinator.spark_delta_threshold,
        rules=copy_rules(config.coordinator.ledgers_roots, config.coordinator.counters),
    )


async def run_coordinator(agent: Agent) -> None:
    """Stand for election and coordinate while leader, until cancelled."""
    await coordinator_for(agent).run()
