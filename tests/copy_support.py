"""What the copy tests share (a pytest plugin, conftest's ``pytest_plugins``): one Spark context for
the session, a store's whole content read back, a source and a target opened by direction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from metashift.stores import Store, open_store


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's Spark context (local, two cores), loaded only by the tests that use Spark."""
    from metashift.spark.session import get_context, stop_context

    context = get_context("local[2]")
    yield context
    stop_context()


async def snapshot(store: Store) -> dict[str, tuple[bytes, int, bool]]:
    """Every node under the store's root: value, version, ephemeral."""
    out: dict[str, tuple[bytes, int, bool]] = {}
    async for page in store.walk():
        for node in page:
            got = await store.get(node.path)
            if got is not None:
                out[node.path] = (got[0], got[1].version, got[1].ephemeral)
    return out


async def store_pair(
    request: pytest.FixtureRequest, namespace: str, direction: str, tag: str = ""
) -> tuple[Store, Store]:
    """Two stores opened for a copy in ``direction`` (``zk-to-oxia``, ...), in namespaces of their own."""
    src, dst = direction.split("-to-")
    source = await open_store(request.getfixturevalue(f"{src}_server").url + f"{namespace}{tag}-src")
    target = await open_store(request.getfixturevalue(f"{dst}_server").url + f"{namespace}{tag}-dst")
    return source, target
