"""Errors that only the agent gives (its gateway's answers), beside the store errors it passes on.

Each is a ``MetadataStoreError`` so that code catching the store errors catches these too;
``metashift.client`` raises them on the client side from the agent's answer.
"""

from __future__ import annotations

from metashift.stores.errors import MetadataStoreError, StoreUnavailable


class HeldForMigration(StoreUnavailable):
    """A write the write gate held while a migration ran, until the caller's deadline passed (or the
    agent stopped): nothing was written and nothing will be; retry."""


class InvalidArgument(MetadataStoreError, ValueError):
    """A malformed request (bad expected_version, empty batch op, undecodable message, ...)."""


class NoSession(MetadataStoreError):
    """An ephemeral put without a live session: there is nothing its lifetime could follow."""


class Internal(MetadataStoreError):
    """The agent failed in a way that is not the caller's fault (a bug or a refused credential)."""
