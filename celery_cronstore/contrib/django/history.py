"""The fire history in the admin: the change page's recent fires and the ledger view.

Both read through :func:`~.read.fire_page` (one page along an index, newest first).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html_join

from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.formatting import display, html, local
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.store.read import fire_page

__all__ = ["HISTORY_PAGE", "FireHistoryAdmin"]

HISTORY_PAGE = 50


class FireHistoryAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    """The fire-history half of the periodic task admin (read-only)."""

    @display(description="recent fires")
    def recent_fires(self, obj: PeriodicTask) -> str:
        with conf.get_store().engine.connect() as conn:
            page = fire_page(conn, obj.pk, per_page=10)
        url = reverse("admin:cronstore_periodictask_fires", args=[obj.pk])
        if not page.rows:
            return "no fires yet"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (local(f.fire_time, obj.tz), f.state, f.node or f.claimed_by or "-", f.reason or "")
                for f in page.rows
            ),
        )
        return html(
            "<table><thead><tr><th>fire time</th><th>state</th><th>node</th><th>reason</th>"
            "</tr></thead><tbody>{}</tbody></table><p><a href='{}'>All fires, newest first</a>"
            "</p>",
            rows,
            url,
        )

    def get_urls(self) -> list[Any]:
        fires = path(
            "<path:object_id>/fires/",
            self.admin_site.admin_view(self.fires_view),
            name="cronstore_periodictask_fires",
        )
        return [fires, *super().get_urls()]

    def fires_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Show a task's ledger, newest fire first, one page at a time (read-only)."""
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404(f"no periodic task with id {object_id!r}")
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        try:
            number = max(1, int(request.GET.get("p", "1")))
        except ValueError:
            number = 1
        with conf.get_store().engine.connect() as conn:
            page = fire_page(conn, obj.pk, page=number, per_page=HISTORY_PAGE)
        rows = [
            {
                "fire": f,
                "fire_time": local(f.fire_time, obj.tz),
                "fire_until": local(f.fire_until, obj.tz) if f.fire_until else "",
                "published": local(f.published_at, obj.tz),
                "started": local(f.started_at, obj.tz),
                "finished": local(f.finished_at, obj.tz),
                "lateness": "-" if f.lateness is None else f"{f.lateness:.3f} s",
            }
            for f in page.rows
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Fires of {obj.name}",
            "subtitle": None,
            "opts": self.opts,
            "original": obj,
            "page": page,
            "rows": rows,
            "zone": obj.tz,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/cronstore/periodictask/fires.html", context)
