"""The store contract (``test_store_conformance``) on a ZooKeeper that requires TLS and SASL
DIGEST-MD5 of every session (``tests.zk_secured_servers.digest_zk``): the store directly, and
through an in-process agent whose source is that ZooKeeper."""

from __future__ import annotations

import pytest

from tests import zk_secured_servers as servers
from tests.test_store_conformance import *  # noqa: F403 (the contract's tests, run here on the secured server)
from tests.zk_secured_servers import DigestZooKeeper

secured_certs = servers.secured_certs
digest_zk = servers.digest_zk


@pytest.fixture(params=["zk", "gateway-zk"])  # type: ignore[no-redef]  # this module's backends
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def zk_url(digest_zk: DigestZooKeeper, namespace: str) -> str:
    return digest_zk.url(namespace)
