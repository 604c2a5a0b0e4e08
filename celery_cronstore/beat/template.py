"""The fast path to Redis: a message shape built once, each fire filled in.

The fires of one task with one set of options have the same message but for a few
values: the task id (the ``id`` and ``root_id`` headers, the ``correlation_id``
property), kombu's delivery tag, the row's name, arguments (the body and their reprs),
the fire time and interval headers, the time box (a CronTask's depends on the interval
to the next fire) and the expiry. The first such fire goes through
:class:`~celery_cronstore.beat.dispatch.Dispatcher`'s full path, and kombu's own Redis
channel turns it into the ``LPUSH`` of its JSON envelope (routing, queue key with
priority, body encoding). :func:`learn` reads that envelope back and marks where the
per-fire values sit; :meth:`Template.render` joins the fixed text with the next fire's
values. The route comes from Celery's router once per task and option set, not per fire
(the Dispatcher uses templates only when every router routes by task name).

Hand-written because neither Celery nor kombu can build a message from a template; what
kombu writes is reused verbatim rather than reproduced, so the message is kombu's own
(``tests/beat/test_dispatch_brokers.py`` compares templated messages with
``send_task``'s field by field). A message kombu would send with more than one command
(a queue with an expiry), or whose envelope is not the expected shape, gets no template:
each of its fires takes the full path.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

from celery_cronstore.beat.publish import shorten
from celery_cronstore.beat.wire import expiry, protocol2_body
from celery_cronstore.policy.messages import H_FIRE, H_INTERVAL, H_NAME
from celery_cronstore.records import Claim

__all__ = ["READY_MOST", "SLOTS", "Filler", "Ready", "Template", "learn"]

#: Where each per-fire value sits in kombu's envelope: (section, key) pairs. Celery puts
#: the argument reprs in the properties as well as the headers.
SLOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "id": (("headers", "id"),),
    "root_id": (("headers", "root_id"),),
    "correlation_id": (("properties", "correlation_id"),),
    "delivery_tag": (("properties", "delivery_tag"),),
    "body": (("envelope", "body"),),
    "argsrepr": (("headers", "argsrepr"), ("properties", "argsrepr")),
    "kwargsrepr": (("headers", "kwargsrepr"), ("properties", "kwargsrepr")),
    "name": (("headers", "cronstore_name"),),
    "fire_time": (("headers", "cronstore_fire_time"),),
    "interval": (("headers", "cronstore_interval"),),
    "timelimit": (("headers", "timelimit"),),
    "expires": (("headers", "expires"),),
    "expiration": (("properties", "expiration"),),
}
#: Messages rendered ahead that one :class:`Filler` keeps at most (a burst's worth).
READY_MOST = 50_000
#: Slots a message may lack (the rest must be there, or there is no template).
OPTIONAL = frozenset({"expiration", "argsrepr", "kwargsrepr"})

_PREFIX = "@@cronstore-slot:"
#: ``json.dumps`` of a string (ASCII-escaped, as kombu's JSON), without its overhead.
_quote: Any = encode_basestring_ascii


@dataclass(frozen=True)
class Template:
    """One task's Redis message (for one option set) with its per-fire values left out."""

    #: The Redis list the message goes to (the queue, with its priority suffix).
    key: Any
    #: The envelope's JSON text around the slots: ``len(slots) + 1`` pieces.
    pieces: tuple[str, ...]
    #: The slot names, in the order they appear in the text.
    slots: tuple[str, ...]

    def render(self, values: dict[str, Any]) -> str:
        """Return the envelope's JSON text with ``values`` (one per slot) filled in."""
        pieces, out = self.pieces, [self.pieces[0]]
        for slot, piece in zip(self.slots, pieces[1:], strict=True):
            value = values[slot]
            # The values are mostly text: json's own C quoting, as json.dumps would.
            kind = value.__class__
            if kind is str:
                out.append(_quote(value))
            elif value is None:
                out.append("null")
            else:
                out.append(json.dumps(value))
            out.append(piece)
        return "".join(out)


