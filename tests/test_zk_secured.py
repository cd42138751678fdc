"""The ZooKeeper store on secured servers the tests start (``tests.zk_secured_servers``): TLS on
``secureClientPort`` (Netty), client certificates, SASL DIGEST-MD5 and GSSAPI (a real MIT KDC),
each required of every session (``sessionRequireClientSASLAuth``).

Every refusal is ``AuthFailed`` with one line that says what failed, raised at the open (not a
timeout), and changes nothing (the chroot the URL names is not created); the password is in no
error and no log line."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from metashift import AuthFailed, NotificationType
from metashift.stores import SessionHandle, open_store
from metashift.stores.store import Store
from metashift.stores.zookeeper import ZooKeeperStore
from metashift_lab.ports import free_port
from metashift_lab.secured.zookeeper import LocalSecuredZooKeeper
from tests import zk_secured_servers as servers
from tests.harness import eventually
from tests.zk_secured_servers import PASSWORD, DigestZooKeeper, Kerberos, SecuredCerts

# the servers' fixtures (session scope: one server of each kind per run)
secured_certs = servers.secured_certs
tls_zk = servers.tls_zk
digest_zk = servers.digest_zk
kerberos = servers.kerberos
kerberos_zk = servers.kerberos_zk


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and text, f"not one line: {text!r}"
    return text


async def _absent(url_of_checker: str, root: str) -> bool:
    """``root`` does not exist (read by a store that may read it)."""
    checker = await open_store(url_of_checker)
    try:
        return not await checker.exists(root)
    finally:
        await checker.close()


async def _refused(url: str) -> str:
    """The open of ``url`` fails with AuthFailed: its one line."""
    with pytest.raises(AuthFailed) as err:
        store = await open_store(url)
        await store.close()
    return _one_line(err.value)


# ---- TLS --------------------------------------------------------------------------------------


async def test_tls_verifies_the_server_and_serves(tls_zk: LocalSecuredZooKeeper, namespace: str) -> None:
    store = await open_store(tls_zk.url_for(namespace))
    try:
        stat = await store.put("/a", b"over tls", expected_version=-1)
        got = await store.get("/a")
        assert got is not None and got[0] == b"over tls" and got[1].version == stat.version == 0
        eph = await store.put("/eph", b"e", ephemeral=True)
        assert eph.ephemeral and eph.created_by_self
        # the four-letter words of session_lives go over TLS too, on the secure port
        assert isinstance(store, Store)
        lives = await store.session_lives({eph.owner: ["/eph"]})
        life = lives[eph.owner]
        assert life.renewed is True and life.alive is True, life
        assert "TLS" not in life.unknown
    finally:
        await store.close()


async def test_an_untrusted_ca_is_refused_in_one_line(
    tls_zk: LocalSecuredZooKeeper, secured_certs: SecuredCerts, namespace: str
) -> None:
    line = await _refused(tls_zk.url_for(namespace, ca=secured_certs.certs.other_ca))
    assert "the server's certificate is not trusted" in line and f"localhost:{tls_zk.port}" in line
    # no ca: the system's CAs, which do not hold the test's
    line = await _refused(tls_zk.url_for(namespace, ca="", tls="true"))
    assert "the server's certificate is not trusted" in line
    assert await _absent(tls_zk.url_for(), namespace)


async def test_a_hostname_mismatch_is_refused_in_one_line(tls_zk: LocalSecuredZooKeeper, namespace: str) -> None:
    # the server's certificate names localhost, not the address
    line = await _refused(tls_zk.url_for(namespace, host="127.0.0.1"))
    assert "hostname mismatch" in line and "'127.0.0.1'" in line
    assert await _absent(tls_zk.url_for(), namespace)


async def test_sasl_against_a_server_without_sasl_is_one_line(tls_zk: LocalSecuredZooKeeper, namespace: str,
                                                               tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("whatever\n")
    line = await _refused(tls_zk.url_for(namespace, sasl="DIGEST-MD5", username="u", password_file=password))
    assert line.startswith("SASL DIGEST-MD5: the server sent no challenge"), line
    assert await _absent(tls_zk.url_for(), namespace)


def _tls_four_letter(server: LocalSecuredZooKeeper, certs: SecuredCerts, word: str) -> str:
    context = ssl.create_default_context(cafile=str(certs.certs.ca))
    context.load_cert_chain(str(certs.certs.client_cert), str(certs.certs.client_key))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def test_the_secure_port_answers_four_letter_words_over_tls(
    tls_zk: LocalSecuredZooKeeper, secured_certs: SecuredCerts
) -> None:
    assert "Mode: standalone" in _tls_four_letter(tls_zk, secured_certs, "srvr")
    assert "secureClientPort=" in _tls_four_letter(tls_zk, secured_certs, "conf")
    assert "clientPort=-1" in _tls_four_letter(tls_zk, secured_certs, "conf")  # no plain port at all


# ---- SASL DIGEST-MD5, required ------------------------------------------------------------------


async def test_digest_md5_reads_writes_ephemerals_and_watches(digest_zk: DigestZooKeeper, namespace: str) -> None:
    store = await open_store(digest_zk.url(namespace))
    try:
        seen: asyncio.Queue[object] = asyncio.Queue()
        store.add_listener(seen.put_nowait)
        await store.watch_ready()
        await store.put("/a", b"one", expected_version=-1)
        await store.put("/a/b", b"two", expected_version=-1)
        eph = await store.put("/a/eph", b"mine", ephemeral=True)
        assert eph.ephemeral and eph.created_by_self
        assert sorted(await store.get_children("/a")) == ["b", "eph"]
        got = await store.get("/a/b")
        assert got is not None and got[0] == b"two"
        changes = set()

        async def heard() -> bool:
            while not seen.empty():
                n = seen.get_nowait()
                changes.add((getattr(n, "type", None), getattr(n, "path", None)))
            return (NotificationType.CREATED, "/a/eph") in changes

        await eventually(heard, 15, "the watch's notification of the ephemeral")
        # another session of the same user sees it, owned by the first
        other = await open_store(digest_zk.url(namespace))
        try:
            got = await other.get("/a/eph")
            assert got is not None and got[1].owner == eph.owner and not got[1].created_by_self
        finally:
            await other.close()
    finally:
        await store.close()


async def test_digest_md5_wrong_password_is_one_line_changes_nothing_and_is_never_shown(
    digest_zk: DigestZooKeeper, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    line = await _refused(digest_zk.url(namespace, password_file=digest_zk.wrong_password_file))
    assert line.startswith(f"SASL DIGEST-MD5 authentication to zk://localhost:{digest_zk.server.port} refused")
    assert "'metashift'" in line
    # (with a password no other user has: Debian's ZooKeeper 3.8.0 accepts an unknown user name with
    # the password of the user last authenticated, ZOOKEEPER-4839, fixed in 3.9.3)
    line2 = await _refused(digest_zk.url(namespace, username="nobody", password_file=digest_zk.wrong_password_file))
    assert "'nobody'" in line2
    for text in (line, line2, caplog.text, *(r.getMessage() for r in caplog.records)):
        assert PASSWORD not in text and "-not" not in text
    assert await _absent(digest_zk.url(), namespace)


async def test_a_session_without_sasl_is_refused_by_the_server(digest_zk: DigestZooKeeper, namespace: str) -> None:
    line = await _refused(digest_zk.server.url_for(namespace))
    assert "requires SASL authentication" in line
    assert await _absent(digest_zk.url(), namespace)


async def test_sasl_is_done_again_on_every_new_connection(digest_zk: DigestZooKeeper, namespace: str) -> None:
    store = await open_store(digest_zk.url(namespace))
    assert isinstance(store, ZooKeeperStore)
    try:
        eph = await store.put("/eph", b"kept", ephemeral=True)
        session = store.session_id
        for _ in range(2):
            conn = store._session.conn
            conn.writer.transport.abort()  # the network cuts the connection: the session lives on
            await eventually(lambda: store._session.conn is not conn, 15, "a new connection")  # noqa: B023
            # on a server that requires SASL, a request on an unauthenticated connection is refused
            stat = await store.put("/after", b"x")
            assert store.session_id == session
        got = await store.get("/eph")
        assert got is not None and got[1].owner == eph.owner == session and stat.version >= 0
    finally:
        await store.close()


async def test_a_session_resumed_over_tls_and_sasl(digest_zk: DigestZooKeeper, namespace: str) -> None:
    url = digest_zk.url(namespace, session_timeout="20")
    first = await open_store(url)
    try:
        stat = await first.put("/reg", b"bookie-1", ephemeral=True)
        handle = first.session_handle()
        assert handle is not None
    finally:
        await first.detach()
    handle = SessionHandle.from_json(handle.to_json())
    # a wrong password on the way: refused, and the session is still there for the right one
    await _refused(digest_zk.url(namespace, session_timeout="20", password_file=digest_zk.wrong_password_file))
    second = await open_store(url, resume=handle)
    assert isinstance(second, ZooKeeperStore)
    try:
        assert second.resumed and second.session_id == handle.id
        got = await second.get("/reg")
        assert got is not None and got[0] == b"bookie-1" and got[1].created_by_self and got[1].owner == stat.owner
        after = await second.put("/reg", b"bookie-1 v2", expected_version=0, ephemeral=True)
        assert after.version == 1 and after.ephemeral
    finally:
        await second.close()


# ---- mutual TLS and SASL GSSAPI (Kerberos), required --------------------------------------------


def _gssapi_url(server: LocalSecuredZooKeeper, kerberos: Kerberos, root: str, principal: str = "alice",
                **options: str | Path) -> str:
    settings: dict[str, Any] = {"sasl": "GSSAPI", "principal": principal,
                                       "keytab": kerberos.keytabs.get(principal, "")}
    settings.update(options)
    return server.url_for(root, **settings)


async def test_gssapi_with_a_client_certificate(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, namespace: str
) -> None:
    store = await open_store(_gssapi_url(kerberos_zk, kerberos, namespace))
    try:
        await store.put("/k", b"kerberos", expected_version=-1)
        eph = await store.put("/k/eph", b"e", ephemeral=True)
        got = await store.get("/k/eph")
        assert got is not None and got[0] == b"e" and got[1].owner == eph.owner
    finally:
        await store.close()
    log = kerberos_zk.log_path.read_text(errors="replace")
    assert f"authorizationID: alice@{kerberos.kdc.realm}" in log  # the session's identity: sasl:alice@REALM


async def test_a_missing_client_certificate_is_refused_in_one_line(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, namespace: str
) -> None:
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, cert="", key=""))
    assert line.startswith(f"TLS: the handshake with localhost:{kerberos_zk.port} failed"), line
    assert "client certificate" in line


async def test_gssapi_refusals_are_one_line_each(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, namespace: str
) -> None:
    realm = kerberos.kdc.realm
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, principal="gone", keytab=kerberos.gone_keytab))
    assert line.startswith(f"Kerberos: cannot get a ticket for principal gone from the KDC: Client 'gone@{realm}' "
                           "not found in Kerberos database"), line
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, principal="stale",
                                      keytab=kerberos.stale_keytab))
    assert "cannot get a ticket for principal stale" in line and "Preauthentication failed" in line, line
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, principal="bob",
                                      keytab=kerberos.keytabs["alice"]))
    assert "holds no key for principal bob" in line, line
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, principal="bob", service="nosuch"))
    assert "knows no server principal nosuch/localhost" in line, line
    assert await _absent(_gssapi_url(kerberos_zk, kerberos, ""), namespace)


async def test_gssapi_kdc_unreachable_is_one_line(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, namespace: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a configuration whose KDC does not listen; a principal no test got a ticket for yet (a
    # ticket in the store's memory cache needs no KDC)
    dead = tmp_path / "krb5.conf"
    dead.write_text(kerberos.kdc.krb5_conf.read_text().replace(f"127.0.0.1:{kerberos.kdc.port}",
                                                              f"127.0.0.1:{free_port()}"))
    monkeypatch.setenv("KRB5_CONFIG", str(dead))
    line = await _refused(_gssapi_url(kerberos_zk, kerberos, namespace, principal="carol"))
    assert line.startswith("Kerberos: KDC unreachable: Cannot contact any KDC for realm"), line
    monkeypatch.setenv("KRB5_CONFIG", str(kerberos.kdc.krb5_conf))
    store = await open_store(_gssapi_url(kerberos_zk, kerberos, namespace, principal="carol"))
    try:
        assert await store.get("/") is not None
    finally:
        await store.close()


async def test_gssapi_from_the_default_credential_cache(
    kerberos_zk: LocalSecuredZooKeeper, kerberos: Kerberos, namespace: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No keytab: the tickets of the process's credential cache (``KRB5CCNAME``), as after kinit."""
    cache = f"FILE:{tmp_path / 'ccache'}"
    env = {**os.environ, **kerberos.kdc.env(), "KRB5CCNAME": cache}
    kinit = ["kinit", "-k", "-t", str(kerberos.keytabs["dave"]), kerberos.kdc.principal("dave")]
    await asyncio.to_thread(subprocess.run, kinit, env=env, check=True, capture_output=True, timeout=30)
    monkeypatch.setenv("KRB5CCNAME", cache)
    for url in (kerberos_zk.url_for(namespace, sasl="GSSAPI"),
                kerberos_zk.url_for(namespace, sasl="GSSAPI", principal=kerberos.kdc.principal("dave"))):
        store = await open_store(url)
        try:
            await store.put("/from-cache", b"dave")
        finally:
            await store.close()
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty'}")
    line = await _refused(kerberos_zk.url_for(namespace + "-none", sasl="GSSAPI"))
    assert line.startswith("Kerberos: no ticket for the credential cache's principal in the credential cache"), line


async def test_digest_auth_without_sasl_keeps_its_meaning_over_tls(
    tls_zk: LocalSecuredZooKeeper, namespace: str
) -> None:
    """``user:password@`` without ``sasl``: ZooKeeper's digest scheme, nodes creator-all."""
    alice = tls_zk.url_for(namespace).replace("zk://", "zk://alice:alice-pw@", 1)
    store = await open_store(alice)
    try:
        await store.put("/secret", b"alice's", expected_version=-1)
    finally:
        await store.close()
    with pytest.raises(AuthFailed):
        intruder = await open_store(tls_zk.url_for(namespace).replace("zk://", "zk://bob:bob-pw@", 1))
        try:
            await intruder.put("/secret", b"overwritten")
        finally:
            await intruder.close()
