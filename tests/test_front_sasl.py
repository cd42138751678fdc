"""Members of a SASL-secured ZooKeeper behind their agent's front (issue 39): a member whose JVM has
a JAAS ``Client`` section with ``DigestLoginModule`` completes DIGEST-MD5 with the front against
the users of ``zookeeper.sasl_users_file``; a wrong password is told ``AuthFailed`` and nothing it
sends is served; ``zookeeper.require_sasl`` refuses a client without SASL; a users file others
may read stops the agent with one line; the passwords are never in the agent's log; a member of a
Kerberos ensemble drops its SASL client with ``-Dzookeeper.sasl.client=false`` and is served.

ZooKeeper's own Java client (Debian's jars, ``tests/java/FrontSaslProbe.java`` compiled once per
module) runs several clients per JVM; kazoo (on pure-sasl) and a raw client on the project's
codec take the front's answers apart. The agents are ``metashift agent`` processes in front of
the session's Debian ZooKeeper (below a chroot of this module's)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, KazooException
from kazoo.protocol.states import KeeperState
from puresasl.client import SASLClient

from metashift import processes
from metashift.agent.zookeeper.sasl_digest import DigestMD5Server, SaslFailed, parse
from metashift.agent.zookeeper.sasl_users import UsersFileError, read_users
from metashift.stores.zookeeper.wire import ACL, Err, Op, Writer
from metashift_lab.agents import AgentProcess, start_agents, stop_agents
from metashift_lab.cli_runner import run_cli_sync
from metashift_lab.ports import free_port
from metashift_lab.secured.kdc import LocalKDC
from metashift_lab.servers import LocalZooKeeper
from metashift_lab.zkraw import RawZk
from tests.harness import require_part

PASSWORD = "Front-Sasl-s3cret"
WRONG = "Not-The-Pw-0451"
OTHER = "alice-pw:with:colons"
JARS = ("zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-simple")
PROBE_SOURCE = Path(__file__).parent / "java" / "FrontSaslProbe.java"
#: A bound that turns a hung JVM into a failure, never a timing.
RUN_LIMIT = 120.0

JAAS_DIGEST = f"""
Client {{ org.apache.zookeeper.server.auth.DigestLoginModule required username="bob" password="{PASSWORD}"; }};
Wrong {{ org.apache.zookeeper.server.auth.DigestLoginModule required username="bob" password="{WRONG}"; }};
Alice {{ org.apache.zookeeper.server.auth.DigestLoginModule required username="alice" password="{OTHER}"; }};
"""
#: A broker's JAAS file on a Kerberos ensemble (the keytab and principal: the module's KDC's).
JAAS_KERBEROS = """
Client {
  com.sun.security.auth.module.Krb5LoginModule required
  useKeyTab=true keyTab="/nonexistent/broker.keytab" storeKey=true useTicketCache=false
  principal="pulsar/broker1.example.com@EXAMPLE.COM";
};
"""


# ---- the agents -----------------------------------------------------------------------------------


@dataclass
class SaslAgent(AgentProcess):
    """An agent process whose ZooKeeper front has SASL settings."""

    sasl_users_file: Path | None = None
    require_sasl: bool = False

    def config_text(self) -> str:
        text = super().config_text()
        head = f'[zookeeper]\nlisten = "{self.zk_listen}"\n'
        assert head in text, text
        extra = f'sasl_users_file = "{self.sasl_users_file}"\n' if self.sasl_users_file else ""
        extra += f"require_sasl = {str(self.require_sasl).lower()}\n"
        return text.replace(head, head + extra)

    @property
    def front(self) -> str:
        assert self.zk_listen is not None
        return self.zk_listen


@dataclass
class Secured:
    """This module's agents: ``open`` (SASL offered) and ``strict`` (SASL required), one chroot."""

    open: SaslAgent
    strict: SaslAgent
    zk: LocalZooKeeper
    chroot: str
    work: Path

    def store(self) -> KazooClient:
        """A client of the ZooKeeper behind the agents (the chroot's), to see what was written."""
        k = KazooClient(hosts=f"{self.zk.hosts}{self.chroot}", timeout=10)
        k.start(timeout=15)
        return k

    def logs(self) -> str:
        return self.open.log_path.read_text() + self.strict.log_path.read_text()


