"""Producers and consumers of the Python ``pulsar-client`` that account for every message.

Each topic gets one producer (no batching: a message is an entry, so ledgers roll over every few
messages) and two subscriptions created before the first message: ``sub``, consumed and
acknowledged all along, and ``backlog``, never consumed, which keeps every ledger of the topic
(the restart on etcd reads them all back). A message's payload names it (``topic#seq``): a publish
the broker acknowledged must come out of ``sub`` at least once; a second time is a duplicate.
The client is blocking (threads of the C++ library): everything here runs in threads.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: Publishes per second per topic, and publishes in flight per producer at most.
RATE = 15.0
MAX_PENDING = 200
#: A publish may wait this long (the broker holds it through a freeze and a ledger roll-over).
SEND_TIMEOUT_MS = 300_000
SUBSCRIPTION = "sub"
BACKLOG = "backlog"


#: Where the Python client's own log (its errors only) goes: a file of the cluster's work directory
#: (``log_client_to``). Not its ``ConsoleLogger``, which writes to stdout, where ``sandbox --pulsar
#: --json`` prints its report; not a Python ``logging.Logger`` either: the C++ library's threads
#: calling into it as the interpreter exits aborted the process ("terminate called without an
#: active exception").
_client_log = os.devnull


def log_client_to(path: str) -> None:
    """Send the Python client's own log to ``path`` from now on."""
    global _client_log
    _client_log = path


def _client(service_url: str) -> Any:
    import pulsar  # the pulsar-client package (the `pulsar` extra, and the test extras)

    logger = pulsar.FileLogger(pulsar.LoggerLevel.Error, _client_log)
    return pulsar.Client(service_url, operation_timeout_seconds=120, logger=logger)


@dataclass
class TopicTraffic:
    """What happened to one topic's messages."""

    topic: str
    published: int = 0
    acknowledged: set[str] = field(default_factory=set)
    failed: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)
    """(wall clock at send, seconds to the broker's acknowledgement) per acknowledged publish."""
    received: Counter[str] = field(default_factory=Counter)
    in_flight: dict[str, float] = field(default_factory=dict)
    """Payload -> wall clock at send, of every publish not answered yet."""
    errors: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    """Failed publishes by what the client answered (its result, or the exception it raised)."""

    @property
    def lost(self) -> set[str]:
        return {m for m in self.acknowledged if m not in self.received}

    @property
    def duplicated(self) -> int:
        return sum(n - 1 for n in self.received.values() if n > 1)


