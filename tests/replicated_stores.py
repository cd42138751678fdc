"""Replicated stores for the tests (a pytest plugin): one ZooKeeper ensemble, one etcd cluster and
one Oxia cluster of three per test process, shared by every test that needs one (each test keeps
to its own chroot / prefix). A test that kills a member starts it again before it ends
(``member_lost``), so the next test finds all three serving."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from metashift_lab.replicated import EtcdCluster, OxiaCluster, ReplicatedStore, ZooKeeperEnsemble
from tests.harness import require_oxia


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[ZooKeeperEnsemble]:
    store = ZooKeeperEnsemble()
    store.start()
    yield store
    store.cleanup()


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    store = EtcdCluster()
    store.start()
    yield store
    store.cleanup()


@pytest.fixture(scope="session")
def oxia_cluster() -> Iterator[OxiaCluster]:
    require_oxia()
    store = OxiaCluster()
    store.start()
    yield store
    store.cleanup()


@dataclass
class Election:
    """A leader lost and the one elected after it: which members, and how long the store had none
    (seconds, from the kill until every running member served again)."""

    lost: int
    elected: int
    seconds: float


def kill_leader(store: ReplicatedStore, path: str = "/") -> Election:
    """SIGKILL the leader (of ``path``'s shard, Oxia) and wait (bounded) for the next one."""
    started = time.monotonic()
    lost = store.kill_leader(path)
    elected = store.wait_leader(path, other_than=lost)
    return Election(lost, elected, time.monotonic() - started)


@contextlib.contextmanager
def members_restored(store: ReplicatedStore) -> Iterator[ReplicatedStore]:
    """Whatever the block kills or stops, every member runs and the store serves after it."""
    try:
        yield store
    finally:
        for index, member in enumerate(store.members):
            if not member.running:
                store.restart(index)
        store.wait_serving()
