"""The dashboard's exclusion calendars (issue 25): the Calendars page, its add/replace
form and its remove form (the CLI's ``cronstore calendar add|list|remove``).

``GET /calendars`` lists every calendar (what it excludes, its description and the
tasks that exclude it) to anyone who may read; writers also get the forms
(``?name=NAME`` fills the add form with that calendar, to replace it).
``POST /calendar`` adds or replaces (``do=add``) or removes (``do=remove``) one,
through :attr:`Store.calendars <celery_cronstore.store.Store.calendars>` as the
logged-in user from the ``web`` window (:func:`.writes.writer`): the same parser as
every window decides, and a refusal (a bad day, a window without offsets, unknown
holidays, an empty calendar, a bad name, a taken name without "replace", a calendar
still in use without "force") is the store's own message next to its field, status
400 (409 for a calendar in use, 404 for one that does not exist), nothing written.
:class:`~.app.WebApp` has already refused a write without a login, a CSRF token or a
same-origin request, and to a viewer (``ops.WRITES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from celery_cronstore.errors import CronstoreError, StoreUnavailableError
from celery_cronstore.policy.exclusions import Calendar
from celery_cronstore.store.calendars import CalendarInUseError, CalendarNotFoundError
from celery_cronstore.web.context import Ctx, Site
from celery_cronstore.web.writes import writer

__all__ = ["FIELDS", "entry_lines", "field_of", "page", "write"]

#: The add form's fields, given back to the form when the store refuses them.
FIELDS = ("name", "entries", "holidays", "description", "replace")


def page(app: Site, ctx: Ctx, status: int = 200, **extra: Any) -> Response:
    """Show the calendars, the tasks that exclude each, and (to writers) the forms."""
    store = app.store
    found = store.calendars.all()
    with store.engine.connect() as conn:
        users = {name: store.calendars.users(conn, name) for name in found}
    if "values" not in extra:
        chosen = found.get(ctx.request.args.get("name", ""))
        extra["values"] = _values_of(chosen) if chosen is not None else dict.fromkeys(FIELDS, "")
    errors: Mapping[str, str] = extra.pop("errors", {})
    return app.render(
        ctx,
        "calendars.html",
        status,
        calendars=list(found.values()),
        users=users,
        errors={k: app.scrub(v) for k, v in errors.items()},
        **extra,
    )


def write(app: Site, ctx: Ctx) -> Response:
    """Add, replace (``do=add``) or remove (``do=remove``) the calendar of the form."""
    form = ctx.request.form
    act = form.get("do", "")
    store = writer(app, ctx)
    if act == "remove":
        name = form.get("name", "")
        try:
            store.calendars.remove(name, force=form.get("force") == "on")
        except StoreUnavailableError:
            raise
        except CalendarNotFoundError as exc:
            return page(app, ctx, 404, remove_error=app.scrub(str(exc)), removing=name)
        except CalendarInUseError as exc:
            return page(app, ctx, 409, remove_error=app.scrub(str(exc)), removing=name)
        return redirect(ctx.urls.build("calendars", {"done": "removed"}), 303)
    if act != "add":
        return app.plain(400, "unknown action; expected one of add, remove")
    values = {key: form.get(key, "") for key in FIELDS}
    try:
        store.calendars.add(
            values["name"],
            entries=entry_lines(values["entries"]),
            holidays=values["holidays"] or None,
            description=values["description"],
            replace=values["replace"] == "on",
        )
    except StoreUnavailableError:
        raise
    except (CronstoreError, ValueError) as exc:
        return page(app, ctx, 400, values=values, errors={field_of(exc): str(exc)})
    done = "saved" if values["replace"] == "on" else "added"
    return redirect(ctx.urls.build("calendars", {"done": done}), 303)


def entry_lines(text: str) -> list[str]:
    """Return the entries of the form's text: one a line, blank lines left out."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def field_of(exc: Exception) -> str:
    """Return the form field a refusal of ``Calendars.add`` is about (``_form``: none)."""
    named = getattr(exc, "field", None)  # every refusal of the store names its field
    return named if isinstance(named, str) and named in FIELDS else "_form"


def _values_of(found: Calendar) -> dict[str, str]:
    """The add form filled with ``found``, to replace it."""
    lines = [
        a.isoformat() if a == b else f"{a.isoformat()}..{b.isoformat()}" for a, b in found.days
    ]
    lines += [f"{a.isoformat()}..{b.isoformat()}" for a, b in found.windows]
    return {
        "name": found.name,
        "entries": "\n".join(lines),
        "holidays": found.holidays or "",
        "description": found.description,
        "replace": "on",
    }
