"""The admin list's filters: each value is one :class:`~.read.TaskQuery` field.

The change list reads through the read model (:meth:`ChoiceFilter.query_value`); the ORM
half (``queryset``) only serves the actions, which select rows by the same filters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.db import connections
from django.http import HttpRequest

from celery_cronstore.contrib.django import conf
from celery_cronstore.timers import KINDS

__all__ = ["ChoiceFilter", "EnabledFilter", "ErrorFilter", "KindFilter", "OwnerTypeFilter"]

#: How many distinct owner types the owner filter offers.
OWNER_TYPES = 50

# Distinct owner types by a skip scan of the (owner_type, owner_id) index: one seek per
# type, instead of SELECT DISTINCT over every row. A constant: nothing is interpolated.
_OWNER_TYPES_SQL = """
WITH RECURSIVE t(v) AS (
    SELECT MIN(owner_type) FROM cronstore_periodic_task
    UNION ALL
    SELECT (SELECT MIN(owner_type) FROM cronstore_periodic_task WHERE owner_type > t.v)
    FROM t WHERE t.v IS NOT NULL
)
SELECT v FROM t WHERE v IS NOT NULL LIMIT %s
"""


class ChoiceFilter(admin.SimpleListFilter):  # type: ignore[misc]  # Django ships no types
    """A filter whose value is one TaskQuery field; its ORM half serves the actions."""

    options: tuple[tuple[str, str], ...] = ()

    def lookups(self, request: HttpRequest, model_admin: Any) -> Iterable[tuple[str, str]]:
        return self.options

    def query_value(self) -> Any:
        """Return the value for :class:`TaskQuery` (``None``: not filtered)."""
        value = self.value()
        return {"yes": True, "no": False}.get(value) if value is not None else None


class EnabledFilter(ChoiceFilter):
    title = "enabled"
    parameter_name = "enabled"
    options = (("yes", "Yes"), ("no", "No"))

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.query_value()
        return queryset if value is None else queryset.filter(enabled=value)


class ErrorFilter(ChoiceFilter):
    title = "in error"
    parameter_name = "error"
    options = (("yes", "Yes"), ("no", "No"))

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.query_value()
        return queryset if value is None else queryset.filter(error__isnull=not value)


class KindFilter(ChoiceFilter):
    title = "timer kind"
    parameter_name = "kind"
    options = tuple((kind, kind) for kind in KINDS)

    def query_value(self) -> Any:
        return self.value() or None

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset.filter(timer_kind=value) if value else queryset


class OwnerTypeFilter(ChoiceFilter):
    title = "owner type"
    parameter_name = "owner_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Iterable[tuple[str, str]]:
        with connections[conf.database()].cursor() as cursor:
            cursor.execute(_OWNER_TYPES_SQL, [OWNER_TYPES])
            return [(row[0], row[0]) for row in cursor.fetchall()]

    def query_value(self) -> Any:
        return self.value() or None

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset.filter(owner_type=value) if value else queryset
