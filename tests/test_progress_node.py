"""The copy's progress node (``coordinator.progress.ProgressNode``): bodies written one at a time and
in order, and flushed before the phase that follows is written, so that ``migrate status`` read
right after a COMPLETED shows the verification (seen: etcd -> oxia COMPLETED, shown unverified,
when an older body's write landed after the last)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from metashift.coordinator.progress import ProgressNode
from metashift.migration import paths


async def test_the_last_body_reported_is_what_the_node_holds_after_a_flush(
    store_url: str, open_stores: Callable[..., Any]
) -> None:
    store = await open_stores(store_url)  # a namespace of the test's own
    node = ProgressNode(store)
    for n in range(41):
        node.report(functools.partial(_body, n), force=True)
    await node.flush(30.0)
    got = await store.get(paths.PROGRESS)
    assert got is not None
    assert json.loads(got[0]) == {"stage": "verified", "done": 40, "verified": True}
    assert node.shown == {"stage": "verified", "done": 40, "verified": True}
    # coalesced: the bodies not yet written when a newer came were skipped, not queued
    assert got[1].version < 40, got[1]


def _body(done: int) -> dict[str, object]:
    return {"stage": "verified" if done == 40 else "copy", "done": done, "verified": done == 40}
