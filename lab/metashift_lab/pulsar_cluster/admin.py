"""Pulsar's admin API: its REST endpoints (what the traffic's policy updates and topic changes
use), and ``pulsar-admin`` itself from the release (``org.apache.pulsar.admin.cli.PulsarAdminTool``)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from metashift import processes

from . import configs
from .release import PulsarRelease

#: Redirects a broker answers when another broker owns the bundle.
_REDIRECTS = (301, 302, 307, 308)


class AdminError(RuntimeError):
    """An admin call failed: ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        self.status = status
        super().__init__(f"{method} {url}: {status} {body[:300]}")


class PulsarAdmin:
    """Pulsar's admin REST API on one broker (it redirects to the owner of a topic's bundle), or
    the next of ``others`` while that one does not answer (a broker restarting), as an operator's
    load balancer in front of the brokers does."""

    def __init__(self, web_url: str, *others: str, timeout: float = 60.0) -> None:
        self.web_urls = [u.rstrip("/") for u in (web_url, *others)]
        self.timeout = timeout

    @property
    def web_url(self) -> str:
        return self.web_urls[0]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One call, on the first broker that accepts a connection, following the owner's
        redirects with the same method; the decoded JSON answer (``None`` when empty)."""
        for base in self.web_urls[:-1]:
            try:
                return self._call(base, method, path, body)
            except AdminError as e:
                if e.status != 0:
                    raise
        return self._call(self.web_urls[-1], method, path, body)

    def _call(self, base: str, method: str, path: str, body: Any) -> Any:
        url = base + path
        data = None if body is None else json.dumps(body).encode()
        for _ in range(5):
            request = urllib.request.Request(url, data=data, method=method)
            request.add_header("Content-Type", "application/json")
            request.add_header("Accept", "application/json")
            try:
                with _NO_REDIRECTS.open(request, timeout=self.timeout) as answer:
                    text = answer.read().decode()
                    return json.loads(text) if text.strip() else None
            except urllib.error.HTTPError as e:
                if e.code in _REDIRECTS and e.headers.get("Location"):
                    url = e.headers["Location"]
                    continue
                raise AdminError(method, url, e.code, e.read().decode(errors="replace")) from None
            except OSError as e:
                raise AdminError(method, url, 0, str(e)) from None
        raise AdminError(method, url, 0, "too many redirects")

    # ---- the calls the cluster's traffic makes ------------------------------------------------------

    def create_tenant(self, tenant: str) -> None:
        self.call("PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": [configs.CLUSTER_NAME]})

    def create_namespace(self, namespace: str) -> None:
        self.call("PUT", f"/admin/v2/namespaces/{namespace}")

    def namespace_policies(self, namespace: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/admin/v2/namespaces/{namespace}"))

    def set_message_ttl(self, namespace: str, seconds: int) -> None:
        self.call("POST", f"/admin/v2/namespaces/{namespace}/messageTTL", seconds)

    def set_retention(self, namespace: str, minutes: int, size_mb: int) -> None:
        self.call("POST", f"/admin/v2/namespaces/{namespace}/retention",
                  {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb})  # fmt: skip

    def create_topic(self, namespace: str, topic: str, partitions: int = 0) -> None:
        if partitions:
            self.call("PUT", f"/admin/v2/persistent/{namespace}/{topic}/partitions", partitions)
        else:
            self.call("PUT", f"/admin/v2/persistent/{namespace}/{topic}")

    def delete_topic(self, namespace: str, topic: str) -> None:
        self.call("DELETE", f"/admin/v2/persistent/{namespace}/{topic}?force=true")

    def topics(self, namespace: str) -> list[str]:
        """Every persistent topic of the namespace (partitions too, as Pulsar lists them)."""
        return sorted(self.call("GET", f"/admin/v2/persistent/{namespace}") or [])

    def partitioned_topics(self, namespace: str) -> list[str]:
        return sorted(self.call("GET", f"/admin/v2/persistent/{namespace}/partitioned") or [])

    def subscriptions(self, topic: str) -> list[str]:
        """``topic`` is ``persistent://tenant/ns/name``."""
        return sorted(self.call("GET", f"/admin/v2/persistent/{_topic_path(topic)}/subscriptions") or [])

    def owner(self, topic: str) -> str:
        """The broker service URL owning ``topic``'s bundle (a lookup)."""
        answer = self.call("GET", f"/lookup/v2/topic/persistent/{_topic_path(topic)}")
        return str(answer["brokerUrl"])

    def owned_bundles(self, broker_web: str) -> list[str]:
        """The bundles the broker at ``broker_web`` (``http://host:port``) owns."""
        broker_id = broker_web.split("://", 1)[1].rstrip("/")
        owned = self.call("GET", f"/admin/v2/brokers/{configs.CLUSTER_NAME}/{broker_id}/ownedNamespaces") or {}
        return sorted(owned)


def _topic_path(topic: str) -> str:
    return topic.split("://", 1)[1] if "://" in topic else topic


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # PulsarAdmin.call follows them itself, with the same method and body


_NO_REDIRECTS = urllib.request.build_opener(_KeepRedirects)


def pulsar_admin(
    release: PulsarRelease, web_url: str, args: list[str], work_dir: Path, timeout: float = 180.0
) -> subprocess.CompletedProcess[str]:
    """Run ``pulsar-admin ARGS`` (the release's own CLI) against the broker at ``web_url``."""
    conf = work_dir / "client.conf"
    conf.write_text(configs.client_conf(web_url))
    log4j = work_dir / "log4j2-admin.properties"
    log4j.write_text(configs.LOG4J2.replace("rootLogger.level = info", "rootLogger.level = warn"))
    command = [*release.java("org.apache.pulsar.admin.cli.PulsarAdminTool", heap_mb=128, log_config=log4j,
                             admin=True), str(conf), *args]  # fmt: skip
    return processes.run(command, timeout=timeout)
