"""One webhook delivery of an alert episode: its JSON body, its signature, the POST.

The body names the task, the episode (id, kind, when it opened, its count), the newest
reason and the event (``open`` or ``resolve``). ``X-Cronstore-Delivery``
(``<episode id>:<event>``) is the same for every attempt of one delivery, so a receiver
that got one twice (it answered after beat's timeout, and beat tried again) can tell.
``X-Cronstore-Signature`` is ``sha256=<hex>``: the HMAC-SHA256 of the body's exact bytes
under ``cronstore_alert_secret`` (none without a secret).

The standard library's ``urllib`` does the POST: one request, no redirect followed (a
redirected POST would turn into a GET and lose the body: a 3xx is a failed delivery),
``cronstore_alert_timeout`` on the connection and on each read.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import urllib.error
import urllib.request
from typing import Any

from celery_cronstore.policy.alerts import Episode
from celery_cronstore.timers.once import format_instant

__all__ = ["DELIVERY_HEADER", "SIGNATURE_HEADER", "DeliveryError", "body", "post", "signature"]

SIGNATURE_HEADER = "X-Cronstore-Signature"
DELIVERY_HEADER = "X-Cronstore-Delivery"
#: Most bytes of a receiver's answer read (then the connection is closed).
_ANSWER_BYTES = 4096


class DeliveryError(Exception):
    """A delivery the receiver did not take (the message says why, without the URL)."""


def body(episode: Episode, event: str) -> bytes:
    """Return the JSON body announcing ``event`` of ``episode`` (keys sorted, compact)."""
    document: dict[str, Any] = {
        "event": event,
        "delivery": f"{episode.id}:{event}",
        "task": {"id": episode.periodic_task_id, "name": episode.name},
        "episode": {
            "id": episode.id,
            "kind": episode.kind,
            "opened_at": format_instant(episode.opened_at),
            "resolved_at": (
                None if episode.resolved_at is None else format_instant(episode.resolved_at)
            ),
            "count": episode.count,
        },
        "reason": episode.reason,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def signature(secret: str, payload: bytes) -> str:
    """Return the ``X-Cronstore-Signature`` value of ``payload`` under ``secret``."""
    digest = hmac.new(secret.encode("utf-8"), payload, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, episode: Episode, event: str, *, secret: str, timeout: float) -> None:
    """POST ``event`` of ``episode`` to ``url``; raise :class:`DeliveryError` unless the
    receiver answered 2xx within ``timeout`` seconds."""
    payload = body(episode, event)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "celery-cronstore",
        DELIVERY_HEADER: f"{episode.id}:{event}",
        "X-Cronstore-Event": event,
    }
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, payload)
    request = urllib.request.Request(url, data=payload, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(_ANSWER_BYTES)
            status = answer.status
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"the receiver answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"no answer: {exc.reason}") from None
    except TimeoutError:
        raise DeliveryError(f"no answer within {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"the connection failed: {type(exc).__name__}: {exc}") from None
    if not 200 <= status < 300:
        raise DeliveryError(f"the receiver answered HTTP {status}")
