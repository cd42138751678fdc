"""Answering ``migrate check``: can this agent open the migration's target with its own
credentials, from its own node?

``migrate check`` (and ``migrate start``, which runs it) writes a request under
``preflight/`` below the migration's root naming the target; every agent sees it (it follows that
subtree anyway), opens the target as it would at PREPARATION (its ``[target]`` credentials), reads
the target's root, closes it, and answers in its participant record (``dryOpen``). A target that
only the operator's host can reach, or credentials missing on one node, show up before any write
is held, instead of a PREPARATION that times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable

from metashift.migration import paths
from metashift.migration.participants import DryOpen
from metashift.stores import MetadataStore, MetadataStoreError, Notification

from .registration import Registration

log = logging.getLogger(__name__)

#: Longest an agent tries to open a target for a check (the check waits a little longer).
DRY_OPEN_SECONDS = 10.0


class CheckAnswerer:
    """Answers every ``migrate check`` request seen in the agent's home store."""

    def __init__(
        self, open_target: Callable[[str], Awaitable[MetadataStore]], registration: Callable[[], Registration]
    ) -> None:
        self._open_target = open_target
        self._registration = registration
        self._wake = asyncio.Event()
        self._answered: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def on_notification(self, notification: Notification) -> None:
        if notification.path.startswith(paths.PREFLIGHT):
            self._wake.set()

    def start(self) -> None:
        self._wake.set()  # a check already waiting when the agent starts
        self._task = asyncio.get_running_loop().create_task(self._run(), name="check-answers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.answer_pending()
            except asyncio.CancelledError:
                raise
            except MetadataStoreError as e:
                log.warning("could not answer a migrate check: %s", e)
            except Exception:
                log.exception("answering a migrate check failed")

    async def answer_pending(self) -> None:
        """Answer the requests not answered yet, oldest first."""
        registration = self._registration()
        store = registration.store
        names = sorted(await store.get_children(paths.PREFLIGHT))
        for name in names:
            if name in self._answered:
                continue
            got = await store.get(f"{paths.PREFLIGHT}/{name}")
            if got is None:
                continue  # the check ended
            target = _target_of(got[0])
            if target is None:
                log.warning("migrate check request %s names no target; ignored", name)
                self._answered.add(name)
                continue
            answer = await self.dry_open(name, target)
            await registration.answer(answer)
            self._answered.add(name)
            log.info("answered migrate check %s: %s %s", name, target,
                     "opened" if answer.ok else f"cannot be opened: {answer.error}")
        self._answered &= set(names)

    async def dry_open(self, request: str, target: str) -> DryOpen:
        """Open ``target`` with this agent's credentials, read its root, close it."""
        store: MetadataStore | None = None
        try:
            async with asyncio.timeout(DRY_OPEN_SECONDS):
                store = await self._open_target(target)
                await store.get_children("/")
        except TimeoutError:
            return DryOpen(request, target, False, f"no answer within {DRY_OPEN_SECONDS:g}s")
        except (MetadataStoreError, ValueError) as e:
            return DryOpen(request, target, False, str(e) or type(e).__name__)
        finally:
            if store is not None:
                with contextlib.suppress(Exception):
                    await store.close()
        return DryOpen(request, target, True)


def _target_of(data: bytes) -> str | None:
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    target = body.get("targetUrl") if isinstance(body, dict) else None
    return target if isinstance(target, str) and target else None
