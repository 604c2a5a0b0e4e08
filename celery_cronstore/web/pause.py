"""The dashboard's pause and resume (issue 25): the task page's two forms, and which rows
of the task list are paused.

"until" is read as the command line reads ``--until`` (ISO-8601; without an offset in the
task's zone: :func:`~celery_cronstore.policy.backfill.read_instant`). Both writes go
through :meth:`~celery_cronstore.store.Store.pause` and ``resume`` as the logged-in user
(the audit trail's actor, :func:`.writes.writer`), so a refusal (an end not in the
future, a note too long, a task not paused) is the store's own message, shown on the
task page with status 400, and nothing is written. :class:`~.app.WebApp` has already
refused a write without a login, a CSRF token or a same-origin request, and to a viewer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from werkzeug.wrappers import Response

from celery_cronstore.errors import CronstoreError, StoreUnavailableError, TaskNotFoundError
from celery_cronstore.policy.backfill import read_instant
from celery_cronstore.store import Store
from celery_cronstore.web.context import Ctx, Site

__all__ = ["ACTS", "FIELDS", "write"]

#: The task actions this module answers (``POST /task/action``).
ACTS = ("pause", "resume")
#: The pause form's fields, given back to the form when the store refuses them.
FIELDS = ("note", "until", "resume")


def write(app: Site, ctx: Ctx, store: Store, act: str) -> Response:
    """Pause (``act="pause"``) or resume the task named in the form through ``store``."""
    form = ctx.request.form
    name = form.get("name", "")
    try:
        if act == "pause":
            store.pause(name, **_pause_args(app.store, name, form))
        else:
            store.resume(name, mode=form.get("mode") or None)
    except (TaskNotFoundError, StoreUnavailableError):
        raise  # 404 / 503 pages (WebApp.dispatch)
    except (CronstoreError, ValueError) as exc:
        # A refused pause keeps what was typed; otherwise the form shows the current pause.
        given = {"pause_values": {k: form.get(k, "") for k in FIELDS}} if act == "pause" else {}
        return app.page_task(ctx, 400, pause_error=app.scrub(str(exc)), **given)
    return app.back_to_task(ctx, name, "paused" if act == "pause" else "resumed")


def _pause_args(store: Store, name: str, form: Mapping[str, str]) -> dict[str, Any]:
    text = form.get("until", "").strip()
    # As `cronstore pause --until`: an instant without an offset is the task's wall time.
    until = read_instant(text, store.get(name).tz, "until") if text else None
    return {"note": form.get("note", ""), "until": until, "resume": form.get("resume") or "skip"}
