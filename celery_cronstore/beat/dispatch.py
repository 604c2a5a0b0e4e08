"""Beat's batches to the broker: Celery's protocol-2 message, built once per batch's worth
of work instead of once per message.

:class:`Dispatcher` builds the very same message Celery builds for ``apply_async`` (or
``send_task``) and gives it to kombu's producer, skipping the per-message work Celery
repeats for every call (reading the configuration, merging options twice, wrapping the
publish in a retry); it hands a claim to :func:`celery_cronstore.beat.publish.publish` whenever
Celery would do something it does not reproduce. ``tests/beat/
test_dispatch_brokers.py`` decodes messages from both ways and compares them field by
field.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from celery_cronstore.beat.confirm import Tally, confirmed, confirming
from celery_cronstore.beat.publish import BoundRouter, publish, shorten
from celery_cronstore.beat.redis_batch import install
from celery_cronstore.beat.template import Filler, Ready, learn
from celery_cronstore.beat.wire import expiry, protocol2_body, protocol2_headers
from celery_cronstore.policy import message_options
from celery_cronstore.policy.messages import H_FIRE
from celery_cronstore.records import Claim

__all__ = ["Dispatcher"]

logger = logging.getLogger("celery.beat")

#: ``send_task_message`` parameters: every other routed option becomes a message property.
_NAMED = frozenset(
    {
        "exchange",
        "routing_key",
        "queue",
        "event_dispatcher",
        "retry",
        "retry_policy",
        "serializer",
        "delivery_mode",
        "compression",
        "declare",
        "headers",
        "exchange_type",
        "timeout",
        "confirm_timeout",
    }
)


#: The first Celery minor whose message :class:`Dispatcher` reproduces.
REPRODUCED_FROM = (5, 7)


class Dispatcher:
    """Publish claims through one producer as Celery would, doing per batch what Celery
    does per message.

    The message is Celery 5.7's for ``apply_async(args, kwargs, task_id=..., **options)``
    (``send_task`` by name for a task this process does not know): the same routing
    (``task_routes``, the task's own queue and priority), headers, properties, body and
    ``before_task_publish`` / ``after_task_publish`` signals. What differs is how it gets
    to the broker: without Celery's per-message publish retry (a broker error holds the
    whole batch back, and beat sends it again, same task ids, once the broker is back).
    A claim whose task or app asks for something not reproduced here (a custom
    ``apply_async`` or ``shadow_name``, pydantic arguments, ``task_always_eager``,
    ``task_send_sent_event``, protocol 1) goes through :func:`publish` instead.
    """

    def __init__(self, app: Any, producer: Any, *, fast: bool = True) -> None:
        import celery
        from celery import Celery, Task, signals
        from celery.app.amqp import AMQP
        from celery.app.routes import MapRoute
        from celery.backends.base import Backend
        from celery.utils.nodenames import anon_nodename
        from kombu.serialization import dumps

        self.app = app
        self.producer = producer
        self.router = BoundRouter(app, producer.channel)
        conf = app.conf
        amqp = app.amqp
        self._celery = (
            # The message built here is Celery 5.7's: on an older Celery (5.4-5.6 differ in
            # headers such as ``ignore_result`` and lack helpers it uses) every claim goes
            # through Celery's own send path instead (`make test-celery-matrix` found it).
            tuple(int(p) for p in celery.__version__.split(".")[:2]) >= REPRODUCED_FROM
            and conf.task_protocol == 2
            and not conf.task_send_sent_event
            and not signals.task_sent.receivers
            and type(amqp).create_task_message is AMQP.create_task_message
            and type(amqp).send_task_message is AMQP.send_task_message
            and type(app).send_task is Celery.send_task
        )
        self._eager = bool(conf.task_always_eager)
        self._dumps: Any = dumps
        self._Task = Task
        from celery_cronstore.worker.task import CronTask

        #: A fire of a CronTask is guarded (its message carries the time box).
        self._CronTask: type[Any] = CronTask
        self._before = signals.before_task_publish
        self._after = signals.after_task_publish
        self._retry = conf.task_publish_retry
        self._policy = dict(conf.task_publish_retry_policy)
        self._delivery_mode = conf.task_default_delivery_mode
        self._compression = conf.task_compression
        self._default_exchange = amqp.default_exchange
        self._default_rkey = conf.task_default_routing_key
        self._queues = amqp.queues
        self._reply_to = app.thread_oid
        self._origin = anon_nodename()
        self._argsmax = amqp.argsrepr_maxsize
        self._kwargsmax = amqp.kwargsrepr_maxsize
        self._backend: Any = None
        self._backend_base = Backend.on_task_call
        self._declared: set[int] = set()
        self._tasks: dict[str, tuple[Any, dict[str, Any]] | None] = {}
        #: The templates by message shape (:meth:`_shape`) and the messages rendered
        #: ahead. Only when every router routes by task name (a router function may look
        #: at the arguments).
        self.filler = Filler(app, dumps, self._argsmax, self._kwargsmax)
        self._fast = fast and all(isinstance(r, MapRoute) for r in amqp.router.routes)
        #: How many fires went from a template (the fast path).
        self.templated = 0
        #: The current batch's messages (``beat.confirm``).
        self._tally = Tally(producer)
        #: Whether the publishes of the current batch wait for its one flush (Redis).
        self.buffered = False

    @contextlib.contextmanager
    def batch(self, size: int) -> Iterator[None]:
        """Group the publishes made inside: one Redis transaction (``beat.redis_batch``:
        all of it went, or none), or, with RabbitMQ's publisher confirms, one wait for the
        confirms of them all (``beat.confirm``: a nack, a timeout or a broken connection
        raises :class:`~celery_cronstore.beat.outcome.BatchFailed`).
        """
        if confirming(self.producer):
            try:
                with confirmed(self.producer) as self._tally:
                    yield
            finally:
                self._tally = Tally(self.producer)
            return
        self._tally = Tally(self.producer)
        grouped: Any = getattr(self.producer, "batch", None)
        self.buffered = grouped is not None and install(self.producer.channel)
        with grouped(max_size=size) if self.buffered else contextlib.nullcontext():
            yield

    def send(self, claim: Claim) -> None:
        """Publish ``claim`` (raises what building or sending its message raises)."""
        ready = self.filler.take(claim.task_id)
        if ready is not None and not self._signalled():
            session = self._session()
            if session is not None:  # rendered ahead (:meth:`prepare`): one LPUSH
                logger.info("beat: sending %s (%s) for %s", claim.name, claim.task, claim.fire_time)
                self._push(session, ready)
                return
        spec = self._spec(claim.task)
        if spec is None:
            publish(self.app, claim, self.producer, self.router)
            self._tally.passed()
            return
        logger.info("beat: sending %s (%s) for %s", claim.name, claim.task, claim.fire_time)
        task, guarded, options = self._parts(claim, spec)
        if self._templated(claim, guarded, options):
            return
        args, kwargs = claim.args, claim.kwargs
        check = getattr(task, "__header__", None) if task is not None and task.typing else None
        if check is not None:  # Task.typing: the call must fit the signature
            check(*(args or ()), **(kwargs or {}))
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        expires = options.pop("expires", None)
        ignore_result = options.pop("ignore_result", None)
        options["argsrepr"] = argsrepr = shorten(repr(args), self._argsmax)
        options["kwargsrepr"] = kwargsrepr = shorten(repr(kwargs), self._kwargsmax)
        routed = self.router.route(options, claim.task, args, kwargs, task)
        expires_header = None
        if expires is not None:
            expires_header, routed["expiration"] = expiry(self.app, claim.task_id, expires)
        task_id = claim.task_id
        headers = protocol2_headers(
            task_id=task_id,
            name=claim.task,
            argsrepr=argsrepr,
            kwargsrepr=kwargsrepr,
            origin=self._origin,
            expires=expires_header,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            ignore_result=ignore_result,
        )
        body = protocol2_body(args, kwargs)
        self._send(task_id, claim.task, headers, body, routed, ignore_result)
        own = (task_id, headers[H_FIRE], argsrepr, kwargsrepr)
        self._learn(claim, guarded, own)

    def _session(self) -> Any:
        """Return the Redis batch of this chunk (``None``: none), opened as kombu's first
        publish in it would open it, so a chunk's first fire may be templated too."""
        if not self.buffered or not self._fast:
            return None
        state = getattr(getattr(self.producer, "_batch_local", None), "current", None)
        session = getattr(state, "session", None)
        if session is None and state is not None and hasattr(state, "_get_session"):
            session = state._get_session(self.producer.channel)
        return session if hasattr(session, "push") else None

    def _learn(self, claim: Claim, guarded: bool, own: tuple[str, ...]) -> None:
        """Keep the template of the message just sent for the next fires of its shape."""
        session = self._session()
        if session is None or self._signalled():
            return
        template = learn(session.last, own)
        if template is not None:
            self.filler.templates[self._shape(claim, guarded)] = template

    @staticmethod
    def _shape(claim: Claim, guarded: bool) -> tuple[str, bool, str]:
        """Return what makes fires share a template: the task, the guard, the options."""
        options = claim.options
        return (
            claim.task,
            guarded,
            json.dumps(options, sort_keys=True, default=repr) if options else "",
        )

    def _templated(self, claim: Claim, guarded: bool, options: dict[str, Any]) -> bool:
        """Send ``claim`` from its shape's template (``beat.template``); return whether it
        went that way (none learnt yet, or signal receivers: the full path)."""
        if not self.filler.templates or self._signalled():
            return False
        session = self._session()
        if session is None:
            return False
        shape = self._shape(claim, guarded)
        ready = self.filler.fill(claim, shape, options, session.channel, self._check(claim))
        if ready is None:
            return False
        self._push(session, ready)
        return True

    def prepare(self, claims: list[Claim]) -> int:
        """Render the messages of ``claims`` (taken ahead) now, each one ``LPUSH`` when it
        falls due; return how many. One that cannot be (no template yet, an expiry,
        arguments its task refuses) is built when it goes."""
        if not self._fast or not self.filler.templates or self._signalled():
            return 0
        channel = self.producer.channel
        if not hasattr(channel, "encode_body") or confirming(self.producer):
            return 0
        made = 0
        for claim in claims:
            if self.filler.full:
                break
            spec = self._spec(claim.task)
            if spec is None:
                continue
            _, guarded, options = self._parts(claim, spec)
            shape = self._shape(claim, guarded)
            try:  # a refusal: its send says why, and drops it, when it falls due
                ready = self.filler.fill(claim, shape, options, channel, self._check(claim), True)
            except Exception:
                continue
            if ready is not None:
                self.filler.keep(ready)
                made += 1
        return made

    def forget(self, claims: list[Claim]) -> None:
        """Forget what :meth:`prepare` rendered for ``claims`` (sent, dropped, put back)."""
        self.filler.forget(c.task_id for c in claims)

    def _push(self, session: Any, ready: Ready) -> None:
        """Buffer one rendered message in the chunk's Redis transaction."""
        if not ready.ignore_result:
            self._on_task_call(ready.task_id)
        session.push(ready.key, ready.text)
        self.templated += 1
        self._tally.published()

    def _signalled(self) -> bool:
        """Whether a publish signal has receivers (each message then takes the full path)."""
        return bool(self._before.receivers or self._after.receivers)

    def _check(self, claim: Claim) -> Any:
        """Return the signature check of ``claim``'s task (``Task.typing``), if any."""
        task = self._tasks.get(claim.task)
        return getattr(task[0], "__header__", None) if task and task[0] and task[0].typing else None

    def _parts(
        self, claim: Claim, spec: tuple[Any, dict[str, Any]]
    ) -> tuple[Any, bool, dict[str, Any]]:
        """Return ``claim``'s task (``None``: sent by name), whether its fire is guarded
        (a CronTask's), and its message options: the row's over the task's own."""
        task, preopts = spec
        guarded = isinstance(task, self._CronTask)
        options = message_options(claim, guarded=guarded)
        if task is not None:
            options = dict(preopts, **options)
            options.setdefault("ignore_result", task.ignore_result)
        return task, guarded, options

    def _spec(self, name: str) -> tuple[Any, dict[str, Any]] | None:
        """Return (task or None, its exec options) if the fast path may send ``name``."""
        if name in self._tasks:
            return self._tasks[name]
        spec: tuple[Any, dict[str, Any]] | None = None
        if self._celery:
            task = self.app.tasks.get(name)
            if task is None:
                spec = (None, {})
            elif self._plain(task):
                spec = (task, dict(task._get_exec_options()))
        self._tasks[name] = spec
        return spec

    def _plain(self, task: Any) -> bool:
        cls, base = type(task), self._Task
        soft, hard = task.soft_time_limit, task.time_limit
        return (
            not self._eager
            and cls.apply_async is base.apply_async
            and cls.shadow_name is base.shadow_name
            and getattr(task, "_dump_pydantic_arguments", None) is None
            and not (soft and hard and soft > hard)
        )

    def _send(
        self,
        task_id: str,
        name: str,
        headers: dict[str, Any],
        body: tuple[Any, ...],
        options: dict[str, Any],
        ignore_result: bool | None,
    ) -> None:
        """Celery's ``send_task_message`` for one message, minus the publish retry."""
        extra = options.pop("headers", None)
        if extra:
            headers.update(extra)
        queue: Any = options.get("queue")
        exchange = options.get("exchange")
        routing_key = options.get("routing_key")
        properties = {"correlation_id": task_id, "reply_to": self._reply_to}
        properties.update((k, v) for k, v in options.items() if k not in _NAMED)
        qname = queue
        if queue is None and exchange is None:
            queue = self.app.amqp.default_queue
        if queue is not None:
            if isinstance(queue, str):
                qname, queue = queue, self._queues[queue]
            else:
                qname = queue.name
        delivery_mode = options.get("delivery_mode")
        if delivery_mode is None:
            delivery_mode = getattr(getattr(queue, "exchange", None), "delivery_mode", None)
            delivery_mode = delivery_mode or self._delivery_mode
        exchange_type = options.get("exchange_type")
        if exchange_type is None:
            exchange_type = getattr(getattr(queue, "exchange", None), "type", "direct")
        if (not exchange or not routing_key) and exchange_type == "direct":
            exchange, routing_key = "", qname
        elif exchange is None:
            exchange = queue.exchange.name or self._default_exchange
            routing_key = routing_key or queue.routing_key or self._default_rkey
        declare = options.get("declare")
        if declare is None and queue is not None and not _broadcast(queue):
            declare = [queue]
        # Declared once per batch: kombu would look each one up in its cache per message.
        undeclared = [d for d in declare or () if id(d) not in self._declared]
        retry_policy = options.get("retry_policy")
        policy = dict(self._policy, **retry_policy) if retry_policy else dict(self._policy)
        if not ignore_result:
            self._on_task_call(task_id)
        if self._before.receivers:
            self._before.send(
                sender=name,
                body=body,
                exchange=exchange,
                routing_key=routing_key,
                declare=declare,
                headers=headers,
                properties=properties,
                retry_policy=policy,
            )
        content_type, encoding, payload = self._dumps(body, serializer="json")
        self._tally.out.publish(
            payload,
            exchange=exchange,
            routing_key=routing_key,
            content_type=content_type,
            content_encoding=encoding,
            compression=options.get("compression") or self._compression,
            delivery_mode=delivery_mode,
            declare=undeclared,
            headers=headers,
            timeout=options.get("timeout"),
            confirm_timeout=options.get("confirm_timeout"),
            **properties,
        )
        self._declared.update(id(d) for d in undeclared)
        self._tally.published()
        if self._after.receivers:
            self._after.send(
                sender=name, body=body, headers=headers, exchange=exchange, routing_key=routing_key
            )

    def _on_task_call(self, task_id: str) -> None:
        # A result backend that acts when a task is sent (rpc: declare the reply queue;
        # redis: listen for the result), as Celery's send_task does.
        if self._backend is None:
            self._backend = self.app.backend
        if type(self._backend).on_task_call is not self._backend_base:
            self._backend.on_task_call(self.producer, task_id)


def _broadcast(queue: Any) -> bool:
    from celery.app.amqp import Broadcast

    return isinstance(queue, Broadcast)
