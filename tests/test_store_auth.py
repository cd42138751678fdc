"""Credentials in store URLs: ZooKeeper digest auth, etcd user/password, etcd mutual TLS.

A caller without the right credentials gets ``AuthFailed`` (or cannot connect at all) and changes
nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import metashift
from metashift import AuthFailed, StoreUnavailable
from metashift_lab.servers import EtcdTLS, LocalEtcd, LocalZooKeeper
from tests.certs import make_certificates


async def test_zookeeper_digest_auth(zk_server: LocalZooKeeper, namespace: str) -> None:
    hostpart = zk_server.url.removeprefix("zk://")
    alice = await metashift.open_store(f"zk://alice:alice-pw@{hostpart}{namespace}")
    try:
        await alice.put("/secret", b"alice's", expected_version=-1)
        for intruder in (f"zk://bob:bob-pw@{hostpart}{namespace}", f"zk://alice:wrong@{hostpart}{namespace}"):
            # refused at connect (the chroot carries alice's ACL) or, at the latest, at the write
            with pytest.raises(AuthFailed):
                other = await metashift.open_store(intruder)
                try:
                    await other.put("/secret", b"overwritten")
                finally:
                    await other.close()
        again = await metashift.open_store(f"zk://alice:alice-pw@{hostpart}{namespace}")
        try:
            got = await again.get("/secret")
            assert got is not None and got[0] == b"alice's" and got[1].version == 0
        finally:
            await again.close()
    finally:
        await alice.close()


def _etcdctl(server: LocalEtcd, *args: str) -> None:
    env = dict(os.environ, ETCDCTL_API="3")
    subprocess.run(["etcdctl", "--endpoints", server.endpoint, *args], check=True, capture_output=True, env=env)


@pytest.fixture
def etcd_with_auth(fresh_servers: Any) -> LocalEtcd:
    server: LocalEtcd = fresh_servers.etcd()
    _etcdctl(server, "user", "add", "root", "--new-user-password=root-pw")
    _etcdctl(server, "user", "grant-role", "root", "root")
    _etcdctl(server, "role", "add", "pulsar")
    _etcdctl(server, "role", "grant-permission", "pulsar", "--prefix=true", "readwrite", "/")
    _etcdctl(server, "user", "add", "alice", "--new-user-password=alice-pw")
    _etcdctl(server, "user", "grant-role", "alice", "pulsar")
    _etcdctl(server, "auth", "enable")
    return server


async def test_etcd_user_and_password(etcd_with_auth: LocalEtcd) -> None:
    hostpart = etcd_with_auth.url.removeprefix("etcd://")
    store = await metashift.open_store(f"etcd://alice:alice-pw@{hostpart}")
    try:
        await store.put("/admin/clusters/c1", b"{}", expected_version=-1)
        eph = await store.put("/loadbalance/brokers/b1", b"{}", ephemeral=True)
        assert eph.ephemeral
        got = await store.get("/admin/clusters/c1")
        assert got is not None and got[0] == b"{}"
    finally:
        await store.close()
    with pytest.raises(AuthFailed):
        bad = await metashift.open_store(f"etcd://alice:wrong@{hostpart}")
        await bad.close()
    anonymous = None
    with pytest.raises(AuthFailed):
        anonymous = await metashift.open_store(etcd_with_auth.url)
        await anonymous.put("/admin/clusters/c1", b"overwritten")
    if anonymous is not None:
        await anonymous.close()
    check = await metashift.open_store(f"etcd://alice:alice-pw@{hostpart}")
    try:
        got = await check.get("/admin/clusters/c1")
        assert got is not None and got[0] == b"{}" and got[1].version == 0
    finally:
        await check.close()


async def test_etcd_mutual_tls(fresh_servers: Any, tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    tls = EtcdTLS(certs.server_cert, certs.server_key, certs.ca, certs.client_cert, certs.client_key)
    server = LocalEtcd(tls=tls)
    server.start()
    fresh_servers.started.append(server)
    store = await metashift.open_store(server.url)
    try:
        stat = await store.put("/over-tls", b"secure", expected_version=-1)
        assert stat.version == 0
    finally:
        await store.close()
    base = f"etcd://127.0.0.1:{server.port}?timeout=3"
    # no client certificate, or a CA that did not sign the server's: no connection, nothing written
    for url in (f"{base}&tls=true&ca={certs.ca}", f"{base}&ca={certs.other_ca}&cert={certs.client_cert}"
                f"&key={certs.client_key}", base):
        with pytest.raises((StoreUnavailable, AuthFailed)):
            s = await metashift.open_store(url)
            try:
                await s.put("/over-tls", b"intruder")
            finally:
                await s.close()
    store = await metashift.open_store(server.url)
    try:
        got = await store.get("/over-tls")
        assert got is not None and got[0] == b"secure" and got[1].version == 0
    finally:
        await store.close()

