"""An agent's ``[source]`` and ``[target]`` security settings (TLS files, SASL, Kerberos, an Oxia
token): the same names as a store URL's options, in the TOML file and in ``METASHIFT_*``; checked
before anything starts; applied over the URL the config or a migration's flag names; never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from metashift.agent import config as agent_config
from metashift.agent.server import Agent

ENV = {"METASHIFT_COORDINATOR_ENABLED": "false"}


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> agent_config.AgentConfig:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return agent_config.load(path, env={**ENV, **(env or {})})


def test_source_security_settings_from_the_file_and_the_environment(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    password = tmp_path / "zk-password"
    password.write_text("s3cret\n")
    config = _load(tmp_path, f"""
[source]
url = "zk://zk1:2281,zk2:2281/pulsar"
tls = true
ca = "{ca}"
sasl = "DIGEST-MD5"
username = "pulsar"
password_file = "{password}"
""")
    url = config.source
    assert (url.tls, url.tls_ca, url.sasl, url.username, url.password) == (True, str(ca), "DIGEST-MD5", "pulsar",
                                                                            "s3cret")
    assert "s3cret" not in url.redacted() and "s3cret" not in agent_config.summary(config)
    kerberos = agent_config.load(env={**ENV, "METASHIFT_SOURCE_URL": "zk://zk1:2281/pulsar",
                                      "METASHIFT_SOURCE_SASL": "GSSAPI",
                                      "METASHIFT_SOURCE_PRINCIPAL": "metashift/broker-1@EXAMPLE.COM",
                                      "METASHIFT_SOURCE_KEYTAB": str(password)})
    assert (kerberos.source.sasl, kerberos.source.principal, kerberos.source.keytab) == (
        "GSSAPI", "metashift/broker-1@EXAMPLE.COM", str(password))


@pytest.mark.parametrize(
    ("text", "said"),
    [('[source]\nurl = "zk://h/p"\nsasl = "PLAIN"\n', "config key source.sasl: option sasl must be DIGEST-MD5 or "
      "GSSAPI, not 'PLAIN'"),
     ('[source]\nurl = "zk://h/p"\nca = "/definitely/not/here"\n', "config key source.ca: option ca: no such file"),
     ('[source]\nurl = "etcd://h/p"\nsasl = "GSSAPI"\n', "config key source.sasl: unknown option 'sasl' for etcd URL"),
     ('[source]\nurl = "zk://h/p"\ntls = "sometimes"\n', "source.tls")],
)
def test_a_wrong_security_setting_is_one_line_naming_its_key(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(agent_config.ConfigError) as e:
        _load(tmp_path, text)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_target_settings_apply_over_the_flags_url_and_the_source_over_a_way_back(tmp_path: Path) -> None:
    token = tmp_path / "oxia-token"
    token.write_text("eyJ.secret.token\n")
    ca = tmp_path / "oxia-ca.pem"
    ca.write_text("x")
    config = _load(tmp_path, f"""
[source]
url = "zk://u:pw@zk1:2181/pulsar"
[target]
tls = true
ca = "{ca}"
token_file = "{token}"
""")
    agent = Agent(config)
    target = agent.url_with_credentials("oxia://oxia:6648/pulsar")
    assert (target.tls, target.tls_ca, target.token()) == (True, str(ca), "eyJ.secret.token")
    assert "secret" not in target.redacted() and "secret" not in agent_config.summary(config)
    assert "target security tls, ca, token_file" in agent_config.summary(config)
    back = agent.url_with_credentials("zk://zk1:2181/pulsar")  # the way back: the source's own
    assert (back.username, back.password, back.tls) == ("u", "pw", False)