def users_file(directory: Path, mode: int = 0o600) -> Path:
    path = directory / "zk-sasl-users"
    path.write_text(f"# the front's DIGEST-MD5 users\nbob:{PASSWORD}\n\nalice:{OTHER}\n")
    path.chmod(mode)
    return path


@pytest.fixture(scope="module")
async def secured(zk_server: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    work = tmp_path_factory.mktemp("front-sasl")
    chroot = f"/front-sasl-{uuid.uuid4().hex[:8]}"
    users = users_file(work)
    (work / "agents").mkdir()

    def agent(node_id: str, require_sasl: bool) -> SaslAgent:
        return SaslAgent(node_id, "broker", work / "agents", zk_server.url + chroot, hold_timeout=30.0,
                         prepare_timeout=30.0, zk_listen=f"127.0.0.1:{free_port()}", coordinator_enabled=False,
                         sasl_users_file=users, require_sasl=require_sasl)

    offered, required = agent("broker-1", False), agent("broker-2", True)
    made: list[AgentProcess] = [offered, required]
    try:
        await start_agents(made)
        yield Secured(offered, required, zk_server, chroot, work)
    finally:
        await stop_agents(made)


# ---- ZooKeeper's Java client ------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """``FrontSaslProbe`` compiled, and how to run it."""

    classpath: str

    async def run(self, jvm_options: list[str], *clients: str) -> list[list[str]]:
        """Run one JVM with ``jvm_options``, a client per ``HOSTS|SECTION|STEPS`` spec: each
        client's output lines."""
        command = ["java", "-XX:TieredStopAtLevel=1", *jvm_options, "-cp", self.classpath, "FrontSaslProbe",
                   *clients]
        proc = await processes.start_async(command, stdin=asyncio.subprocess.DEVNULL,
                                           stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), RUN_LIMIT)
        except TimeoutError:
            await processes.kill_async(proc)
            pytest.fail(f"the Java client did not end within {RUN_LIMIT}s")
        lines = out.decode().splitlines()
        assert proc.returncode == 0 and lines[-1:] == ["DONE"], (out.decode(), err.decode()[-4000:])
        blocks: list[list[str]] = []
        for line in lines[:-1]:
            if line.startswith("CLIENT "):
                blocks.append([])
            else:
                blocks[-1].append(line)
        assert len(blocks) == len(clients), lines
        return blocks


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    if shutil.which("java") is None or shutil.which("javac") is None:
        require_part("no `java`/`javac` on this machine (`make setup` installs default-jdk-headless)")
    jars = [Path("/usr/share/java") / f"{name}.jar" for name in JARS]
    missing = [str(j) for j in jars if not j.exists()]
    assert not missing, f"jars missing (make setup installs zookeeper and libslf4j-java): {missing}"
    out = tmp_path_factory.mktemp("front-sasl-probe")
    classpath = ":".join(str(j) for j in jars)
    done = processes.run(["javac", "-d", str(out), "-cp", classpath, str(PROBE_SOURCE)], timeout=RUN_LIMIT)
    assert done.returncode == 0, done.stderr
    return Probe(f"{out}:{classpath}")


@pytest.fixture(scope="module")
async def digest_run(secured: Secured, probe: Probe) -> list[list[str]]:
    """One JVM whose JAAS file has a DIGEST-MD5 ``Client`` section (as a broker of a SASL ensemble
    has), and two more sections: bob with the right password, bob with a wrong one, alice; against
    the open front, then the strict one, and clients without SASL."""
    jaas = secured.work / "jaas-digest.conf"
    jaas.write_text(JAAS_DIGEST)
    o, s = secured.open.front, secured.strict.front
    return await probe.run(
        [f"-Djava.security.auth.login.config={jaas}"],
        f"{o}|Client|create /made v1;get /made;ephemeral /eph e1;createacl /acl a1 sasl:bob;get /acl;whoami",
        f"{o}|Wrong|create /wrong w1;get /made",
        f"{o}|nosasl|get /made;create /plain p1",
        f"{s}|Client|create /strict s1;get /strict",
        f"{s}|nosasl|create /refused r1",
        f"{s}|Alice|whoami",
    )