def learn(
    commands: list[tuple[str, tuple[Any, ...]]], own: tuple[str, ...] = ()
) -> Template | None:
    """Return the template of the message kombu buffered as ``commands`` (the Redis
    commands of one publish), or ``None`` when it cannot be templated.

    ``own``: values of that fire alone (its task id, fire time, argument reprs): found
    anywhere but in a slot, they would be sent with every fire, so there is no template.
    """
    if len(commands) != 1 or commands[0][0] != "lpush" or len(commands[0][1]) != 2:
        return None
    key, text = commands[0][1]
    marks: dict[str, str] = {}
    try:
        envelope = json.loads(text)
        for name, places in SLOTS.items():
            for i, (section, field) in enumerate(places):
                part = envelope if section == "envelope" else envelope[section]
                if field not in part:
                    if name in OPTIONAL:
                        continue
                    return None
                mark = f'"{_PREFIX}{name}#{i}@@"'
                part[field] = json.loads(mark)
                marks[mark] = name
        marked = json.dumps(envelope)
    except (TypeError, ValueError, KeyError):
        return None
    order = sorted((marked.index(mark), mark) for mark in marks)
    slots = tuple(marks[mark] for _, mark in order)
    pieces, rest = [], marked
    for _, mark in order:
        before, _, rest = rest.partition(mark)
        pieces.append(before)
    pieces.append(rest)
    leaks = [json.dumps(value) for value in own] + [_PREFIX]
    if any(leak in piece for piece in pieces for leak in leaks):
        return None  # a fire's own value outside the slots, or a mark twice: no guessing
    return Template(key=key, pieces=tuple(pieces), slots=slots)


class Ready(NamedTuple):
    """One fire's message, rendered: the ``LPUSH`` beat sends for it."""

    #: The Redis list it goes to.
    key: Any
    #: The envelope's JSON text.
    text: str
    #: The task id (the result backend is told of it when it is sent).
    task_id: str
    #: Whether the message asks for no result (the backend is then not told).
    ignore_result: bool


class Filler:
    """The templates of one broker connection, by message shape, and the messages of
    fires taken ahead rendered from them before their time (:meth:`ready`), so that a
    burst's fire costs one ``LPUSH`` when it falls due.

    A message is rendered ahead only when nothing in it depends on the moment it is sent:
    a fire with an expiry (its ``expiration`` TTL counts from the send) is rendered when
    it goes. At most :data:`READY_MOST` wait; the sender forgets the rest of a batch once
    it is sent (a fire dropped or put back is rendered again when it goes).
    """

    def __init__(self, app: Any, dumps: Callable[..., Any], argsmax: int, kwargsmax: int) -> None:
        self.app = app
        self._dumps = dumps
        self._argsmax = argsmax
        self._kwargsmax = kwargsmax
        #: By message shape (the Dispatcher's): its template.
        self.templates: dict[Any, Template] = {}
        #: By task id: the message of a fire taken ahead, rendered.
        self._ready: dict[str, Ready] = {}

    def fill(
        self,
        claim: Claim,
        shape: Any,
        options: dict[str, Any],
        channel: Any,
        check: Callable[..., Any] | None,
        ahead: bool = False,
    ) -> Ready | None:
        """Return ``claim``'s message from its shape's template (``None``: no template, or
        ``ahead`` and the message has an expiry). Raises what the task's signature
        check (``check``, ``Task.typing``) raises for its arguments."""
        template = self.templates.get(shape)
        if template is None:
            return None
        expires = options.get("expires")
        if (expires is not None) != ("expiration" in template.slots):
            return None
        if ahead and expires is not None:
            return None
        task_id, args, kwargs = claim.task_id, claim.args, claim.kwargs
        if check is not None:  # Task.typing: the call must fit the signature
            check(*(args or ()), **(kwargs or {}))
        _, _, payload = self._dumps(protocol2_body(args, kwargs), serializer="json")
        body, _ = channel.encode_body(payload, channel.body_encoding)
        headers = options["headers"]
        values: dict[str, Any] = {
            "id": task_id,
            "root_id": task_id,
            "correlation_id": task_id,
            "delivery_tag": str(uuid.uuid4()),  # kombu's: a fresh uuid4 per publish
            "body": body,
            "argsrepr": shorten(repr(args), self._argsmax),
            "kwargsrepr": shorten(repr(kwargs), self._kwargsmax),
            "name": headers[H_NAME],
            "fire_time": headers[H_FIRE],
            "interval": headers[H_INTERVAL],
            "timelimit": [options.get("time_limit"), options.get("soft_time_limit")],
            "expires": None,
        }
        if expires is not None:
            values["expires"], ttl = expiry(self.app, task_id, expires)
            values["expiration"] = str(int(ttl * 1000))  # as kombu's Producer.publish
        text = template.render(values)
        return Ready(template.key, text, task_id, bool(options.get("ignore_result")))

    @property
    def full(self) -> bool:
        """Whether no more messages may be rendered ahead."""
        return len(self._ready) >= READY_MOST

    def keep(self, ready: Ready) -> None:
        """Keep a message rendered ahead until its fire is sent."""
        self._ready[ready.task_id] = ready

    def take(self, task_id: str) -> Ready | None:
        """Return (and forget) the message rendered ahead for ``task_id``, if any."""
        return self._ready.pop(task_id, None)

    def forget(self, task_ids: Iterable[str]) -> None:
        """Forget the messages rendered ahead for ``task_ids`` (sent, dropped or put back)."""
        if self._ready:
            for task_id in task_ids:
                self._ready.pop(task_id, None)
