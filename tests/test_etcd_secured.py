"""The etcd store on an etcd with TLS and ``auth enable``, as a user whose role grants only the
cluster's prefix (``metashift_lab.secured.etcd``): every operation a migration makes, the session
handed over, a token that expires while the store runs (etcd started with a 2 s
``--auth-token-ttl``: every test here outlives its tokens), wrong credentials and a user without
permission (one line, no secret, nothing written), and ``metashift copy`` + ``verify`` between a
plain ZooKeeper and the secured etcd, both ways."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aetcd import rpc

from metashift import AuthFailed, Notification, NotificationType
from metashift.stores import Restore, open_store
from metashift_lab.sample_tree import generate
from metashift_lab.secured.etcd import SecuredEtcd
from metashift_lab.servers import EtcdTLS
from tests.certs import make_certificates
from tests.copy_support import snapshot

#: etcd's simple tokens here live 2 s after their last use (etcd's default is 300 s).
TOKEN_TTL = 2


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredEtcd]:
    directory = tmp_path_factory.mktemp("secured-etcd")
    certs = make_certificates(directory / "certs")
    server = SecuredEtcd(
        EtcdTLS(certs.server_cert, certs.server_key, certs.ca), directory, "/pulsar", auth_token_ttl=TOKEN_TTL
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def every_key(secured: SecuredEtcd) -> list[tuple[str, str, int]]:
    """Every key, value (base64) and revision in the server, read as root: what must not change
    when a call is refused."""
    answer = json.loads(secured.etcdctl("get", "", "--from-key", "-w", "json"))
    return [(kv["key"], kv.get("value", ""), kv["mod_revision"]) for kv in answer.get("kvs", [])]


def secrets_of(secured: SecuredEtcd) -> list[str]:
    return [secured.root.password, secured.user.password]


def assert_no_secret(text: str, secured: SecuredEtcd, *more: str) -> None:
    for secret in (*secrets_of(secured), *more):
        assert secret not in text


async def idle_past_token() -> None:
    """Idle past the token's life (the store's session keep-alive does not renew a token)."""
    await asyncio.sleep(TOKEN_TTL + 1.5)


async def test_every_operation_at_the_prefix_itself(secured: SecuredEtcd, caplog: pytest.LogCaptureFixture) -> None:
    """At the URL's prefix exactly (``/pulsar``, the role's): single operations, batches, the
    root node and top-level sequential nodes (the key ``/pulsar`` itself), ephemerals on the
    lease, watches of the root (the key and ``/pulsar/`` apart) and of a subtree, and the
    copy's bulk reads and writes. Nothing is refused, nothing is said of a refusal."""
    caplog.set_level(logging.INFO)
    url = secured.url()
    async with await open_store(url) as store, await open_store(url) as other:
        heard: asyncio.Queue[Notification] = asyncio.Queue()
        store.add_listener(heard.put_nowait)  # the root: two watches, both inside the grant
        scoped: asyncio.Queue[Notification] = asyncio.Queue()
        store.add_listener(scoped.put_nowait, under="/admin")
        await store.watch_ready()

        stat = await store.put("/admin", b"{}", expected_version=-1)
        assert stat.version == 0
        await store.put("/admin/clusters", b"c", expected_version=-1)
        assert (await store.put("/admin/clusters", b"c2", expected_version=0)).version == 1
        got = await other.get("/admin/clusters")
        assert got is not None and got[0] == b"c2" and got[1].version == 1
        assert await other.get_children("/admin") == ["clusters"]
        # the root node and its counter are the key /pulsar: inside the grant
        top = await other.put("/top-", b"t", sequential=True)
        nested = await other.put("/admin/seq-", b"s", sequential=True)
        assert top.path.startswith("/top-") and nested.path.startswith("/admin/seq-")
        assert await other.get("/") is not None
        assert set(await other.get_children("/")) >= {"admin", top.path[1:]}
        # a batch: concurrent calls share txns
        await asyncio.gather(*(other.put(f"/admin/batch-{i}", b"%d" % i, expected_version=-1) for i in range(40)))
        values = await asyncio.gather(*(other.get(f"/admin/batch-{i}") for i in range(40)))
        assert [v[0] for v in values if v is not None] == [b"%d" % i for i in range(40)]
        # an ephemeral on the session lease, and what etcd tells of that lease
        eph = await store.put("/admin/brokers-eph", b"me", ephemeral=True)
        assert eph.ephemeral and eph.owner
        lives = await other.session_lives({eph.owner: ["/admin/brokers-eph"]})
        assert lives[eph.owner].alive and lives[eph.owner].timeout
        await other.delete("/admin/batch-0")
        assert await store.get("/admin/batch-0") is None

        # the watches heard the writes of the other store, at the root and in the subtree
        async def heard_all(queue: asyncio.Queue[Notification], wanted: set[tuple[NotificationType, str]]) -> None:
            seen: set[tuple[NotificationType, str]] = set()
            while not wanted <= seen:
                try:
                    n = await asyncio.wait_for(queue.get(), 10)
                except TimeoutError:
                    pytest.fail(f"not heard: {wanted - seen} (heard {seen})")
                seen.add((n.type, n.path))

        # the root node's key /pulsar, new with the first top-level sequential node: its own watch
        await heard_all(heard, {(NotificationType.CREATED, top.path), (NotificationType.CREATED, nested.path),
                                (NotificationType.DELETED, "/admin/batch-0"), (NotificationType.CREATED, "/")})
        await heard_all(scoped, {(NotificationType.CREATED, nested.path), (NotificationType.DELETED, "/admin/batch-0")})

        # the copy's bulk work: restores, version chains, counters, tree reads, its history
        await store.restore_many([Restore(f"/managed-ledgers/n-{i:03d}", b"v%d" % i, i % 5) for i in range(300)])
        await store.restore("/counters/c", b"", 0)
        await store.advance_sequence_counter("/counters/c", 25)
        assert (await store.children_version("/counters/c") or 0) >= 25
        read = {n.path: n for page in [p async for p in other.read_trees(["/managed-ledgers"])] for n in page}
        assert all(read[f"/managed-ledgers/n-{i:03d}"].version == i % 5 for i in range(300))
        walked = {n.path for page in [p async for p in other.walk("/")] for n in page}
        assert {"/admin/clusters", "/counters/c", "/managed-ledgers/n-299"} <= walked
        assert await other.position_of("/counters/c")
        assert await other.history_bytes()
        await other.compact_history(wait=True)  # etcd 3.4 lets any authenticated user compact
    refusals = [r.getMessage() for r in caplog.records if "denied" in r.getMessage() or "refuse" in r.getMessage()]
    assert refusals == []
    assert_no_secret(caplog.text, secured)