def test_a_digest_md5_member_is_served(digest_run: list[list[str]], secured: Secured) -> None:
    bob = digest_run[0]
    assert bob[:3] == ["EVENT SyncConnected", "EVENT SaslAuthenticated", "CONNECTED"], bob
    assert bob[3:9] == [
        "OK create /made v1 /made",
        "OK get /made v1",
        "OK ephemeral /eph e1 owner=true",
        # ACLs are not enforced by the front: a sasl:bob ACL is taken (the node gets the store's)
        "OK createacl /acl a1 sasl:bob /acl",
        "OK get /acl a1",
        "OK whoami ip:127.0.0.1,sasl:bob",  # ZooKeeper's identity for it: scheme sasl, the user name
    ], bob
    k = secured.store()
    try:
        assert k.get("/made")[0] == b"v1" and k.get("/acl")[0] == b"a1"
        assert k.exists("/eph") is None  # the member's session ended: its ephemeral with it
    finally:
        k.stop()
        k.close()


def test_a_wrong_password_is_told_auth_failed_and_nothing_is_served(digest_run: list[list[str]],
                                                                    secured: Secured) -> None:
    wrong = digest_run[1]
    assert wrong[:3] == ["EVENT SyncConnected", "EVENT AuthFailed", "AUTHFAILED"], wrong
    assert wrong[3:5] == ["ERR create /wrong w1 AUTHFAILED", "ERR get /made AUTHFAILED"], wrong
    k = secured.store()
    try:
        assert k.exists("/wrong") is None
    finally:
        k.stop()
        k.close()
    assert "SASL failed: user 'bob': wrong password; closing" in secured.open.log_path.read_text()


def test_without_require_sasl_a_client_without_sasl_is_served(digest_run: list[list[str]]) -> None:
    assert digest_run[2] == ["EVENT SyncConnected", "CONNECTED", "OK get /made v1", "OK create /plain p1 /plain",
                             "EVENT Closed"]


def test_require_sasl_serves_sasl_clients_and_refuses_the_others(digest_run: list[list[str]],
                                                                 secured: Secured) -> None:
    assert digest_run[3][2:5] == ["CONNECTED", "OK create /strict s1 /strict", "OK get /strict s1"], digest_run[3]
    refused = digest_run[4]
    assert "ERR create /refused r1 SESSIONCLOSEDREQUIRESASLAUTH" in refused, refused
    assert digest_run[5][2:4] == ["CONNECTED", "OK whoami ip:127.0.0.1,sasl:alice"], digest_run[5]
    k = secured.store()
    try:
        assert k.exists("/refused") is None and k.get("/strict")[0] == b"s1"
    finally:
        k.stop()
        k.close()
    refusal = "before SASL, which this front requires (zookeeper.require_sasl); closing"
    assert refusal in secured.strict.log_path.read_text()


def test_no_password_in_the_agents_logs(digest_run: list[list[str]], secured: Secured) -> None:
    logs = secured.logs()
    assert "authenticated user 'bob'" in logs and "authenticated user 'alice'" in logs
    for secret in (PASSWORD, WRONG, OTHER, "with:colons"):
        assert secret not in logs


