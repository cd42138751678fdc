"""Path rules shared by every store (ZooKeeper's rules, which are the stricter ones)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidPath

SEPARATOR = "/"


def validate(path: str) -> str:
    """Return ``path`` if it is a valid absolute node path, else raise ``InvalidPath``.

    ZooKeeper's rules apply to every backend so that a tree valid in one store is valid in all:
    absolute, no trailing slash (except the root), no empty, ``.`` or ``..`` segment, no NUL or
    control characters, and nothing outside Unicode's Basic Multilingual Plane (ZooKeeper checks
    paths as UTF-16 and refuses surrogate pairs, so an emoji in a name could never move there).
    """
    if (
        path.__class__ is str
        and path.isascii()
        and path.isprintable()
        and path.startswith(SEPARATOR)
        and not path.endswith(SEPARATOR)
        and "//" not in path
        and "/." not in path
    ):
        return path  # the common case, a subset of the valid paths, checked fast
    if not isinstance(path, str):
        raise InvalidPath(repr(path), "not a string")
    if not path.startswith(SEPARATOR):
        raise InvalidPath(path, "must start with '/'")
    if path == SEPARATOR:
        return path
    if path.endswith(SEPARATOR):
        raise InvalidPath(path, "must not end with '/'")
    for segment in path[1:].split(SEPARATOR):
        if segment == "":
            raise InvalidPath(path, "empty segment")
        if segment in (".", ".."):
            raise InvalidPath(path, f"relative segment {segment!r}")
    for ch in path:
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or code >= 0xFFF0:
            raise InvalidPath(path, f"character U+{code:04X} not allowed")
    return path


def parent(path: str) -> str | None:
    """The parent of ``path``; ``None`` for the root."""
    if path == SEPARATOR:
        return None
    head = path.rsplit(SEPARATOR, 1)[0]
    return head or SEPARATOR


def ancestors(path: str) -> list[str]:
    """Every proper ancestor of ``path`` below the root, outermost first."""
    out: list[str] = []
    p = parent(path)
    while p is not None and p != SEPARATOR:
        out.append(p)
        p = parent(p)
    out.reverse()
    return out


def join(base: str, name: str) -> str:
    """The path of child ``name`` of ``base``."""
    return base + name if base.endswith(SEPARATOR) else f"{base}{SEPARATOR}{name}"


def is_under(path: str, root: str) -> bool:
    """True when ``path`` is ``root`` or lies below it."""
    if root == SEPARATOR:
        return True
    return path == root or path.startswith(root + SEPARATOR)


@dataclass(frozen=True)
class Namespace:
    """A store's root (ZooKeeper chroot, etcd key prefix) and the mapping between the paths a
    store's caller sees and the server's full paths (or keys) below that root."""

    root: str = SEPARATOR

    def full(self, path: str) -> str:
        """The server's path of ``path``: ``path`` below the root."""
        if self.root == SEPARATOR:
            return path
        return self.root if path == SEPARATOR else self.root + path

    def relative(self, full: str) -> str | None:
        """The caller's path of the server's ``full`` path; ``None`` when it is outside the root."""
        if self.root == SEPARATOR:
            return full if full.startswith(SEPARATOR) else None
        if full == self.root:
            return SEPARATOR
        if full.startswith(self.root + SEPARATOR):
            return full[len(self.root) :]
        return None

    def children_prefix(self, path: str) -> str:
        """What the server's paths of every node below ``path`` start with."""
        full = self.full(path)
        return full if full.endswith(SEPARATOR) else full + SEPARATOR
