"""What runs on the cluster while it migrates: two namespaces with a persistent and a partitioned
topic each, producers and consumers on all of them (``traffic``), and an admin loop that keeps
changing metadata the way operators do: namespace policy updates, a topic created, a topic deleted."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .admin import AdminError, PulsarAdmin
from .traffic import Traffic

TENANT = "metashift"
NAMESPACES = (f"{TENANT}/ns-a", f"{TENANT}/ns-b")
PARTITIONS = 3
#: Created by the admin loop while the migration runs, and deleted by it (created beforehand).
CREATED_TOPIC = f"persistent://{NAMESPACES[0]}/created-during"
DELETED_TOPIC = f"persistent://{NAMESPACES[1]}/deleted-during"
#: Seconds between two admin changes.
ADMIN_PERIOD = 1.0


def traffic_topics() -> list[str]:
    """The topics that carry messages from the start: per namespace, one persistent and one
    partitioned topic."""
    return [f"persistent://{ns}/{name}" for ns in NAMESPACES for name in ("events", "orders")]


@dataclass
class AdminLoop:
    """Policy updates on both namespaces all along; the created topic and the deleted topic once,
    as soon as ``change_topics`` is set."""

    admin: PulsarAdmin
    traffic: Traffic
    updates: int = 0
    errors: list[str] = field(default_factory=list)
    created: bool = False
    deleted: bool = False
    change_topics: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pulsar admin loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            namespace = NAMESPACES[k % len(NAMESPACES)]
            try:
                if k % 2 == 0:
                    self.admin.set_message_ttl(namespace, 3600 + k)
                else:
                    self.admin.set_retention(namespace, 60 + k, 100)
                self.updates += 1
                if self.change_topics.is_set() and not self.created:
                    self.admin.create_topic(NAMESPACES[0], CREATED_TOPIC.rsplit("/", 1)[1])
                    self.traffic.add_topic(CREATED_TOPIC)
                    self.created = True
                if self.change_topics.is_set() and not self.deleted:
                    self.admin.delete_topic(NAMESPACES[1], DELETED_TOPIC.rsplit("/", 1)[1])
                    self.deleted = True
            except (AdminError, RuntimeError) as e:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {e}")
            except Exception as e:  # the Python client's own errors: report, keep going
                self.errors.append(f"{time.strftime('%H:%M:%S')} {type(e).__name__}: {e}")
            k += 1
            self._stop.wait(ADMIN_PERIOD)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)


def set_up(admin: PulsarAdmin) -> None:
    """The tenant, the namespaces, the partitioned topics and the topic to be deleted."""
    admin.create_tenant(TENANT)
    for namespace in NAMESPACES:
        admin.create_namespace(namespace)
    for topic in traffic_topics():
        namespace, name = topic.split("://", 1)[1].rsplit("/", 1)
        admin.create_topic(namespace, name, partitions=PARTITIONS if name == "orders" else 0)
    admin.create_topic(NAMESPACES[1], DELETED_TOPIC.rsplit("/", 1)[1])


def expected_topics(traffic: Traffic) -> dict[str, list[str]]:
    """Per namespace, the topic names Pulsar should list after the migration (partitions included)."""
    out: dict[str, list[str]] = {ns: [] for ns in NAMESPACES}
    for topic in traffic.topics:
        namespace = topic.split("://", 1)[1].rsplit("/", 1)[0]
        if topic.endswith("/orders"):
            out[namespace] += [f"{topic}-partition-{i}" for i in range(PARTITIONS)]
        else:
            out[namespace].append(topic)
    return {ns: sorted(names) for ns, names in out.items()}