@pytest.fixture(scope="module")
def kerberos_jaas(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The JVM options of a broker of a Kerberos ensemble: a real MIT KDC of this module's, the
    broker's principal and keytab in a JAAS ``Client`` section (Krb5LoginModule), and the
    ensemble's service principal ``zookeeper/localhost`` (the name ZooKeeper's client asks a
    ticket for when it dials 127.0.0.1)."""
    if shutil.which("krb5kdc") is None and not os.access("/usr/sbin/krb5kdc", os.X_OK):
        require_part("an MIT KDC (Debian's krb5-kdc, krb5-admin-server: make setup)")
    kdc = LocalKDC(tmp_path_factory.mktemp("front-sasl-kdc"))
    keytab = kdc.add_principal("pulsar/localhost")
    kdc.add_service("zookeeper", "localhost")
    jaas = secured.work / "jaas-kerberos.conf"
    jaas.write_text(JAAS_KERBEROS.replace("/nonexistent/broker.keytab", str(keytab))
                    .replace("pulsar/broker1.example.com@EXAMPLE.COM", kdc.principal("pulsar/localhost")))
    try:
        kdc.start()
        yield [*kdc.java_options(), f"-Djava.security.auth.login.config={jaas}"]
    finally:
        kdc.cleanup()


async def test_a_kerberos_member_with_its_sasl_client_off_is_served(secured: Secured, probe: Probe,
                                                                   kerberos_jaas: list[str]) -> None:
    """The one-line change for a member of a Kerberos ensemble: ``-Dzookeeper.sasl.client=false``
    in its JVM options, its JAAS ``Client`` section (Krb5LoginModule) left where it is. The twin
    client turns SASL back on for itself: it logs in to the KDC and sends its Kerberos token,
    which the front (DIGEST-MD5 only) refuses: AuthFailed, and ZooKeeper's client stops."""
    o = secured.open.front
    seen = len(secured.open.log_path.read_text())
    flagged, twin = await probe.run(
        [*kerberos_jaas, "-Dzookeeper.sasl.client=false"],
        f"{o}|default|create /kerberos k1;get /kerberos;whoami",
        f"{o}|sasl-on|get /kerberos",
    )
    assert flagged == ["EVENT SyncConnected", "CONNECTED", "OK create /kerberos k1 /kerberos",
                       "OK get /kerberos k1", "OK whoami ip:127.0.0.1", "EVENT Closed"], flagged
    assert twin[:4] == ["EVENT SyncConnected", "EVENT AuthFailed", "AUTHFAILED", "ERR get /kerberos AUTHFAILED"], twin
    log = secured.open.log_path.read_text()[seen:]  # the twin's token, refused
    assert "not DIGEST-MD5 (GSSAPI?)" in log and "-Dzookeeper.sasl.client=false in the member's JVM options" in log


async def test_a_strict_front_refuses_the_kerberos_member_with_its_sasl_client_off(
        secured: Secured, probe: Probe, kerberos_jaas: list[str]) -> None:
    """With ``require_sasl`` a member must authenticate to the front: DIGEST-MD5 then, not the flag."""
    (refused,) = await probe.run([*kerberos_jaas, "-Dzookeeper.sasl.client=false"],
                                 f"{secured.strict.front}|default|create /krb-refused k1")
    assert "ERR create /krb-refused k1 SESSIONCLOSEDREQUIRESASLAUTH" in refused, refused


# ---- kazoo (pure-sasl's client) and the front's answers on the wire -------------------------------------


