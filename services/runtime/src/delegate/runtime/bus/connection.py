"""``Bus``: one NATS connection and what a service does with it.

Durable publish (JetStream, deduplicated by message id, retried until a deadline), live
emit (core NATS, fire-and-forget), request/reply with typed errors, live subscriptions,
and the two durable consumers (``consumer``: one message at a time; ``batches``: whole
batches on an ack-all consumer). Streams are created by the role that owns them
(``StreamSpec.owner``); everyone else only uses them, and a publish before the owner has
created its stream is retried like any other outage.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import nats
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import PubAck, StorageType, StreamConfig
from pydantic import BaseModel, ValidationError

from delegate.contracts.messages import ErrorInfo, Ping, Pong
from delegate.contracts.streams import STREAMS, StreamSpec
from delegate.contracts.topics import PINGS, Query, Topic
from delegate.runtime.validation import describe

from ..credentials import connect_options, identity_role
from ..retry import retrying
from ..settings import NatsSettings
from .atomic import publish_atomic
from .batches import BatchConsumer
from .closing import drain_within
from .consumer import consume
from .dead_letters import DeadLetters
from .errors import TRANSIENT, BusUnavailable, DomainError, RemoteError
from .server import ServerFeature, check_server, stream_features

log = logging.getLogger(__name__)

M = TypeVar("M")
Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)

MSG_ID = "Nats-Msg-Id"

# A durable publish is retried on these: NATS away, or the stream not created yet by its
# owner (JetStream answers "no responders" for a subject no stream captures).
PUBLISH_RETRY = (*TRANSIENT, nats.js.errors.NoStreamResponseError)
# How long ``close`` gives its background tasks to end once cancelled before cancelling again.
RECANCEL_S = 1.0


class Bus:
    def __init__(self, nc: Client, service: str, role: str | None = None, *, replicas: int = 1) -> None:
        self.nc = nc
        # JetStream's copies of every stream and KV bucket this connection creates (NATS_REPLICAS)
        self.replicas = replicas
        self.js: JetStreamContext = nc.jetstream(timeout=5.0)
        self.service = service
        # the role whose streams it creates: its NATS user's, else the name before the first ':'
        self.role = role or identity_role(service)
        self.dead_letters = DeadLetters(self.publish)
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(
        cls, url: str, service: str, *, replicas: int | None = None, settings: NatsSettings | None = None
    ) -> "Bus":
        """Connect to ``url``: one server, or a cluster's seed list separated by commas.

        ``settings``: the service's own (its identity and NATS_REPLICAS), read once at its edge;
        several services share one process's environment (``delegate.host``), so a service
        passes them. Without them (tools, tests) they are read from the environment.
        ``replicas`` overrides NATS_REPLICAS (1): one setting, the same code on one server and
        on a cluster.
        """
        if settings is None:
            settings = NatsSettings()

        async def on_error(exc: Exception) -> None:
            # A permissions violation is a bug in the role table or the code, never weather.
            if "permissions violation" in str(exc).lower():
                log.error("nats refused this identity: %s", exc)
            else:
                log.debug("nats: %s", exc)

        async def on_disconnect() -> None:
            log.warning("disconnected from NATS, reconnecting")

        async def on_reconnect() -> None:
            log.info("reconnected to NATS")

        nc = await nats.connect(
            servers=seeds(url),  # any one that answers; the cluster tells the client the rest
            name=service,
            # who we are (NATS_CREDS / NATS_USER+NATS_PASSWORD) and our private reply inboxes
            **connect_options(service, settings, url=url),
            max_reconnect_attempts=-1,  # a restarted NATS must never end a service
            reconnect_time_wait=0.25,
            connect_timeout=2,
            allow_reconnect=True,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
        if replicas is None:
            replicas = settings.nats_replicas
        return cls(nc, service, identity_role(service, settings, url=url), replicas=replicas)

    # ---- streams ----------------------------------------------------------------------

    async def ensure_streams(self, specs: Sequence[StreamSpec] | None = None, *, all_owners: bool = False) -> None:
        """Create or update the streams this connection's role owns (``StreamSpec.owner``).

        A role that owns none does nothing. ``specs`` names the streams instead, whoever
        owns them; ``all_owners`` means every stream (tests and benchmarks, which stand in
        for the owners on a server without authentication).
        """
        if specs is None:
            specs = STREAMS if all_owners else [spec for spec in STREAMS if spec.owner == self.role]
        # An older server takes these settings without a word and then ignores them.
        self.require_server(*stream_features(specs))
        for spec in specs:
            config = StreamConfig(
                name=spec.name,
                subjects=list(spec.subjects),
                storage=StorageType.FILE,
                duplicate_window=spec.duplicate_window_s,
                max_age=spec.max_age_s or None,
                max_msg_size=spec.max_msg_size,
                allow_msg_schedules=spec.schedules or None,
                allow_atomic=spec.atomic or None,
                num_replicas=self.replicas,
            )
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError as refused:
                # It exists with other limits (or another replica count): JetStream changes
                # them in place, moving a stream between 1 and 3 copies without losing it.
                try:
                    await update_stream(self.js, config)
                except nats.js.errors.NotFoundError:
                    # It does not exist: the create was refused for its own reason (a cluster
                    # short of peers for the replicas), which "stream not found" would hide.
                    raise refused from None

    def require_server(self, *features: ServerFeature) -> None:
        """Raise ``ServerUnsuitable`` (naming the version found and the one needed) unless the
        connected nats-server has ``features`` (``server``)."""
        check_server(self.nc, features)

    # ---- publishing -----------------------------------------------------------------------

    async def publish(
        self,
        topic: Topic[M],
        msg: M,
        *,
        msg_id: str | None = None,
        deadline: float = 30.0,
    ) -> PubAck:
        """Durable publish, retried until ``deadline`` seconds: the message id dedups retries."""
        data = topic.encode(msg)
        headers = {MSG_ID: msg_id or _message_id(msg)}
        try:
            async for attempt in retrying(retry_on=PUBLISH_RETRY, deadline=deadline, initial=0.05, maximum=1.0):
                with attempt:
                    return await self.js.publish(topic.subject, data, headers=headers, timeout=2.0)
        except PUBLISH_RETRY as exc:
            raise BusUnavailable(f"publish to {topic.subject} failed: {exc!r}") from exc
        raise AssertionError("unreachable: retrying() returns or raises")

    async def publish_batch(
        self, topic: Topic[M], msgs: Sequence[M], *, msg_ids: Sequence[str], deadline: float = 30.0
    ) -> PubAck:
        """Durable publish of ``msgs`` as one atomic batch: the stream stores all or none (``atomic``)."""
        return await publish_atomic(self.nc, topic, msgs, msg_ids=msg_ids, deadline=deadline)

    async def emit(self, topic: Topic[M], msg: M) -> None:
        """Live, fire-and-forget (core NATS). Lost if nobody listens; that is the point."""
        await self.emit_raw(topic.subject, topic.encode(msg))

    async def emit_raw(self, subject: str, data: bytes) -> None:
        try:
            await self.nc.publish(subject, data)
        except TRANSIENT as exc:
            log.debug("live emit on %s dropped: %r", subject, exc)

    # ---- request/reply ------------------------------------------------------------------

    async def request(self, query: Query[Req, Rep], req: Req, timeout: float | None = None) -> Rep:
        return query.reply.model_validate(await self.request_unchecked(query, req, timeout))

    async def request_unchecked(
        self, query: Query[Req, Rep], req: Req, timeout: float | None = None
    ) -> dict[str, Any]:
        """The reply as JSON, not validated into its model: for a reply the caller only forwards
        (the ledger's history pages, to HTTP clients), where validating every event to serialize
        it again cost ~20 ms a 500-event page. An error reply still raises ``RemoteError``."""
        try:
            msg = await self.nc.request(
                query.subject, req.model_dump_json().encode(), timeout=timeout or query.timeout
            )
        except TRANSIENT as exc:
            raise BusUnavailable(f"no answer on {query.subject}: {exc!r}") from exc
        body = json.loads(msg.data)
        if not isinstance(body, dict):
            raise RemoteError("internal", f"the reply on {query.subject} is not a JSON object")
        error = body.get("error")
        if error:
            raise RemoteError(str(error.get("code", "error")), str(error.get("message", "")))
        return body

    async def serve(
        self,
        query: Query[Req, Rep],
        handler: Callable[[Req], Awaitable[Rep]],
        *,
        queue: str | None = None,
    ) -> Subscription:
        """Answer requests; a bad request or a ``DomainError`` becomes an error reply."""

        async def on_request(msg: Msg) -> None:
            try:
                req = query.request.model_validate_json(msg.data)
                reply: bytes = (await handler(req)).model_dump_json().encode()
            except ValidationError as exc:
                reply = _error_reply("bad_request", describe(exc))
            except DomainError as exc:
                reply = _error_reply(exc.code, exc.message)
            except Exception:
                log.exception("handler for %s failed", query.subject)
                reply = _error_reply("internal", "the service failed to answer; see its log")
            if msg.reply:
                try:
                    await msg.respond(reply)
                except TRANSIENT:
                    log.debug("reply on %s lost", query.subject)

        sub = await self.nc.subscribe(query.subject, queue=queue or "", cb=on_request)
        self._subs.append(sub)
        return sub

    async def serve_ping(
        self, service: str, ready: Callable[[], bool] | None = None, detail: str = "", refusal: str = ""
    ) -> Subscription:
        """Answer ``<service>.cmd.ping``: alive, and whether it is ready (``detail`` says why not;
        ``refusal`` why it will not start at all)."""
        query = PINGS[service]

        async def pong(_: Ping) -> Pong:
            return Pong(
                service=service, instance=self.service, ready=ready() if ready else True, detail=detail,
                refusal=refusal,
            )

        return await self.serve(query, pong)

    async def ping(self, service: str, timeout: float = 1.0) -> Pong:
        return await self.request(PINGS[service], Ping(), timeout=timeout)

    # ---- live subscriptions ---------------------------------------------------------------

    async def subscribe(self, topic: Topic[M], handler: Callable[[M], Awaitable[None]]) -> Subscription:
        async def on_msg(msg: Msg) -> None:
            try:
                decoded = topic.decode(msg.data)
            except ValidationError as exc:
                log.warning("dropping undecodable live message on %s: %s", msg.subject, describe(exc))
                return
            await handler(decoded)

        sub = await self.nc.subscribe(topic.subject, cb=on_msg)
        self._subs.append(sub)
        return sub

    # ---- durable consumers ----------------------------------------------------------------

    async def consume(
        self,
        topic: Topic[M],
        handler: Callable[[M, Msg], Awaitable[None]],
        *,
        durable: str,
        stream: str,
        stop: asyncio.Event,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
    ) -> None:
        """One message at a time, in order (see ``consumer``). Returns when ``stop`` is set."""
        await consume(
            self.js,
            self.dead_letter,
            topic,
            handler,
            durable=durable,
            stream=stream,
            stop=stop,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
        )

    async def consume_batches(
        self,
        topic: Topic[M],
        handler: Callable[[list[tuple[Msg, Any]]], Awaitable[None]],
        *,
        durable: str,
        stream: str,
        stop: asyncio.Event,
        batch: int = 256,
        ack_wait: float = 30.0,
        max_deliver: int = 20,
        depth: int = 1,
        raw: bool = False,
    ) -> None:
        """Whole batches, in order: the handler commits each; one ack-all after it returns covers it.

        The next batch is fetched and decoded while the handler commits this one. A batch
        whose handler raises is delivered again (after a pause growing with its failures)
        until ``max_deliver`` failures, then dead-lettered. A message the handler passes to
        ``dead_letter`` is parked and never handed over again. Returns when ``stop`` is set,
        after the batches in hand are settled.

        ``depth`` > 1 starts the handler on the next batch(es) before the previous call has
        returned (a handler that hands batches to another process keeps it busy that way);
        acks still go out in delivery order, each after its own call and all earlier ones
        returned, and nothing after a failed batch is acked. The handler must then cope
        with overlapping calls, committing them in the order they were started.

        ``raw`` hands over each message's bytes undecoded, for a handler that validates
        elsewhere (the ledger does, in its writer process); what it cannot decode it
        passes to ``dead_letter``. The rules this keeps are in ``batches``.
        """
        consumer = BatchConsumer(
            self.nc,
            self.js,
            self.dead_letters,
            topic,
            handler,
            durable,
            stream,
            stop,
            batch,
            ack_wait,
            max_deliver,
            decode=not raw,
            depth=depth,
        )
        await consumer.run()

    async def dead_letter(self, consumer: str, raw: Msg, reason: str) -> None:
        """Park a message that can never be processed, then stop its redelivery (``dead_letters``)."""
        await self.dead_letters.park(consumer, raw, reason)

    # ---- lifecycle --------------------------------------------------------------------------

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        """Keep a background task referenced until it ends; cancelled by ``close``."""
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        # Cancelled again while any is left: on Python 3.11 a task can lose its cancellation when
        # an ``asyncio.wait_for`` it awaits completes in the same step (fixed in 3.12, gh-86296),
        # and one follower that did went on retrying a gone ledger instead of ending.
        while pending := [task for task in self._tasks if not task.done()]:
            for task in pending:
                task.cancel()
            done, _ = await asyncio.wait(pending, timeout=RECANCEL_S)
            for task in done:
                if not task.cancelled():
                    task.exception()  # retrieved, as gather did: a failure while stopping is no warning
        await drain_within(self.nc)


async def update_stream(js: JetStreamContext, config: StreamConfig, *, timeout: float = 10.0) -> None:
    """Change a stream's configuration, then wait until it has a leader again.

    A new replica count gives the stream a new group, which answers nothing (publishes and
    reads time out) until it has elected its leader; with an unchanged count, and on a
    single server, the first look finds the leader.
    """
    await js.update_stream(config)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        info = await js.stream_info(str(config.name))
        if info.cluster is None or info.cluster.leader:
            return
        if asyncio.get_running_loop().time() > deadline:
            log.warning("stream %s has no leader %.0fs after its update", config.name, timeout)
            return
        await asyncio.sleep(0.05)


def seeds(url: str) -> list[str]:
    """``NATS_URL`` as nats-py's server list: ``nats://a:4222,nats://b:4222`` -> two URLs."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise ValueError("NATS_URL names no server")
    return servers


def _message_id(msg: object) -> str:
    """The dedup id of a durable message: its own ``id`` (every event and command has one)."""
    ident = getattr(msg, "id", None)
    if ident is None:
        raise TypeError(f"{type(msg).__name__} has no id: pass msg_id= to publish it")
    return str(ident)


def _error_reply(code: str, message: str) -> bytes:
    return json.dumps({"error": ErrorInfo(code=code, message=message).model_dump()}).encode()
