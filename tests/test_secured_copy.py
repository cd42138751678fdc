"""``metashift copy`` and ``metashift verify`` out of a ZooKeeper that serves TLS only, requires a
client certificate and SASL GSSAPI (Kerberos, a real MIT KDC) of every session, into an Oxia that
serves TLS and checks OIDC bearer tokens: on Spark, every node with its value, and verified; a
wrong credential on either side is one line, with nothing written; no secret (the token, the
keytab's key) in what the commands print."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metashift.stores import open_store
from metashift_lab.sample_tree import generate
from metashift_lab.secured.oxia import OidcIssuer, OxiaTLS, SecuredOxia
from metashift_lab.secured.zookeeper import LocalSecuredZooKeeper
from tests.agent_processes import cli
from tests.harness import require_oxia
from tests.zk_secured_servers import Kerberos, SecuredCerts, kerberos, kerberos_zk, secured_certs

__all__ = ["kerberos", "kerberos_zk", "secured_certs"]  # the session fixtures this module uses

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> OidcIssuer:
    return OidcIssuer(tmp_path_factory.mktemp("oidc"))


@pytest.fixture(scope="module")
def secured_oxia(secured_certs: SecuredCerts, oidc: OidcIssuer,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredOxia]:
    require_oxia()
    certs = secured_certs.certs
    cluster = SecuredOxia(tmp_path_factory.mktemp("secured-oxia"),
                          tls=OxiaTLS(certs.server_cert, certs.server_key, certs.ca), issuer=oidc)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


async def _copy(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = await asyncio.to_thread(cli, *args, timeout=600)
    return done, time.monotonic() - began


async def test_copy_and_verify_out_of_a_kerberos_zookeeper_into_an_oidc_oxia(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, secured_oxia: SecuredOxia, oidc: OidcIssuer,
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    root = f"/copy{abs(hash(request.node.nodeid)) % 10**8}"
    source_url = kerberos_zk.url_for(root, sasl="GSSAPI", principal=kerberos.kdc.principal("alice"),
                                     keytab=kerberos.keytabs["alice"])
    token_file = oidc.write_token(tmp_path / "oxia.token")
    token = token_file.read_text().strip()
    target_url = secured_oxia.url(f"default{root}", token_file=token_file)
    async with await open_store(source_url) as source:
        tree = await generate(source, 12, seed=5, ephemerals=False)
    # a wrong credential on either side: one line, nothing written
    wrong_token = oidc.write_token(tmp_path / "wrong.token", audience="someone-else")
    refused, _ = await _copy("copy", "--source", source_url, "--target",
                             secured_oxia.url(f"default{root}", token_file=wrong_token), "--no-progress")
    assert refused.returncode != 0
    said = [line for line in refused.stderr.splitlines() if line.startswith("metashift: error:")]
    assert len(said) == 1 and "token" in said[0], refused.stderr
    stranger = kerberos_zk.url_for(root, sasl="GSSAPI", principal=kerberos.kdc.principal("gone"),
                                   keytab=kerberos.gone_keytab)
    refused_source, _ = await _copy("copy", "--source", stranger, "--target", target_url, "--no-progress")
    assert refused_source.returncode != 0
    said = [line for line in refused_source.stderr.splitlines() if line.startswith("metashift: error:")]
    assert len(said) == 1 and "Kerberos" in said[0], refused_source.stderr
    async with await open_store(target_url) as target:
        assert await target.get_children("/") == []  # nothing written by the refused copies

    copied, took = await _copy("copy", "--source", source_url, "--target", target_url, "--verify", "--json",
                               "--no-progress")
    assert copied.returncode == 0, copied.stderr[-4000:]
    report = json.loads(copied.stdout)
    assert report["verify"]["ok"] is True, report["verify"]
    print(f"secured copy + verify of {tree.persistent} nodes: {took:.1f} s")
    verified, _ = await _copy("verify", "--source", source_url, "--target", target_url, "--json")
    assert verified.returncode == 0, verified.stderr[-4000:]
    async with await open_store(source_url) as source, await open_store(target_url) as target:
        pending, seen = ["/admin"], 0
        while pending:  # every node of a subtree, read back from both sides
            path = pending.pop()
            got, want = await target.get(path), await source.get(path)
            assert got is not None and want is not None and got[0] == want[0], path
            pending += [f"{path}/{c}" for c in await source.get_children(path)]
            seen += 1
        assert seen > 12
    for text in (copied.stdout, copied.stderr, verified.stdout, verified.stderr, refused.stderr,
                 refused_source.stderr):
        assert token not in text