def _kazoo(front: str, password: str) -> KazooClient:
    return KazooClient(hosts=front, timeout=10, connection_retry={"max_tries": 0},
                       sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": password})


async def test_kazoo_on_pure_sasl_completes_digest_md5(secured: Secured) -> None:
    def work() -> bytes:
        k = _kazoo(secured.strict.front, PASSWORD)
        k.start(timeout=15)
        try:
            k.create("/kazoo", b"z1")
            return bytes(k.get("/kazoo")[0])
        finally:
            k.stop()
            k.close()

    assert await asyncio.to_thread(work) == b"z1"


async def test_kazoo_with_a_wrong_password_fails(secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    def work() -> None:
        k = _kazoo(secured.open.front, WRONG)
        try:
            with contextlib.suppress(AuthFailedError):  # kazoo raises it or only says so, per version
                k.start(timeout=10)
            # kazoo says CONNECTED on the ConnectResponse, AUTH_FAILED when SASL fails, then stops
            for _ in range(100):
                if k.client_state not in (KeeperState.CONNECTED, KeeperState.CONNECTING):
                    break
                time.sleep(0.1)
            assert k.client_state in (KeeperState.AUTH_FAILED, KeeperState.CLOSED), k.client_state
            with pytest.raises(KazooException):
                k.create("/kazoo-wrong", b"w")
        finally:
            k.stop()
            k.close()

    await asyncio.to_thread(work)
    assert "AUTH_FAILED closing" in caplog.text
    k = secured.store()
    try:
        assert k.exists("/kazoo-wrong") is None
    finally:
        k.stop()
        k.close()


def _host_port(front: str) -> tuple[str, int]:
    host, _, port = front.rpartition(":")
    return host, int(port)


async def test_the_front_answers_a_failure_with_a_null_token_and_closes(secured: Secured) -> None:
    """What the Java client needs to read AuthFailed: the error, a null token, then the close."""
    zk = await RawZk.connect(*_host_port(secured.open.front))
    try:
        challenge = await zk.ok(Op.SASL, Writer().buffer(b"").bytes(), "the challenge")
        assert b'realm="zk-sasl-md5"' in (challenge.body.buffer() or b"")
        reply = await zk.call(Op.SASL, Writer().buffer(b'username="bob",response=00').bytes())
        assert reply.err == Err.AUTHFAILED and reply.body.buffer() is None
        await asyncio.wait_for(zk._task, 20)  # type: ignore[arg-type]  # the front closed the connection
    finally:
        await zk.close_connection()


async def test_a_gssapi_token_is_refused_with_the_members_fix_in_the_log(secured: Secured) -> None:
    zk = await RawZk.connect(*_host_port(secured.open.front))
    try:
        # a Kerberos AP-REQ starts with an ASN.1 application tag; DIGEST-MD5's client sends no first token
        ap_req = b"\x60\x82\x02\x10\x06\x09*\x86H\x86\xf7\x12\x01\x02\x02"
        reply = await zk.call(Op.SASL, Writer().buffer(ap_req).bytes())
        assert reply.err == Err.AUTHFAILED
    finally:
        await zk.close_connection()
    assert "not DIGEST-MD5 (GSSAPI?)" in secured.open.log_path.read_text()
    assert "-Dzookeeper.sasl.client=false in the member's JVM options" in secured.open.log_path.read_text()


async def test_pure_sasl_on_the_wire_and_creates_with_a_sasl_acl(secured: Secured) -> None:
    """DIGEST-MD5 on a raw connection with pure-sasl's client (which checks the front's rspauth),
    then creates naming a ``sasl:bob`` ACL on both of the front's paths: a create passed through
    to ZooKeeper, a container (the ordinary path). ACLs are not enforced by the front: both are
    taken, and getACL answers the store's."""
    client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username="bob",
                        password=PASSWORD)
    zk = await RawZk.connect(*_host_port(secured.strict.front))
    try:
        challenge = (await zk.ok(Op.SASL, Writer().buffer(b"").bytes(), "challenge")).body.buffer()
        response = client.process(challenge)
        rspauth = (await zk.ok(Op.SASL, Writer().buffer(response).bytes(), "response")).body.buffer()
        assert client.process(rspauth) is None and client.complete
        who = (await zk.ok(Op.WHO_AM_I, b"", "whoAmI")).body
        assert [(who.string(), who.string()) for _ in range(who.int())] == [("ip", "127.0.0.1"), ("sasl", "bob")]
        acl = [ACL(31, "sasl", "bob")]
        for op, path in ((Op.CREATE, "/acl-passed"), (Op.CREATE_CONTAINER, "/acl-container")):
            flags = 4 if op == Op.CREATE_CONTAINER else 0
            await zk.ok(op, Writer().string(path).buffer(b"x").acls(acl).int(flags).bytes(), path)
        got = (await zk.ok(Op.GET_ACL, Writer().string("/acl-container").bytes(), "getACL")).body
        assert got.acls() == [ACL(31, "world", "anyone")]  # the ordinary path keeps none
    finally:
        await zk.close()


async def test_a_strict_front_refuses_a_request_before_sasl(secured: Secured) -> None:
    zk = await RawZk.connect(*_host_port(secured.strict.front))
    try:
        reply = await zk.call(Op.GET_DATA, Writer().string("/").bool(False).bytes())
        assert reply.err == Err.SESSIONCLOSEDREQUIRESASLAUTH
        await asyncio.wait_for(zk._task, 20)  # type: ignore[arg-type]
    finally:
        await zk.close_connection()


# ---- the settings -------------------------------------------------------------------------------------


def _agent_check(tmp_path: Path, zookeeper: str) -> tuple[int, list[str]]:
    config = tmp_path / "agent.toml"
    config.write_text(f'[source]\nurl = "zk://127.0.0.1:1"\n[coordinator]\nenabled = false\n[zookeeper]\n'
                      f'listen = "127.0.0.1:0"\n{zookeeper}')
    done = run_cli_sync("agent", "--config", str(config), "--check-config", timeout=60)
    return done.returncode, done.stderr.splitlines() + done.stdout.splitlines()


def test_a_users_file_others_may_read_stops_the_agent_with_one_line(tmp_path: Path) -> None:
    path = users_file(tmp_path, 0o644)
    code, lines = _agent_check(tmp_path, f'sasl_users_file = "{path}"\n')
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == (f"metashift: error: config key zookeeper.sasl_users_file: '{path}' has mode 0644: group or "
                        "others may read it; it holds passwords: chmod 600 it (or 400)")
    path.chmod(0o640)
    code, lines = _agent_check(tmp_path, f'sasl_users_file = "{path}"\n')
    assert code == 2 and "mode 0640" in lines[0] and PASSWORD not in "".join(lines)
    path.chmod(0o400)
    code, lines = _agent_check(tmp_path, f'sasl_users_file = "{path}"\nrequire_sasl = true\n')
    assert code == 0 and "(SASL DIGEST-MD5: 2 user(s), required)" in "\n".join(lines), lines
    assert PASSWORD not in "\n".join(lines)


def test_require_sasl_without_users_is_refused(tmp_path: Path) -> None:
    code, lines = _agent_check(tmp_path, "require_sasl = true\n")
    assert code == 2 and lines == ["metashift: error: config key zookeeper.require_sasl: is true but no "
                                   "zookeeper.sasl_users_file names a user"], lines


def test_the_users_file_is_read_strictly(tmp_path: Path) -> None:
    path = tmp_path / "users"
    for text, error in [
        ("bob\n", "line 1: not user:password"),
        (f"bob:{PASSWORD}\nbob:x\n", "line 2: user 'bob' named twice"),
        ("# nobody\n\n", "names no user"),
        (" bob:x\n", "line 1: not user:password"),
        ("bob:\n", "line 1: not user:password"),
    ]:
        path.write_text(text)
        path.chmod(0o600)
        with pytest.raises(UsersFileError) as raised:
            read_users(path)
        assert error in str(raised.value) and PASSWORD not in str(raised.value)
    path.write_text("bob:a:b:c\r\nal ice:x\n")
    assert read_users(path) == {"bob": "a:b:c", "al ice": "x"}
    with pytest.raises(UsersFileError, match="cannot read"):
        read_users(tmp_path / "none")


# ---- the mechanism, against pure-sasl's client ------------------------------------------------------------


def _exchange(server: DigestMD5Server, username: str, password: str) -> SASLClient:
    client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username=username,
                        password=password)
    rspauth = server.evaluate(client.process(server.evaluate(b"")))
    assert client.process(rspauth) is None and client.complete  # pure-sasl checked the server's proof
    return client