async def test_the_session_is_handed_over(secured: SecuredEtcd, namespace: str) -> None:
    """A detached store's lease is taken over by the next one (``resume``) as the prefix's user:
    its ephemeral lives on, as its own; closing the successor revokes it."""
    url = secured.url(prefix=f"/pulsar{namespace}")
    first = await open_store(url)
    await first.put("/reg", b"member", ephemeral=True)
    handle = first.session_handle()
    assert handle is not None
    await first.detach()
    await idle_past_token()  # the successor authenticates anew; the lease does not care
    second = await open_store(url, resume=handle)
    try:
        assert second.resumed
        got = await second.get("/reg")
        assert got is not None and got[1].owner == handle.id and got[1].created_by_self
    finally:
        await second.close()
    async with await open_store(url) as check:
        assert await check.get("/reg") is None  # revoked at close, not left to expire


async def test_a_token_expiring_mid_run(
    secured: SecuredEtcd, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each call after the token expired is refused by etcd (``invalid auth token``) and sent
    again under a new one: reads, writes, a watch opened after it, the lease's revocation at
    close; the calls in flight together get one new token."""
    caplog.set_level(logging.INFO, logger="metashift.stores.etcd")
    url = secured.url(prefix=f"/pulsar{namespace}")
    store = await open_store(url)
    try:
        await store.put("/a", b"1", expected_version=-1)
        await store.put("/mine", b"eph", ephemeral=True)
        await idle_past_token()
        caplog.clear()
        got, _ = await asyncio.gather(asyncio.gather(*(store.get("/a") for _ in range(20))), store.put("/b", b"2"))
        assert all(g is not None and g[0] == b"1" for g in got)
        renewed = [r for r in caplog.records if "authenticating again" in r.getMessage()]
        assert 1 <= len(renewed) <= 2, [r.getMessage() for r in renewed]  # not one per call
        await idle_past_token()
        heard: asyncio.Queue[Notification] = asyncio.Queue()
        store.add_listener(heard.put_nowait, under="/w")  # its watch is first refused for the token
        await store.watch_ready()
        async with await open_store(url) as writer:
            await writer.put("/w", b"x", expected_version=-1)
            note = await asyncio.wait_for(heard.get(), 15)
            assert (note.type, note.path) == (NotificationType.CREATED, "/w")
            await idle_past_token()
            await writer.put("/w", b"y")  # a watch stream open before its token expired goes on
            note = await asyncio.wait_for(heard.get(), 15)
            assert (note.type, note.path) == (NotificationType.MODIFIED, "/w")
            await idle_past_token()
            await store.close()  # revokes the lease under a new token
            assert await writer.get("/mine") is None
    finally:
        await store.close()
    assert_no_secret(caplog.text, secured)


async def test_a_wrong_password_is_one_line(
    secured: SecuredEtcd, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    before = every_key(secured)
    url = secured.url(password_file=str(wrong)).replace(f"&password_file={secured.user.password_file}", "")
    with pytest.raises(AuthFailed) as err:
        store = await open_store(url)
        await store.put("/intruded", b"x")  # never reached
    message = str(err.value)
    assert "\n" not in message and "'metashift'" in message and "/pulsar" in message, message
    assert "authentication failed" in message
    assert_no_secret(message + caplog.text, secured, "not-the-password")
    assert every_key(secured) == before


async def test_a_user_without_permission_on_the_prefix(secured: SecuredEtcd, caplog: pytest.LogCaptureFixture) -> None:
    """A user granted only another prefix cannot open the cluster's: one line naming the user and
    the prefix, nothing written; a store under the prefix it was granted works."""
    caplog.set_level(logging.DEBUG)
    intruder = secured.other_user("intruder", "/elsewhere")
    before = every_key(secured)
    with pytest.raises(AuthFailed) as err:
        store = await open_store(secured.url(intruder))
        await store.put("/intruded", b"x")  # never reached
    message = str(err.value)
    assert "\n" not in message, message
    assert "permission denied to user 'intruder' under /pulsar" in message, message
    assert_no_secret(message + caplog.text, secured, intruder.password)
    assert every_key(secured) == before
    async with await open_store(secured.url(intruder, prefix="/elsewhere")) as own:
        await own.put("/mine", b"ok", expected_version=-1)
        assert await own.get("/mine") is not None


async def test_a_read_only_user_writes_nothing(secured: SecuredEtcd, caplog: pytest.LogCaptureFixture) -> None:
    """A role that grants the prefix for reading only: the store opens and reads; a write is
    refused in one line naming the path, the user and the prefix; nothing is written."""
    reader = secured.other_user("reader", permission="read")
    before = every_key(secured)
    async with await open_store(secured.url(reader)) as store:
        await store.get_children("/")
        with pytest.raises(AuthFailed) as err:
            await store.put("/admin/ro-write", b"x")
        message = str(err.value)
        assert "\n" not in message and message.endswith(": /admin/ro-write"), message
        assert "permission denied to user 'reader' under /pulsar" in message, message
        with pytest.raises(AuthFailed):
            await store.put("/admin/ro-eph", b"x", ephemeral=True)
    assert every_key(secured) == before
    assert_no_secret(caplog.text, secured, reader.password)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "metashift.cli", *args], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


async def test_copy_and_verify_between_zookeeper_and_the_secured_etcd(
    secured: SecuredEtcd, zk_url: str, namespace: str
) -> None:
    """``metashift copy --verify`` from a plain ZooKeeper into the secured etcd as the prefix's
    user: exit 0, equal trees, and no password on the way (the way back out of such an etcd, with
    agent processes, is ``test_secured_migration.py``'s)."""
    source_url = zk_url + "-src"
    etcd_url = secured.url(prefix=f"/pulsar{namespace}")
    async with await open_store(source_url) as source:
        await generate(source, 8, seed=11)
        await source.restore("/managed-ledgers/hot", os.urandom(20_000), 40)
        want = {p: v for p, v in (await snapshot(source)).items() if not v[2]}
    # one core: Spark's Python workers still open the stores, in processes of their own
    done = await asyncio.to_thread(cli, "copy", "--verify", "--source", source_url, "--target", etcd_url,
                                   "--spark-master", "local[1]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_no_secret(done.stdout + done.stderr, secured)
    async with await open_store(etcd_url) as copied:
        got = await snapshot(copied)
    for path in ("/managed-ledgers/hot", *list(want)[:50]):
        assert got[path][0] == want[path][0], path


async def test_the_copy_refuses_wrong_credentials_in_one_line(
    secured: SecuredEtcd, zk_url: str, tmp_path: Path
) -> None:
    """``metashift copy`` into the secured etcd with a wrong password, as a user granted another
    prefix, and with no user: exit 2, one line naming the user and the prefix, no secret, nothing
    written (the copy opens both stores before anything else)."""
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-the-password\n")
    intruder = secured.other_user("stranger", "/elsewhere")
    plain = secured.url().split("&username=")[0]
    cases = {
        "refused the credentials of user 'metashift' for /pulsar": f"{plain}&username=metashift&password_file={wrong}",
        "permission denied to user 'stranger' under /pulsar": secured.url(intruder),
        "requires authentication: the URL names no user": plain,
    }
    async with await open_store(zk_url) as source:
        await source.put("/admin", b"{}", expected_version=-1)
    before = every_key(secured)
    for said, url in cases.items():
        done = await asyncio.to_thread(cli, "copy", "--source", zk_url, "--target", url)
        assert done.returncode == 2, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("metashift: error: ") and said in lines[0], done.stderr
        assert_no_secret(done.stdout + done.stderr, secured, "not-the-password", intruder.password)
    assert every_key(secured) == before


async def test_a_call_kept_to_etcds_root_role_is_one_line(secured: SecuredEtcd) -> None:
    """What etcd keeps to its root role (maintenance: here a defragmentation; a compaction on a
    server that keeps it to root) is refused as ``auth: permission denied``: one line saying so,
    not a role to widen."""
    async with await open_store(secured.url(), watch=False) as store:
        conn = store._conn  # type: ignore[attr-defined]
        with pytest.raises(AuthFailed) as err:
            await conn.call(None, lambda md: conn.maintenance.Defragment(rpc.DefragmentRequest(), metadata=md))
    message = str(err.value)
    assert "\n" not in message and "user 'metashift' lacks etcd's root role" in message, message