class Traffic:
    """Producers and ``sub`` consumers on ``topics`` through the broker at ``service_url``."""

    def __init__(self, service_url: str, topics: list[str], rate: float = RATE) -> None:
        self.service_url = service_url
        self.rate = rate
        self.topics = {t: TopicTraffic(t) for t in topics}
        self._lock = threading.Lock()
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self._client: Any = None

    # ---- set-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Subscriptions first (``backlog`` then holds every message), then producers and consumers."""
        import pulsar

        self._client = _client(self.service_url)
        for topic in self.topics:
            backlog = self._client.subscribe(topic, BACKLOG, initial_position=pulsar.InitialPosition.Earliest)
            backlog.close()
            consumer = self._client.subscribe(topic, SUBSCRIPTION, initial_position=pulsar.InitialPosition.Earliest,
                                              consumer_type=pulsar.ConsumerType.Shared)  # fmt: skip
            producer = self._client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS,
                                                    max_pending_messages=MAX_PENDING * 2)  # fmt: skip
            self._spawn(f"consume {topic}", self._consume, topic, consumer)
            self._spawn(f"produce {topic}", self._produce, topic, producer)

    def add_topic(self, topic: str) -> None:
        """A topic created while the traffic runs: it gets its subscriptions, producer and consumer."""
        with self._lock:
            self.topics[topic] = TopicTraffic(topic)
        import pulsar

        backlog = self._client.subscribe(topic, BACKLOG, initial_position=pulsar.InitialPosition.Earliest)
        backlog.close()
        consumer = self._client.subscribe(topic, SUBSCRIPTION, initial_position=pulsar.InitialPosition.Earliest,
                                          consumer_type=pulsar.ConsumerType.Shared)  # fmt: skip
        producer = self._client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
        self._spawn(f"consume {topic}", self._consume, topic, consumer)
        self._spawn(f"produce {topic}", self._produce, topic, producer)

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- the loops ------------------------------------------------------------------------------

    def _produce(self, topic: str, producer: Any) -> None:
        t = self.topics[topic]
        pending = threading.Semaphore(MAX_PENDING)
        seq = 0
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            payload = f"{topic}#{seq}"
            seq += 1
            pending.acquire()
            sent_at = time.time()

            def done(result: Any, _msg_id: Any, payload: str = payload, sent_at: float = sent_at) -> None:
                import pulsar

                with self._lock:
                    t.in_flight.pop(payload, None)
                    if result == pulsar.Result.Ok:
                        t.acknowledged.add(payload)
                        t.latencies.append((sent_at, time.time() - sent_at))
                    else:
                        t.failed += 1
                        t.failures[str(result)] += 1
                        if len(t.errors) < 5:
                            t.errors.append(f"publish {payload}: {result}")
                pending.release()

            with self._lock:
                t.published += 1
                t.in_flight[payload] = sent_at
            try:
                producer.send_async(payload.encode(), done)
            except Exception as e:  # the client refused it at once: not published
                with self._lock:
                    t.in_flight.pop(payload, None)
                    t.failed += 1
                    t.failures[f"{type(e).__name__}: {e}"] += 1
                    t.errors.append(f"publish {payload}: {e}")
                pending.release()
            next_at += 1.0 / self.rate
            self._stop_producing.wait(max(0.0, next_at - time.monotonic()))
        producer.flush()
        # every publish answered (acknowledged or failed) before the producer goes
        for _ in range(MAX_PENDING):
            pending.acquire(timeout=SEND_TIMEOUT_MS / 1000)
        producer.close()

    def _consume(self, topic: str, consumer: Any) -> None:
        t = self.topics[topic]
        while not self._stop_consuming.is_set():
            try:
                message = consumer.receive(timeout_millis=500)
            except Exception:  # a receive timeout (pulsar.Timeout) or a reconnection
                continue
            with self._lock:
                t.received[message.data().decode()] += 1
            try:
                consumer.acknowledge(message)
            except Exception as e:
                with self._lock:
                    if len(t.errors) < 5:
                        t.errors.append(f"acknowledge: {e}")
        consumer.close()

    # ---- the end --------------------------------------------------------------------------------

    def stop(self, drain_within: float = 120.0) -> None:
        """Stop publishing (every publish answered), then consume until every acknowledged message
        was received or ``drain_within`` seconds pass; then close."""
        self._stop_producing.set()
        for thread in self._threads:
            if thread.name.startswith("produce "):
                thread.join(SEND_TIMEOUT_MS / 1000 + 10)
        deadline = time.monotonic() + drain_within
        while time.monotonic() < deadline:
            with self._lock:
                if not any(t.lost for t in self.topics.values()):
                    break
            time.sleep(0.2)
        time.sleep(1.0)  # a redelivery in flight is counted as the duplicate it is
        self._stop_consuming.set()
        for thread in self._threads:
            thread.join(30)
        self._client.close()

    def abandon(self, within: float = 10.0) -> None:
        """Stop everything at once, publishes in flight or not (a run that failed: a publish the
        cluster cannot serve would hold ``stop`` for its send timeout)."""
        self._stop_producing.set()
        self._stop_consuming.set()
        if self._client is not None:
            try:
                self._client.close()  # fails what is pending: the threads' calls return or raise
            except Exception:
                pass
        deadline = time.monotonic() + within
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # ---- figures --------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        with self._lock:
            ts = list(self.topics.values())
            return {
                "messages_published": sum(t.published for t in ts),
                "messages_acknowledged": sum(len(t.acknowledged) for t in ts),
                "messages_received": sum(len(t.acknowledged & set(t.received)) for t in ts),
                "messages_lost": sum(len(t.lost) for t in ts),
                "messages_duplicated": sum(t.duplicated for t in ts),
                "messages_failed": sum(t.failed for t in ts),
            }

    def max_publish_latency_ms(self, between: tuple[float, float] | None = None) -> float:
        """The longest publish (send to the broker's acknowledgement), of those sent in ``between``
        (wall clock) when given."""
        with self._lock:
            samples = [s for t in self.topics.values() for at, s in t.latencies
                       if between is None or (between[0] <= at + s and at <= between[1])]  # fmt: skip
        return round(max(samples, default=0.0) * 1000, 1)

    def longest_publish_sent_ms(self, since: float, until: float) -> float:
        """The longest publish of those sent between ``since`` and ``until`` (wall clock): answered
        ones from send to acknowledgement, and one still unanswered at ``until`` counts as long as
        it has waited by then (a stalled publish is the longest of all)."""
        with self._lock:
            answered = [s for t in self.topics.values() for at, s in t.latencies if since <= at <= until]
            waiting = [until - at for t in self.topics.values() for at in t.in_flight.values() if since <= at <= until]
        return round(max([*answered, *waiting], default=0.0) * 1000, 1)

    def in_flight(self) -> tuple[int, float]:
        """Publishes not answered yet, and how long the oldest has waited (s)."""
        now = time.time()
        with self._lock:
            sent = [at for t in self.topics.values() for at in t.in_flight.values()]
        return len(sent), max((now - at for at in sent), default=0.0)

    def failures(self) -> Counter[str]:
        """Failed publishes of every topic by what the client answered."""
        with self._lock:
            return sum((t.failures for t in self.topics.values()), Counter())

    def errors(self) -> list[str]:
        with self._lock:
            return [f"{t.topic}: {e}" for t in self.topics.values() for e in t.errors]

    def acknowledged_now(self) -> dict[str, set[str]]:
        """Per topic, every payload the broker acknowledged so far (for ``not_received``)."""
        with self._lock:
            return {t.topic: set(t.acknowledged) for t in self.topics.values()}

    def not_received(self, acknowledged: dict[str, set[str]]) -> dict[str, set[str]]:
        """Of ``acknowledged`` (``acknowledged_now``), per topic, the payloads ``sub`` has not
        received yet (topics with none left out)."""
        with self._lock:
            missing = {topic: payloads - set(self.topics[topic].received) for topic, payloads in acknowledged.items()}
        return {topic: payloads for topic, payloads in missing.items() if payloads}

    def received_within(self, acknowledged: dict[str, set[str]], within: float) -> dict[str, set[str]]:
        """Wait until ``sub`` received every payload of ``acknowledged``, or ``within`` seconds pass;
        what it still has not received then (``not_received``)."""
        deadline = time.monotonic() + within
        while (missing := self.not_received(acknowledged)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return missing


#: Seconds ``read_backlog`` waits for a topic's next message before it gives that topic up (a
#: topic that lost messages must not take the time of the topics read after it).
BACKLOG_IDLE_S = 60.0


def read_backlog(
    service_url: str, topics: list[str], expected: dict[str, set[str]], within: float = 600.0,
    idle: float = BACKLOG_IDLE_S,
) -> dict[str, int]:  # fmt: skip
    """Read each topic's ``backlog`` subscription from the start (every message it kept, old
    ledgers included) until every payload of ``expected[topic]`` came out, or none came for
    ``idle`` seconds (that topic), or ``within`` seconds pass (all); returns the payloads read per
    topic (distinct)."""
    client = _client(service_url)
    read: dict[str, int] = {}
    try:
        deadline = time.monotonic() + within
        for topic in topics:
            consumer = client.subscribe(topic, BACKLOG)
            seen: set[str] = set()
            want = expected.get(topic, set())
            last = time.monotonic()
            while not want <= seen and time.monotonic() < min(deadline, last + idle):
                try:
                    message = consumer.receive(timeout_millis=2000)
                except Exception:
                    continue
                last = time.monotonic()
                seen.add(message.data().decode())
                consumer.acknowledge(message)
            read[topic] = len(seen & want) if want else len(seen)
            consumer.close()
    finally:
        client.close()
    return read


def round_trip(service_url: str, topic: str, count: int = 10, within: float = 120.0) -> int:
    """Publish ``count`` new messages to ``topic`` and receive them on a new subscription: how many
    came back."""
    import pulsar

    client = _client(service_url)
    try:
        consumer = client.subscribe(topic, f"after-{int(time.time() * 1000)}",
                                    initial_position=pulsar.InitialPosition.Latest)  # fmt: skip
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=int(within * 1000))
        sent = {f"new-{i}-{time.time()}" for i in range(count)}
        for payload in sent:
            producer.send(payload.encode())
        got: set[str] = set()
        deadline = time.monotonic() + within
        while not sent <= got and time.monotonic() < deadline:
            try:
                message = consumer.receive(timeout_millis=2000)
            except Exception:
                continue
            got.add(message.data().decode())
            consumer.acknowledge(message)
        producer.close()
        consumer.close()
        return len(got & sent)
    finally:
        client.close()
