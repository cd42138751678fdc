"""The ZooKeeper front's SASL users file (``zookeeper.sasl_users_file``): one ``user:password`` a
line, the users a member's DIGEST-MD5 ``Client`` section may name.

The file holds passwords in the clear (DIGEST-MD5 needs them: the server computes the same digest
as the client), so it is refused when its group or others have any access to it, as ssh refuses a
private key: the agent does not start rather than serve with secrets others can read. No error
says a password or a line's text, only its number.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UsersFileError(ValueError):
    """A users file the front cannot take (one line, never a password)."""


def read_users(path: Path) -> dict[str, str]:
    """The users of ``path``: user -> password. Blank lines and ``#`` comments are skipped; a
    password may hold ``:`` (the first one ends the user name)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise UsersFileError(f"cannot read {str(path)!r}: {e.strerror or e}") from None
    try:
        # the mode of the file opened, not of the name looked at before: no race with a chmod
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsersFileError(f"{str(path)!r} is not a regular file")
        if info.st_mode & 0o077:
            raise UsersFileError(
                f"{str(path)!r} has mode {stat.S_IMODE(info.st_mode):04o}: group or others may read it; "
                "it holds passwords: chmod 600 it (or 400)"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read()
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsersFileError(f"{str(path)!r} is not UTF-8 text") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or user != user.strip() or not password:
            raise UsersFileError(f"{str(path)!r} line {number}: not user:password")
        if user in users:
            raise UsersFileError(f"{str(path)!r} line {number}: user {user!r} named twice")
        users[user] = password
    if not users:
        raise UsersFileError(f"{str(path)!r} names no user")
    return users
