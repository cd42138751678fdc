"""Store URLs are parsed strictly, before anything is contacted."""

from __future__ import annotations

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
        "zk://h?multi_read=maybe", "etcd://h?multi_read=false",
        "etcd://h?cert=/x.pem", "etcd://h?ca=/definitely/not/here.pem",
    ],
)
def test_bad_urls_are_rejected_with_a_clear_error(bad: str) -> None:
    with pytest.raises(InvalidStoreURL):
        parse_url(bad)


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
     "oxia://h?token_file=/definitely/not/here", "oxia://h?tls=true", "oxia://h/default/a//b", "oxia://h:0"],
)
def test_bad_oxia_urls(bad: str) -> None:
    with pytest.raises(InvalidStoreURL):
        parse_url(bad)


def test_oxia_token_never_in_the_error() -> None:
    with pytest.raises(InvalidStoreURL) as err:
        parse_url("oxia://h:bad?token=hunter2")
    assert "hunter2" not in str(err.value)
