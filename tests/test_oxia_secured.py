"""The Oxia store on an Oxia that serves TLS and checks OIDC bearer tokens (a coordinator and two
data servers, ``metashift_lab.secured.oxia``): every operation over TLS with a token, on both
servers the shard assignments name; the token file rewritten while the store runs; every wrong
credential (no token, a bad, expired, foreign one; an untrusted CA, a certificate for another
host, plaintext against TLS and TLS against plaintext) one line, nothing written, the token in no
error and no log line."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from metashift import Notification, NotificationType
from metashift.stores import AuthFailed, MetadataStore, StoreUnavailable, open_store
from metashift.stores.oxia import credentials
from metashift.stores.oxia.store import OxiaStore
from metashift_lab.secured.oxia import OidcIssuer, OxiaDataServer, OxiaTLS, SecuredOxia
from tests.certs import Certificates, host_certificate, make_certificates
from tests.harness import bounded_teardown, eventually, require_oxia

#: Tokens that outlive the module; the short ones expire within the test that waits for it.
LONG = 3600
SHORT = 3


# ---- the secured cluster and its credentials ----------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secured-oxia")


@pytest.fixture(scope="module")
def certs(workdir: Path) -> Certificates:
    return make_certificates(workdir / "certs")


@pytest.fixture(scope="module")
def issuer(workdir: Path) -> OidcIssuer:
    return OidcIssuer(workdir / "oidc")


@pytest.fixture(scope="module")
def foreign_key(workdir: Path) -> str:
    """A private key the server does not know (a token signed with it must be refused)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def secured(workdir: Path, certs: Certificates, issuer: OidcIssuer) -> Iterator[SecuredOxia]:
    require_oxia()
    cluster = SecuredOxia(workdir / "oxia", tls=OxiaTLS(certs.server_cert, certs.server_key, certs.ca), issuer=issuer)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


def mint(issuer: OidcIssuer, *, lifetime: float = LONG, audience: str | None = None, key: str | None = None,
         iss: str | None = None) -> str:
    """A token minted with PyJWT (RS256), as an identity provider would hand out."""
    now = int(time.time())
    claims = {"iss": iss or issuer.issuer, "sub": "metashift-test", "aud": audience or issuer.audience,
              "iat": min(now, now + int(lifetime)), "exp": now + int(lifetime)}
    return jwt.encode(claims, key or issuer.private_key.read_text(), algorithm="RS256")


@pytest.fixture
def token_file(tmp_path: Path, issuer: OidcIssuer) -> Path:
    return issuer.write_token(tmp_path / "oxia.token", mint(issuer))


@pytest.fixture
def token(token_file: Path) -> str:
    """The token ``token_file`` holds."""
    return token_file.read_text().strip()


@pytest.fixture
def url(secured: SecuredOxia, namespace: str, token_file: Path) -> str:
    return secured.url("default" + namespace, token_file=token_file)


@pytest.fixture
async def opened() -> AsyncIterator[Callable[..., Any]]:
    """Open stores, every one closed after the test."""
    stores: list[MetadataStore] = []

    async def _open(url: str, **kwargs: Any) -> MetadataStore:
        store = await open_store(url, **kwargs)
        stores.append(store)
        return store

    yield _open
    for store in stores:
        await bounded_teardown(f"store {store.url}", store.close())


def one_line(error: BaseException, *secrets: str) -> str:
    """The error's text, checked: one line, no secret in it."""
    text = str(error)
    assert "\n" not in text and len(text) < 400, text
    for secret in secrets:
        assert secret not in text
    return text