def test_digest_md5_against_pure_sasl() -> None:
    server = DigestMD5Server({"bob": PASSWORD})
    _exchange(server, "bob", PASSWORD)
    assert server.complete and server.user == "bob"
    with pytest.raises(SaslFailed, match="after the exchange ended"):
        server.evaluate(b"")
    server = DigestMD5Server({"bob": PASSWORD})
    with pytest.raises(SaslFailed, match="user 'bob': wrong password"):
        _exchange(server, "bob", WRONG)
    assert not server.complete
    with pytest.raises(SaslFailed, match="user 'eve': no such user"):
        _exchange(DigestMD5Server({"bob": PASSWORD}), "eve", PASSWORD)


def test_digest_md5_refuses_what_it_did_not_offer() -> None:
    def response(**change: str) -> tuple[DigestMD5Server, bytes]:
        server = DigestMD5Server({"bob": PASSWORD})
        client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username="bob",
                            password=PASSWORD)
        fields = parse(client.process(server.evaluate(b"")))
        fields.update({k.replace("_", "-"): v.encode() for k, v in change.items()})
        return server, b",".join(k.encode() + b'="' + v + b'"' for k, v in fields.items())

    for change, error in [
        ({"nonce": "replayed"}, "nonce is not the one offered"),
        ({"nc": "00000002"}, "nonce count"),
        ({"qop": "auth-conf"}, "only auth is offered"),
        ({"digest_uri": "zookeeper/other-host"}, "digest-uri"),
        ({"realm": "ELSEWHERE"}, "realm 'ELSEWHERE'"),
        ({"authzid": "super"}, "asked to act as 'super'"),
        ({"charset": "latin-2"}, "charset must be utf-8"),
    ]:
        server, token = response(**change)
        with pytest.raises(SaslFailed, match=error):
            server.evaluate(token)
    server, token = response()
    assert server.evaluate(token).startswith(b"rspauth=")
    with pytest.raises(SaslFailed, match="names nonce twice"):
        parse(b'nonce="a",nonce="b"')
    with pytest.raises(SaslFailed, match="GSSAPI"):
        DigestMD5Server({}).evaluate(b"\x60\x82")
