"""Store URLs are parsed strictly, before anything is contacted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metashift import InvalidStoreURL
from metashift.stores import parse_url


def test_several_hosts_chroot_and_credentials() -> None:
    url = parse_url("zk://alice:s3cr%40t@h1:2181,h2:2182,h3/pulsar/prod?session_timeout=20")
    assert url.scheme == "zk"
    assert url.hosts == (("h1", 2181), ("h2", 2182), ("h3", 2181))
    assert url.root == "/pulsar/prod"
    assert (url.username, url.password) == ("alice", "s3cr@t")
    assert url.session_timeout == 20.0
    assert "s3cr" not in str(url) and "***" in str(url)


def test_etcd_defaults() -> None:
    url = parse_url("etcd://10.0.0.1,10.0.0.2:23790")
    assert url.hosts == (("10.0.0.1", 2379), ("10.0.0.2", 23790))
    assert url.root == "/" and not url.tls


@pytest.mark.parametrize(
    "bad",
    [
        "", "localhost:2181", "mysql://h:1", "zk://", "zk://h:notaport", "zk://h:70000", "zk://h:2181,",
        "zk://h/a//b", "zk://:pw@h", "zk://h?bogus=1", "etcd://h?timeout=-1", "etcd://h?tls=maybe",
        "zk://h?multi_read=maybe", "etcd://h?multi_read=false", "zk://h?sync_reads=maybe", "oxia://h?sync_reads=true",
        "etcd://h?cert=/x.pem", "etcd://h?ca=/definitely/not/here.pem",
    ],
)
def test_bad_urls_are_rejected_with_a_clear_error(bad: str) -> None:
    with pytest.raises(InvalidStoreURL):
        parse_url(bad)


def test_zookeeper_reads_follow_a_sync_by_default_only_on_an_ensemble() -> None:
    assert parse_url("zk://a,b,c").sync_reads and not parse_url("zk://a").sync_reads
    assert parse_url("zk://a?sync_reads=true").sync_reads and not parse_url("zk://a,b?sync_reads=false").sync_reads


def test_password_never_in_the_error() -> None:
    with pytest.raises(InvalidStoreURL) as err:
        parse_url("zk://bob:hunter2@h:bad")
    assert "hunter2" not in str(err.value)


def test_oxia_namespace_prefix_and_token(tmp_path: Any) -> None:
    url = parse_url("oxia://h1:6648,h2/pulsar/t1/x?token=s3cr%26t&session_timeout=20")
    assert url.scheme == "oxia" and url.hosts == (("h1", 6648), ("h2", 6648))
    assert (url.namespace, url.root) == ("pulsar", "/t1/x")
    assert url.token() == "s3cr&t" and url.session_timeout == 20.0
    assert "s3cr" not in str(url) and "s3cr" not in repr(url) and "token=***" in str(url)
    assert parse_url(url.unredacted()).token() == "s3cr&t"  # handed whole to a child process
    assert "token" not in url.public()
    plain = parse_url("oxia://localhost")  # Pulsar's form: the namespace is "default"
    assert (plain.namespace, plain.root, plain.hosts) == ("default", "/", (("localhost", 6648),))
    assert not plain.overlaps(parse_url("oxia://localhost/other"))  # another namespace
    assert plain.overlaps(parse_url("oxia://127.0.0.1:6648/default/below"))
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    assert parse_url(f"oxia://h?token_file={token_file}").token() == "from-a-file"


@pytest.mark.parametrize(
    "bad",
    ["oxia://alice:pw@h", "oxia://h/bad%ns", "oxia://h?token=a&token_file=/etc/hostname", "oxia://h?token=",
     "oxia://h?token_file=/definitely/not/here", "oxia://h?tls=maybe", "oxia://h/default/a//b", "oxia://h:0",
     "oxia://h?sasl=DIGEST-MD5", "oxia://h?cert=/etc/hostname"],
)
def test_bad_oxia_urls(bad: str) -> None:
    with pytest.raises(InvalidStoreURL):
        parse_url(bad)


def test_oxia_token_never_in_the_error() -> None:
    with pytest.raises(InvalidStoreURL) as err:
        parse_url("oxia://h:bad?token=hunter2")
    assert "hunter2" not in str(err.value)


def test_secured_store_urls_as_the_issue_writes_them(tmp_path: Path) -> None:
    """The forms of issue 39, accepted as written, and their meaning."""
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    url = parse_url(f"zk://zk1:2281?tls=true&ca={ca}")
    assert url.tls and url.tls_ca == str(ca) and url.sasl is None
    digest = parse_url("zk://bob:pw@zk1:2281?sasl=DIGEST-MD5")
    assert (digest.sasl, digest.username, digest.password) == ("DIGEST-MD5", "bob", "pw")
    from_file = parse_url(f"zk://zk1:2281?sasl=DIGEST-MD5&username=bob&password_file={password}")
    assert (from_file.username, from_file.password) == ("bob", "s3cret")
    assert "s3cret" not in from_file.redacted() and "s3cret" not in str(from_file)
    assert parse_url(from_file.unredacted()).password == "s3cret"  # handed whole to a child process
    kerberos = parse_url(f"zk://zk1:2281?sasl=GSSAPI&principal=metashift/host@EXAMPLE.COM&keytab={password}")
    assert (kerberos.sasl, kerberos.principal, kerberos.keytab, kerberos.sasl_service) == (
        "GSSAPI", "metashift/host@EXAMPLE.COM", str(password), "zookeeper")
    assert parse_url("zk://zk1?sasl=GSSAPI&service=zk").sasl_service == "zk"
    assert parse_url("zk://u:p@zk1").sasl is None  # digest auth, as before
    assert parse_url("oxia://oxia:6648?tls=true").tls
    etcd = parse_url(f"etcd://h?username=root&password_file={password}&tls=true&ca={ca}")
    assert (etcd.username, etcd.password, etcd.tls) == ("root", "s3cret", True)


@pytest.mark.parametrize(
    ("bad", "said"),
    [("zk://h?sasl=PLAIN", "option sasl must be DIGEST-MD5 or GSSAPI, not 'PLAIN'"),
     ("zk://h?sasl=DIGEST-MD5", "sasl=DIGEST-MD5 needs a user and password"),
     ("zk://h?principal=a@B", "option principal goes with sasl=GSSAPI"),
     ("zk://u:p@h?sasl=GSSAPI", "sasl=GSSAPI authenticates with Kerberos"),
     ("zk://h?sasl=GSSAPI&keytab=/etc/hostname", "option keytab needs principal="),
     ("zk://h?username=bob", "user 'bob' has no password"),
     ("zk://h?username=bob&password_file=/definitely/not/here", "option password_file: no such file"),
     ("zk://h?tls=sometimes", "option tls must be true or false"),
     ("zk://h?cert=/etc/hostname", "options cert and key go together"),
     ("zk://u:p@h?username=v", "the user name is given twice")],
)
def test_bad_secured_urls_say_what_is_wrong_in_one_line(bad: str, said: str) -> None:
    with pytest.raises(InvalidStoreURL) as e:
        parse_url(bad)
    assert said in str(e.value) and "\n" not in str(e.value)