def no_secret_in_logs(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    for record in caplog.records:
        message = record.getMessage() + (record.exc_text or "")
        for secret in secrets:
            assert secret not in message, record.name


# ---- what works ---------------------------------------------------------------------------------


async def test_every_operation_over_tls_with_a_token_on_both_servers(
    url: str, opened: Callable[..., Any], caplog: pytest.LogCaptureFixture, token: str
) -> None:
    caplog.set_level(logging.DEBUG)
    store = await opened(url)
    assert isinstance(store, OxiaStore)
    conn = store._conn
    assert len({s.leader for s in conn.shards}) == 2  # the assignments name both data servers
    hit: set[int] = set()
    i = 0
    while hit != {s.id for s in conn.shards} and i < 200:  # a record on every shard: both servers
        stat = await store.put(f"/n{i}", f"v{i}".encode(), expected_version=-1)
        assert stat.version == 0
        hit.add(conn.shard_for(store._keys.key(f"/n{i}")).id)
        i += 1
    assert hit == {s.id for s in conn.shards}
    assert len(conn._channels) == 2
    for j in range(i):
        got = await store.get(f"/n{j}")
        assert got is not None and got[0] == f"v{j}".encode() and got[1].version == 0
    assert sorted(await store.get_children("/")) == sorted(f"n{j}" for j in range(i))
    stat = await store.put("/n0", b"again", expected_version=0)
    assert stat.version == 1
    await store.delete("/n0", expected_version=1)
    assert await store.get("/n0") is None
    assert "token_file=" in str(store.url) and token not in repr(store.url)
    no_secret_in_logs(caplog, token)


async def test_ephemerals_sessions_and_watches(url: str, opened: Callable[..., Any]) -> None:
    watcher = await opened(url)
    seen: asyncio.Queue[Notification] = asyncio.Queue()
    watcher.add_listener(seen.put_nowait)
    await watcher.put("/members", b"", expected_version=-1)
    await watcher.get_children("/members")
    owner = await opened(url)
    stat = await owner.put("/members/bookie-1", b"up", expected_version=-1, ephemeral=True)
    assert stat.ephemeral
    got = await watcher.get("/members/bookie-1")
    assert got is not None and got[0] == b"up" and got[1].ephemeral and not got[1].created_by_self
    mine = await owner.get("/members/bookie-1")
    assert mine is not None and mine[1].created_by_self
    await _await(seen, NotificationType.CREATED, "/members/bookie-1")
    await owner.close()  # its session ends: its ephemeral goes, and the watcher hears it
    await _await(seen, NotificationType.DELETED, "/members/bookie-1")
    assert await watcher.get("/members/bookie-1") is None


async def _await(seen: asyncio.Queue[Notification], kind: NotificationType, path: str) -> None:
    async with asyncio.timeout(20):
        while True:
            n = await seen.get()
            if n.type == kind and n.path == path:
                return


async def test_a_detached_session_is_resumed_on_the_secured_oxia(url: str) -> None:
    first = await open_store(url + "&session_timeout=10")
    try:
        await first.put("/reg", b"bookie-1", expected_version=-1, ephemeral=True)
        handle = first.session_handle()
        assert handle is not None and handle.kind == "oxia"
    finally:
        await first.detach()
    second = await open_store(url + "&session_timeout=10", resume=handle)
    try:
        assert second.resumed
        got = await second.get("/reg")
        assert got is not None and got[0] == b"bookie-1" and got[1].ephemeral and got[1].created_by_self
    finally:
        await second.close()


async def test_a_rewritten_token_file_is_read_again_and_the_old_token_expiring_breaks_nothing(
    secured: SecuredOxia, namespace: str, issuer: OidcIssuer, tmp_path: Path, opened: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "rotating.token"
    old = mint(issuer, lifetime=SHORT)
    expires = time.time() + SHORT
    issuer.write_token(path, old)
    url = secured.url("default" + namespace, token_file=path)
    store = await opened(url)
    seen: asyncio.Queue[Notification] = asyncio.Queue()
    store.add_listener(seen.put_nowait)  # streams opened with the old token
    await store.put("/rot", b"old token", expected_version=-1)
    await store.put("/rot/eph", b"", expected_version=-1, ephemeral=True)  # a session kept alive across
    new = mint(issuer)
    issuer.write_token(path, new)  # the sidecar's rewrite (a rename), before the old one expires
    await eventually(lambda: time.time() > expires + 1, SHORT + 5, "the old token expired")
    stat = await store.put("/rot", b"new token", expected_version=0)
    assert stat.version == 1
    got = await store.get("/rot/eph")
    assert got is not None and got[1].ephemeral  # its session lived on through the old token's end
    await _await(seen, NotificationType.MODIFIED, "/rot")  # the streams still deliver
    other = await opened(url)  # a new store reads the new token
    assert (await other.get("/rot")) is not None
    no_secret_in_logs(caplog, old, new)


async def test_a_token_rewritten_within_the_check_interval_is_taken_on_refusal(
    secured: SecuredOxia, namespace: str, issuer: OidcIssuer, tmp_path: Path, opened: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file is looked at once a second; a call refused in between (the old token expired just
    after the rewrite) reads it again and is made once more."""
    monkeypatch.setattr(credentials, "TOKEN_CHECK_INTERVAL", 3600.0)
    path = tmp_path / "late.token"
    issuer.write_token(path, mint(issuer, lifetime=SHORT))
    expires = time.time() + SHORT
    store = await opened(secured.url("default" + namespace, token_file=path))
    await store.put("/late", b"1", expected_version=-1)
    issuer.write_token(path, mint(issuer))
    await eventually(lambda: time.time() > expires + 1, SHORT + 5, "the old token expired")
    assert (await store.put("/late", b"2", expected_version=0)).version == 1


async def test_a_token_file_rewritten_with_a_refused_token_fails_calls_with_one_line(
    secured: SecuredOxia, namespace: str, issuer: OidcIssuer, token_file: Path, tmp_path: Path,
    opened: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, foreign_key: str,
) -> None:
    """A token file rewritten with a token the server refuses: the call fails (AuthFailed, one
    line naming the file), nothing is written."""
    monkeypatch.setattr(credentials, "TOKEN_CHECK_INTERVAL", 0.0)
    url = secured.url("default" + namespace, token_file=token_file)
    store = await opened(url)
    await store.put("/kept", b"", expected_version=-1)
    bad = mint(issuer, key=foreign_key)
    issuer.write_token(token_file, bad)
    with pytest.raises(AuthFailed) as refused:
        await store.put("/refused", b"x", expected_version=-1)
    text = one_line(refused.value, bad)
    assert f"token_file {token_file}" in text and "/refused" in text
    good = tmp_path / "good.token"
    issuer.write_token(good, mint(issuer))
    reader = await opened(secured.url("default" + namespace, token_file=good))
    assert await reader.get("/refused") is None
    assert await reader.get("/kept") is not None


# ---- every wrong credential: one line, nothing written ------------------------------------------


@pytest.mark.parametrize("case", ["none", "malformed", "expired", "audience", "foreign key", "issuer"])
async def test_a_refused_token_is_one_line_and_writes_nothing(
    case: str, secured: SecuredOxia, namespace: str, issuer: OidcIssuer, foreign_key: str, tmp_path: Path,
    opened: Callable[..., Any], caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = {
        "none": None,
        "malformed": "not-a-jwt",
        "expired": mint(issuer, lifetime=-60),
        "audience": mint(issuer, audience="someone-else"),
        "foreign key": mint(issuer, key=foreign_key),
        "issuer": mint(issuer, iss="https://elsewhere.test"),
    }
    token = tokens[case]
    reasons = {"none": "empty token", "malformed": "malformed", "expired": "expired", "audience": "audience",
               "foreign key": "signature", "issuer": "unknown issuer"}
    path = tmp_path / "t.token"
    options: dict[str, Any] = {}
    if token is not None:
        options["token_file"] = issuer.write_token(path, token)
    with pytest.raises(AuthFailed) as refused:
        await open_store(secured.url("default" + namespace, **options))
    text = one_line(refused.value, *(t for t in tokens.values() if t))
    assert reasons[case] in text, text
    assert ("requires a bearer token" in text) if token is None else (f"token_file {path}" in text)
    no_secret_in_logs(caplog, *(t for t in tokens.values() if t))
    good = tmp_path / "good.token"
    reader = await opened(secured.url("default" + namespace, token_file=issuer.write_token(good, mint(issuer))))
    assert await reader.get_children("/") == []


async def test_a_token_in_the_url_is_refused_without_showing_it(
    secured: SecuredOxia, namespace: str, issuer: OidcIssuer
) -> None:
    expired = mint(issuer, lifetime=-60)
    with pytest.raises(AuthFailed) as refused:
        await open_store(secured.url("default" + namespace, token=expired))
    assert "token of the URL" in one_line(refused.value, expired)


async def test_an_untrusted_ca_is_one_line(
    secured: SecuredOxia, namespace: str, certs: Certificates, token_file: Path, token: str
) -> None:
    with pytest.raises(AuthFailed) as refused:
        await open_store(secured.url("default" + namespace, token_file=token_file, ca=certs.other_ca))
    text = one_line(refused.value, token)
    assert "untrusted certificate" in text and str(certs.other_ca) in text, text


async def test_a_certificate_for_another_host_is_one_line(
    certs: Certificates, tmp_path: Path, token_file: Path, token: str
) -> None:
    """A data server whose certificate names another host (no coordinator: the handshake is what
    fails)."""
    require_oxia()
    cert, key = host_certificate(certs, "elsewhere", dns=("elsewhere.test",))
    server = OxiaDataServer(tmp_path / "elsewhere", 9, OxiaTLS(cert, key, certs.ca), None)
    server.start()
    try:
        with pytest.raises(AuthFailed) as refused:
            await open_store(f"oxia://{server.public}/default?tls=true&ca={certs.ca}&token_file={token_file}")
        assert "hostname mismatch" in one_line(refused.value, token)
    finally:
        server.cleanup()


async def test_tls_against_a_plaintext_port_and_plaintext_against_tls_are_one_line(
    secured: SecuredOxia, certs: Certificates, tmp_path: Path, token_file: Path, token: str
) -> None:
    require_oxia()
    plain = OxiaDataServer(tmp_path / "plain", 8, None, None)
    plain.start()
    try:
        with pytest.raises(AuthFailed) as refused:
            await open_store(f"oxia://{plain.public}/default?tls=true&ca={certs.ca}")
        assert "does not speak TLS" in one_line(refused.value)
    finally:
        plain.cleanup()
    with pytest.raises(StoreUnavailable) as unanswered:
        await open_store(f"oxia://{secured.address}/default?timeout=2&token_file={token_file}")
    assert "tls=true" in one_line(unanswered.value, token)


async def test_an_unreadable_or_empty_token_file_is_one_line(
    secured: SecuredOxia, namespace: str, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(AuthFailed) as refused:
        await open_store(secured.url("default" + namespace, token_file=empty))
    assert f"token_file {empty} is empty" in one_line(refused.value)
    spaced = tmp_path / "spaced.token"
    spaced.write_text("two words\n")
    with pytest.raises(AuthFailed) as refused:
        await open_store(secured.url("default" + namespace, token_file=spaced))
    text = one_line(refused.value, "two words")
    assert "does not hold a bearer token" in text


async def test_a_server_requiring_client_certificates(certs: Certificates, tmp_path: Path) -> None:
    """``--tls-client-auth``: without ``cert``/``key`` one line; with them the handshake passes (a
    data server without its coordinator then answers "not initialized": it was reached)."""
    require_oxia()
    tls = OxiaTLS(certs.server_cert, certs.server_key, certs.ca, client_auth=True)
    server = OxiaDataServer(tmp_path / "mtls", 7, tls, None)
    server.start()
    try:
        base = f"oxia://{server.public}/default?tls=true&ca={certs.ca}&timeout=2"
        with pytest.raises(AuthFailed) as refused:
            await open_store(base)
        assert "requires a client certificate" in one_line(refused.value)
        with pytest.raises(StoreUnavailable) as reached:
            await open_store(f"{base}&cert={certs.client_cert}&key={certs.client_key}")
        assert "not initialized" in one_line(reached.value)
    finally:
        server.cleanup()
