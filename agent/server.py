"""The agent process: the gateway on a unix socket (or TCP with TLS), health checking, metrics,
JSON logs, uvloop, and a clean drain on SIGTERM.

``Agent`` is the in-process object (tests start several); ``run(config)`` is ``metashift agent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import ssl
import stat
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from metashift import __version__
from metashift.agent.config import AgentConfig, ConfigError
from metashift.agent.core.gate import WriteGate
from metashift.agent.core.handover import TICK, CarriedSession, HandedState, StateFile, boot_id
from metashift.agent.core.home import Home
from metashift.agent.core.participant import Participant
from metashift.agent.core.router import Router
from metashift.agent.core.sequence_floors import floor_carried_sequentials
from metashift.agent.core.sessions import SessionRegistry
from metashift.agent.gateway.auth import TokenAuth, read_token
from metashift.agent.gateway.service import SESSION_SERVICE, STORE_SERVICE, Gateway
from metashift.agent.metrics import AgentMetrics
from metashift.agent.zookeeper.carry_over import carry_over
from metashift.agent.zookeeper.pip454 import Pip454Flag
from metashift.agent.zookeeper.sasl import FrontSasl
from metashift.agent.zookeeper.server import ZooKeeperServer
from metashift.copy.rules import configured_rules
from metashift.migration import paths
from metashift.migration.phase import Phase
from metashift.proto import wire
from metashift.stores import MetadataStore, SessionHandle, Store, StoreURL, open_store, parse_url
from metashift.stores.aio import cancel_and_wait, run_loop
from metashift.stores.urls import with_settings

log = logging.getLogger(__name__)

#: Something that runs beside an agent for as long as it runs (the coordinator).
Companion = Callable[["Agent"], Coroutine[Any, Any, None]]


class Agent:
    """One agent: a source store, the gateway serving it, and the gate in front of it."""

    def __init__(self, config: AgentConfig, *, source: MetadataStore | None = None) -> None:
        self.config = config
        self.metrics = AgentMetrics()
        self._given_source = source
        self.source: MetadataStore | None = source
        self.router: Router
        self.gate: WriteGate
        self.registry: SessionRegistry
        self.gateway: Gateway
        self.participant: Participant | None = None
        self.home: Home | None = None
        """The store the cluster lives on (the configured source until a migration completes)."""
        self.zookeeper: ZooKeeperServer | None = None
        """ZooKeeper's client protocol (``zookeeper.listen``); ``zookeeper.address`` is its host:port."""
        self._companions: list[asyncio.Task[None]] = []
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self.address = ""
        self._stopped = asyncio.Event()
        self._gate_seen: dict[str, int] = {}
        self.state_file: StateFile | None = None
        """What the members' sessions need to survive this process (``handover``); ``None``: no state dir."""
        self._handed: HandedState | None = None
        """What the predecessor process left in the state file (``None``: nothing, or not usable)."""
        self._ticker: asyncio.Task[None] | None = None

    # ---- start ----------------------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        if config.session_state_dir is not None:
            self.state_file = StateFile(config.session_state_dir, config.node_id)
            self._handed = self.state_file.load()
        if self.source is None:
            self.source = await open_store(config.source, resume=self._handle_for(config.source))
        try:
            await self._start()
        except BaseException:
            if self.participant is not None:
                with contextlib.suppress(Exception):
                    await self.participant.stop()
            if self.zookeeper is not None:
                with contextlib.suppress(Exception):
                    await self.zookeeper.stop()
            if self._server is not None:
                await self._server.stop(None)
                if self.config.listen.kind == "unix":
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.config.listen.address)
            if self.source is not self._given_source:
                with contextlib.suppress(Exception):
                    await self.source.close()
            raise

    async def _start(self) -> None:
        config = self.config
        assert self.source is not None
        self._watch_handle(self.source)
        self.router = Router(self.source)
        self.gate = WriteGate(
            self.router, hold_timeout=config.hold_timeout, on_change=self._gate_changed,
            on_released=self.metrics.write_hold.observe,
        )
        self.registry = SessionRegistry(self.gate, on_change=self.metrics.sessions.set, journal=self.state_file)
        self.metrics.ephemerals.set_function(lambda: self.registry.ephemeral_count)
        self.gateway = Gateway(
            self.router, self.gate, self.registry, self.metrics,
            node_id=config.node_id, role=config.role,
            session_timeout=config.session_timeout, session_max_timeout=config.session_max_timeout,
        )
        interceptors = []
        if config.auth_token_file is not None:
            interceptors.append(TokenAuth(read_token(config.auth_token_file)))
        server = grpc.aio.server(options=wire.SERVER_OPTIONS, interceptors=interceptors)
        server.add_generic_rpc_handlers(tuple(self.gateway.handlers()))
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self.address = self._bind(server)
        self._server = server
        if config.zookeeper_listen:  # bound now, served below: a port in use fails before registering
            await self._start_zookeeper()
        # the flag first: a frozen migration closes the gate, a completed one routes to the target,
        # before the first client is served
        self.home = Home(self.source)
        self.participant = Participant(
            gate=self.gate, registry=self.registry, open_target=self.open_target,
            node_id=config.node_id, role=config.role, address=self.address,
            drain_timeout=config.drain_timeout, participant_timeout=config.coordinator.participant_timeout,
            home=self.home, on_phase=self._phase_changed, agent_version=__version__,
            carried_counter=configured_rules(config.coordinator.ledgers_roots, config.coordinator.counters).is_counter,
            hold_until_sessions=True,
        )
        await self.participant.start()
        participant = self.participant
        self.metrics.heartbeat_age.set_function(lambda: participant.heartbeat_age)
        await self._take_over()  # before anyone is served: what the predecessor left
        self.participant.sessions_ready()
        await server.start()
        if self.zookeeper is not None:
            await self.zookeeper.serve()
        if config.listen.kind == "unix":
            os.chmod(config.listen.address, config.socket_mode)
        for service in ("", STORE_SERVICE, SESSION_SERVICE):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if config.metrics:
            try:
                self.metrics.serve(config.metrics)
            except OSError as e:
                raise ConfigError("metrics", f"cannot serve metrics on {config.metrics}: {e.strerror or e}") from None
        self._warn_insecure()
        log.info(
            "agent started",
            extra={"fields": {"node_id": config.node_id, "role": config.role, "listen": self.address,
                              "source": config.source.redacted(), "metrics": config.metrics or None,
                              "zookeeper": self.zookeeper.address if self.zookeeper else None}},
        )

    # ---- the hand-over from one process to the next (``handover``) -------------------------------

    def _handle_for(self, url: StoreURL) -> SessionHandle | None:
        handed = self._handed
        return handed.stores.get(url.public()) if handed is not None else None

    def _note_handles(self) -> None:
        """The store sessions' handles into the state file, those that changed; a store no longer
        held (a target dropped, a dry open's store closed) leaves it."""
        if self.state_file is not None:
            held = self._store_handles()
            for url, handle in held.items():
                self.state_file.store(url, handle)
            for url in set(self.state_file.state.stores) - set(held):
                self.state_file.store(url, None)

    def _watch_handle(self, store: MetadataStore) -> None:
        """Keep ``store``'s session handle in the state file as it changes (``on_handle_change``)."""
        store.on_handle_change = self._note_handles

    def _store_handles(self) -> dict[str, SessionHandle]:
        """The session of every store this agent holds ephemerals in, by public URL."""
        stores = [self.source, self.router.target, self.router.active]
        if self.participant is not None:
            stores += [self.participant.target, self.participant.home.store]
        handles = {}
        for store in stores:
            handle = store.session_handle() if store is not None else None
            if store is not None and handle is not None:
                handles[store.url.public()] = handle
        return handles

    async def _take_over(self) -> None:
        """Carry over the predecessor's ZooKeeper sessions (``carry_over``), then start this
        process's state file with what was carried."""
        handed, state_file = self._handed, self.state_file
        if handed is not None and self.zookeeper is not None:
            served = self._served_from(handed)
            outcome = await carry_over(handed, self.zookeeper.sessions, served)
            if served is not self.router.active:
                await self._carry_across(handed, served)
            if outcome.left:
                deleting = self.registry.delete_left(outcome.left)
                if self.gate.is_open:  # before any member is served (a freeze holds them: they wait)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(deleting), self.config.drain_timeout)
            log.info("took over from the previous agent process: %d session(s) carried with %d ephemeral(s), "
                     "%d expired, %d not carried; %d ephemeral(s) of ended sessions to delete",
                     outcome.carried, outcome.ephemerals, outcome.expired, outcome.broken, len(outcome.left),
                     extra={"fields": {"sessions_carried": outcome.carried, "sessions_expired": outcome.expired,
                                       "sessions_not_carried": outcome.broken,
                                       "previous_agent_age": round(handed.age(), 3)}})
        if state_file is None:
            return
        self.router.on_switch(lambda _old, new: state_file.serving(new.url.public()))
        sessions: dict[str, CarriedSession] = {}
        if self.zookeeper is not None:
            for zk in self.zookeeper.sessions.by_id.values():
                client = zk.client
                sessions[client.id] = CarriedSession(client.id, client.name, client.timeout, zk.id, zk.passwd,
                                                     set(client.ephemerals))
        try:
            state_file.open(HandedState(self.config.node_id, boot_id(), time.monotonic(),
                                        stores=self._store_handles(), sessions=sessions,
                                        serving=self.router.active.url.public()))
        except OSError as e:
            log.warning("cannot keep session state in %s (%s): a restart of this agent ends its members' sessions",
                        state_file.directory, e.strerror or e, extra={"fields": {"key": "session.state_dir"}})
            self.state_file = None
            self.registry.journal = None
            return
        self._ticker = asyncio.get_running_loop().create_task(self._tick(state_file), name="state-file")

    def _served_from(self, handed: HandedState) -> MetadataStore:
        """The store the predecessor served its members from, where their ephemerals are as they
        last saw them: the active store, unless this process switched away from it at start (a
        migration completed while no agent ran here) and still holds it (the source)."""
        active = self.router.active
        if handed.serving is None or handed.serving == active.url.public():
            return active
        if self.source is not None and handed.serving == self.source.url.public():
            return self.source
        log.warning("the previous agent process served from %s, which this one does not hold: its sessions "
                    "are judged in %s", handed.serving, active.url.public())
        return active

    async def _carry_across(self, handed: HandedState, served: MetadataStore) -> None:
        """The sessions carried from ``served`` (the predecessor's store, which a migration left
        while no agent ran) get their ephemerals, value and version, in the active store before
        any member is served; the copies in ``served`` go once every other agent left it."""
        active = self.router.active
        made = await self.registry.recreate_in(active, read_from=served)
        await floor_carried_sequentials(active, self.registry.ephemerals())
        paths = set(handed.orphans).union(*(s.ephemerals for s in handed.sessions.values()))
        assert self.participant is not None
        self.participant.clear_copies(served, sorted(paths))
        log.info("the previous agent process served from %s, which the cluster left meanwhile: %d ephemeral(s) "
                 "of the sessions carried re-created in %s", served.url.public(), made, active.url.public())

    async def _tick(self, state_file: StateFile) -> None:
        """The beat file every ``TICK``, and the store sessions' handles as they change (a new
        target, a new Oxia shard session, a store session lost and made again)."""
        while True:
            self._note_handles()
            state_file.tick()
            await asyncio.sleep(TICK)

    async def _start_zookeeper(self) -> None:
        config = self.config
        host, _, port = config.zookeeper_listen.rpartition(":")
        context = None
        tls = config.tls
        if tls.cert is not None and tls.key is not None and not host.startswith("127.") and host not in (
                "localhost", "::1", "[::1]"):
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(tls.cert), str(tls.key))
            if tls.client_ca is not None:
                context.load_verify_locations(str(tls.client_ca))
                context.verify_mode = ssl.CERT_REQUIRED
        zk = ZooKeeperServer(
            self.router, self.gate, self.registry, host=host.strip("[]"), port=int(port),
            min_timeout_ms=min(4000, int(config.session_max_timeout * 1000)),
            max_timeout_ms=int(config.session_max_timeout * 1000), ssl_context=context,
            pip454_flag=Pip454Flag(self._migration_state),
            sasl=FrontSasl(dict(config.zookeeper_sasl_users), required=config.zookeeper_require_sasl),
        )
        try:
            await zk.start(serve=False)
        except OSError as e:
            raise ConfigError(
                "zookeeper.listen", f"cannot listen on {config.zookeeper_listen}: {e.strerror or e}"
            ) from None
        self.zookeeper = zk

    def _migration_state(self) -> tuple[str, str]:
        """Where the migration stands and the store its commands take (``Pip454Flag``)."""
        home = self.home.store.url.public() if self.home is not None else self.config.source.public()
        return (self.participant.describe() if self.participant is not None else "starting"), home

    def _warn_insecure(self) -> None:
        """Settings that let more callers in than the defaults are allowed, but never silently."""
        config = self.config
        if config.listen.kind == "unix" and config.socket_mode & ~0o660 and config.auth_token_file is None:
            log.warning(
                "socket_mode %04o is wider than 0660 and no auth.token_file is set: every local user "
                "the mode lets in can read and write the metadata", config.socket_mode,
                extra={"fields": {"key": "socket_mode"}},
            )
        if config.tls.allow_insecure_tcp:
            log.warning(
                "tls.allow_insecure_tcp = true: a tcp:// listen address serves plain TCP, without TLS "
                "(for tests only)", extra={"fields": {"key": "tls.allow_insecure_tcp"}},
            )

    def _bind(self, server: grpc.aio.Server) -> str:
        listen, tls = self.config.listen, self.config.tls
        if listen.kind == "unix":
            path = Path(listen.address)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists() or path.is_symlink():
                    if not stat.S_ISSOCK(path.lstat().st_mode):
                        raise ConfigError("listen", f"{path} exists and is not a socket")
                    if _listening(path):
                        raise ConfigError("listen", f"another process (an agent?) is listening on {path}")
                    path.unlink()  # a stale socket of a previous run
            except OSError as e:
                raise ConfigError("listen", f"cannot make the socket {path}: {e.strerror or e}") from None
            old_umask = os.umask(0o177)  # never world-accessible, even for an instant
            try:
                server.add_insecure_port(f"unix:{path}")
            except RuntimeError as e:  # gRPC's "Failed to bind"
                raise ConfigError("listen", f"cannot listen on the unix socket {path}: {e}") from None
            finally:
                os.umask(old_umask)
            return f"unix:{path}"
        try:
            if tls.cert is not None and tls.key is not None:
                try:
                    credentials = grpc.ssl_server_credentials(
                        [(tls.key.read_bytes(), tls.cert.read_bytes())],
                        root_certificates=tls.client_ca.read_bytes() if tls.client_ca else None,
                        require_client_auth=tls.client_ca is not None,
                    )
                except OSError as e:
                    raise ConfigError("tls.cert", f"cannot read the TLS files: {e.strerror or e}") from None
                port = server.add_secure_port(listen.address, credentials)
            else:  # allow_insecure_tcp (tests only; the config refuses it otherwise)
                port = server.add_insecure_port(listen.address)
        except RuntimeError as e:  # gRPC's "Failed to bind" (address in use, bad TLS files)
            raise ConfigError("listen", f"cannot listen on {listen.address}: {e}") from None
        if port == 0:
            raise ConfigError("listen", f"cannot listen on {listen.address}")
        host = listen.address.rpartition(":")[0]
        return f"{host}:{port}"

    def start_companion(self, companion: Companion) -> asyncio.Task[None]:
        """Run ``companion(self)`` beside the agent (the coordinator, wired by the CLI) until the
        agent stops; a failure of it is logged, never left unobserved."""
        task = asyncio.get_running_loop().create_task(companion(self), name=getattr(companion, "__name__", "companion"))
        task.add_done_callback(_log_companion_end)
        self._companions.append(task)
        return task

    def url_with_credentials(self, url: str) -> StoreURL:
        """A store URL named by a flag (no credentials) with this agent's credentials for it: the
        ``[source]`` ones for the configured source (a way back may lead there), else ``[target]``."""
        parsed = parse_url(url, credentials=False)  # the flag's: no credentials, perhaps a SASL mechanism
        config = self.config
        if parsed.overlaps(config.source) and parsed.root == config.source.root:
            # the way back: the source's own credentials and security options
            parsed = dataclasses.replace(parsed, username=config.source.username, password=config.source.password,
                                         options={**parsed.options, **config.source.options})
            return with_settings(parsed, {})
        if config.target_username is not None:
            parsed = dataclasses.replace(parsed, username=config.target_username, password=config.target_password)
        return with_settings(parsed, config.target_security.settings())  # checked whole, as a URL is

    async def open_target(self, url: str) -> Store:
        """Open a migration's target (named by the flag) with this agent's own credentials (and
        the session the predecessor process held there, if any)."""
        parsed = self.url_with_credentials(url)
        store = await open_store(parsed, resume=self._handle_for(parsed))
        self._watch_handle(store)
        if self.state_file is not None and (handle := store.session_handle()) is not None:
            self.state_file.store(store.url.public(), handle)  # before anything is re-created there
        return store

    def _phase_changed(self, phase: Phase) -> None:
        self.metrics.phase.state(phase.value)

    def _gate_changed(self, gate: WriteGate) -> None:
        m = self.metrics
        m.gate_open.set(1 if gate.is_open else 0)
        m.held_writes.set(gate.held)
        seen = self._gate_seen
        for counter, name in ((m.writes_held, "held_total"), (m.held_write_expired, "expired_total"),
                              (m.drained_writes, "drained_total")):
            now = getattr(gate, name)
            if now > seen.get(name, 0):
                counter.inc(now - seen.get(name, 0))
                seen[name] = now

    # ---- stop -----------------------------------------------------------------------------------

    async def stop(self, grace: float | None = None, *, hand_over: bool = False) -> None:
        """Drain: refuse new calls, let the calls in flight finish (up to ``grace`` seconds, default
        the config's drain_timeout), end the sessions (their ephemerals are deleted), close stores.

        ``hand_over`` (SIGTERM, with a state dir): the ZooKeeper sessions and the store sessions
        that hold their ephemerals are left for the next process (``handover``): connections are
        closed, nothing is ended, and the state file says what to take over."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        hand_over = hand_over and self.state_file is not None
        grace = self.config.drain_timeout if grace is None else grace
        log.info("agent stopping; draining calls in flight (up to %.1fs)%s", grace,
                 "; its members' sessions are left for the next agent process" if hand_over else "")
        if self._ticker is not None:
            await cancel_and_wait([self._ticker], "state file")
            self._ticker = None
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        for task in self._companions:
            task.cancel()
        for task in self._companions:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 5.0)
        if self.participant is not None:
            await self.participant.stop(detach=hand_over)
        if self.zookeeper is not None:
            # its sessions end (their ephemerals are deleted below), or stay for the next process
            await self.zookeeper.stop(hand_over=hand_over)
        if self._server is not None:
            self.gateway.shutdown()
            await self._server.stop(grace)
            try:  # deleting the ephemerals of the sessions; what is left goes with the store session
                await asyncio.wait_for(self.registry.wait_cleanups(), max(grace, 1.0))
            except TimeoutError:
                log.warning("stopped deleting client ephemerals: they go with the store session")
        if hand_over and self.state_file is not None:
            for url, handle in self._store_handles().items():
                self.state_file.store(url, handle)
        for store in {id(s): s for s in (self.router.target, self.source) if s is not None}.values():
            if store is self._given_source:
                continue
            with contextlib.suppress(Exception):
                await (store.detach() if hand_over else store.close())
        if self.state_file is not None:
            if hand_over:
                self.state_file.close()
            else:  # every session ended: nothing for a successor
                self.state_file.discard()
        if self.config.listen.kind == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.config.listen.address)
        log.info("agent stopped")

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(grace=1.0)


def _log_companion_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s ended with an error", task.get_name(), exc_info=task.exception())


def _listening(path: Path) -> bool:
    """True when something accepts connections on the unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


# ---- the process ------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and any ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


async def serve(config: AgentConfig, companion: Companion | None = None) -> int:
    """Run an agent (and ``companion`` beside it) until SIGTERM or SIGINT; then drain and exit 0."""
    agent = Agent(config)
    try:
        await agent.start()
    except ConfigError as e:  # a setting that fails only when used (listen path, metrics port)
        log.error("cannot start: %s", e, extra={"fields": {"key": e.key}})
        print(f"metashift: error: {e}", file=sys.stderr)
        return 2
    if companion is not None:
        agent.start_companion(companion)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received")
    # a restart (an upgrade, systemd's restart) must cost the members nothing: their sessions
    # stay for the next process, which takes them over within their timeouts
    await agent.stop(hand_over=True)
    return 0


def run(config: AgentConfig, companion: Companion | None = None) -> int:
    """``metashift agent``: log JSON lines and serve (with ``companion`` beside it) on uvloop until SIGTERM."""
    setup_logging(config.log_level)
    paths.use_root(config.migration_root)  # the process's (and its copy jobs') migration nodes
    return run_loop(serve(config, companion))
