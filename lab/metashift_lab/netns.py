"""A node of its own on this machine: a network namespace whose processes reach the stores only
through proxies (``netproxy``), so that one call cuts, blackholes or slows every link the node has
while the other processes of the machine reach the same stores directly.

Inside the namespace each store address is a proxy listening on the same ``127.0.0.1:PORT`` as the
real server outside, so the node dials the URLs everyone else dials, and an address a store hands
out itself (Oxia's shard assignments name its data servers) leads to the proxy as well. What the
node serves (an agent's ZooKeeper front) is reached from outside through a proxy of its own,
which is never cut: the node's members sit beside it, only its links to the stores go through the
partition. Linux only, as root (``ip netns``); ``remove`` deletes the namespace."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Iterable, Sequence
from typing import Self

from metashift_lab.netproxy import PASS, Link, ProxyError, TcpProxy, split_hosts, url_hosts

#: Seconds an ``ip`` command may take.
IP_TIMEOUT = 20.0


class NetNamespaceError(RuntimeError):
    """A network namespace could not be made (not root, no ``ip``, no kernel support)."""


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetNamespaceError(f"ip {' '.join(args)}: {e}") from None
    if done.returncode != 0:
        raise NetNamespaceError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")


class NetNamespace:
    """A named network namespace with its loopback up (``ip netns add``), removed by ``remove``."""

    def __init__(self, prefix: str = "metashift-") -> None:
        self.name = f"{prefix}{os.getpid()}-{secrets.token_hex(3)}"
        self.made = False

    @property
    def path(self) -> str:
        """What ``setns`` opens (``netproxy``'s ``listen_netns`` / ``upstream_netns``)."""
        return f"/run/netns/{self.name}"

    def create(self) -> Self:
        _ip("netns", "add", self.name)
        self.made = True
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise
        return self

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: the pid stays the same)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def remove(self) -> None:
        """Delete the namespace (its sockets go with their processes). Never raises."""
        if self.made:
            with contextlib.suppress(NetNamespaceError):
                _ip("netns", "delete", self.name)
            self.made = False


class IsolatedNode:
    """A network namespace whose only ways out are proxies to the given store addresses (the
    node's links, switched together by ``set``), and proxies from outside to what it serves."""

    def __init__(self, addresses: Iterable[tuple[str, int]]) -> None:
        self.namespace = NetNamespace()
        self.addresses = sorted(set(addresses))
        self.links: list[TcpProxy] = []
        """One proxy per store address, inside the namespace (what ``set`` switches)."""
        self.exposed: dict[int, TcpProxy] = {}
        """Port inside -> the proxy outside that reaches it."""

    @classmethod
    def of_urls(cls, *urls: str) -> IsolatedNode:
        """A node whose links are every host named by the store URLs ``urls``."""
        return cls(address for url in urls for address in split_hosts(url_hosts(url)[1]))

    @property
    def link(self) -> Link:
        return self.links[0].link if self.links else PASS

    def start(self) -> Self:
        try:
            self.namespace.create()
            for host, port in self.addresses:
                if not host.startswith("127."):
                    raise ProxyError(f"an isolated node reaches loopback addresses only, not {host}:{port}")
                self.links.append(TcpProxy(
                    (host, port), listen_host=host, listen_port=port, listen_netns=self.namespace.path,
                    name=f"{self.namespace.name} link to {host}:{port}").start())  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def expose(self, port: int) -> str:
        """``127.0.0.1:PORT`` inside, reached from outside: the address outside (a free port)."""
        if port not in self.exposed:
            self.exposed[port] = TcpProxy(
                ("127.0.0.1", port), upstream_netns=self.namespace.path,
                name=f"{self.namespace.name} front {port}").start()  # fmt: skip
        return self.exposed[port].address

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this node."""
        return self.namespace.command(argv)

    def set(self, link: Link, only: Iterable[tuple[str, int]] | None = None) -> None:
        """``link`` on every link of the node to its stores, or on the links to the addresses
        ``only`` names (returns once in force on all of them)."""
        chosen = None if only is None else set(only)
        for proxy in self.links:
            if chosen is None or proxy.upstream in chosen:
                proxy.set(link)

    def stop(self) -> None:
        """Stop every proxy and remove the namespace. Never raises."""
        for proxy in [*self.links, *self.exposed.values()]:
            proxy.stop()
        self.links.clear()
        self.exposed.clear()
        self.namespace.remove()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
