"""The admin's change list: one page read through :func:`~.read.task_page`, no counting.

Its filters, search and sort become one :class:`~.read.TaskQuery`, so a page costs the
same with 1,000 or 1,000,000 tasks (``LIMIT per_page + 1`` along an index, no ``COUNT(*)``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.paginator import Paginator
from django.http import HttpRequest

from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.filters import ChoiceFilter
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.store.read import MAX_SEARCH, TaskQuery, TaskRow, task_page

__all__ = ["SORTS", "TaskChangeList"]

#: list_display column -> read-model sort key (each backed by an index).
SORTS = {"name": "name", "task": "task", "owner": "owner", "next_fire": "next"}


class _PageOnly(Paginator):  # type: ignore[misc]  # Django ships no types
    """A paginator over one fetched page: the count is what is known, never a COUNT(*)."""

    def __init__(self, rows: list[Any], page: int, per_page: int, has_next: bool) -> None:
        super().__init__(rows, per_page)
        self.known = (page - 1) * per_page + len(rows) + (1 if has_next else 0)

    @property
    def count(self) -> int:
        return self.known


def _to_model(row: TaskRow) -> PeriodicTask:
    task = PeriodicTask(
        id=row.id,
        name=row.name,
        task=row.task,
        timer_kind=row.timer_kind,
        timer=row.timer,
        tz=row.tz,
        enabled=row.enabled,
        owner_type=row.owner_type,
        owner_id=row.owner_id,
        next_run=row.next_run,
        last_fire=row.last_fire,
        error=row.error,
        paused_at=row.paused_at,
        paused_by=row.paused_by,
        paused_note=row.paused_note,
        paused_until=row.paused_until,
        paused_resume=row.paused_resume,
    )
    task.last_state = row.last_state
    return task


class TaskChangeList(ChangeList):  # type: ignore[misc]  # Django ships no types
    """The change list, one page read through :func:`~.read.task_page` (no counting)."""

    has_next = False

    def task_query(self) -> TaskQuery:
        """Return the read-model query for this request's filters, search, sort and page."""
        filters = {
            spec.parameter_name: spec.query_value()
            for spec in self.filter_specs
            if isinstance(spec, ChoiceFilter)
        }
        sort, descending = "name", False
        for index, direction in self.get_ordering_field_columns().items():
            column = self.list_display[index] if isinstance(index, int) else None
            if column in SORTS:
                sort, descending = SORTS[column], direction == "desc"
                break
        return TaskQuery(
            search=(self.query or "")[:MAX_SEARCH],
            enabled=filters.get("enabled"),
            in_error=filters.get("error"),
            owner_type=filters.get("owner_type"),
            kind=filters.get("kind"),
            sort=sort,
            descending=descending,
            page=max(1, self.page_num),
            per_page=self.list_per_page,
        )

    def get_results(self, request: HttpRequest) -> None:
        query = self.task_query()
        with conf.get_store().engine.connect() as conn:
            page = task_page(conn, query)
        rows = [_to_model(row) for row in page.rows]
        self.has_next = page.has_next
        self.result_list = rows
        # No COUNT(*): "select all N" is never offered (N would be a guess), and the
        # pagination template shows previous / next instead of a page count.
        self.result_count = len(rows)
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.can_show_all = False
        self.multi_page = page.has_next or query.page > 1
        self.paginator = _PageOnly(rows, query.page, query.per_page, page.has_next)

    def page_url(self, page: int) -> str:
        """Return the query string of another page of this list."""
        return str(self.get_query_string({PAGE_VAR: page}))
