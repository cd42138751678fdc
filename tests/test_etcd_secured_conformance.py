"""The store contract (``test_store_conformance``) and the session hand-over
(``test_store_handover``) on the secured etcd of ``test_etcd_secured``: TLS, ``auth enable``, the
user whose role grants only the prefix, tokens living 2 s; directly and through the agent's
gateway."""

from __future__ import annotations

import pytest

from metashift_lab.secured.etcd import SecuredEtcd
from tests.test_etcd_secured import secured  # noqa: F401  (the module's server)
from tests.test_store_conformance import *  # noqa: F403  (their tests, run here again)
from tests.test_store_handover import *  # noqa: F403


@pytest.fixture(params=["etcd", "gateway-etcd"])  # type: ignore[no-redef]
def backend(request: pytest.FixtureRequest) -> str:
    """The secured etcd directly, and through an in-process agent."""
    return str(request.param)


@pytest.fixture
def etcd_url(secured: SecuredEtcd, namespace: str) -> str:  # noqa: F811
    """A namespace of the test's own below the role's prefix."""
    return secured.url(prefix=f"/pulsar{namespace}")
