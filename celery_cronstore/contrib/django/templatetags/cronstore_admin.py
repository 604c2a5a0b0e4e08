"""Template filters of the admin's list pages."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


def cronstore_page(changelist: Any, step: int) -> str:
    """Return the query string of the page ``step`` pages away from the current one."""
    return str(changelist.page_url(max(1, changelist.page_num + int(step))))


register.filter("cronstore_page", cronstore_page)
