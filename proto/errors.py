"""Errors that only the agent gives (its gateway's answers), beside the store errors it passes on;
written beside ``proto/`` with the conversions (``wire``), for the agent and its client alike.

Each is a ``MetadataStoreError`` so that code catching the store errors catches these too;
``metashift.client`` raises them on the client side from the agent's answer. Each says, with
``write_may_have_happened``, whether the call may have written anything.
"""

from __future__ import annotations

from metashift.stores.errors import AuthFailed, MetadataStoreError, StoreUnavailable


class HeldForMigration(StoreUnavailable):
    """A write the write gate held while a migration ran, until the caller's deadline passed (or the
    agent stopped): nothing was written and nothing will be; retry."""

    write_may_have_happened = False


class WriteOutcomeUnknown(StoreUnavailable):
    """A write the store stopped answering after it was handed over (or whose caller's deadline
    passed meanwhile): it may have been applied, or may still be. Read before retrying."""

    write_may_have_happened = True


class InvalidArgument(MetadataStoreError, ValueError):
    """A malformed request (bad expected_version, empty batch op, undecodable message, ...)."""

    write_may_have_happened = False


class NoSession(MetadataStoreError):
    """An ephemeral put without a live session: there is nothing its lifetime could follow."""

    write_may_have_happened = False


class Unauthenticated(AuthFailed):
    """The agent refused the caller: a missing or wrong bearer token. Nothing was done."""

    write_may_have_happened = False


class Internal(MetadataStoreError):
    """The agent failed in a way that is not the caller's fault (a bug): the outcome is unknown."""

    write_may_have_happened = True
