"""Keeping passwords out of logs, banners and messages: one place for beat and the CLI."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["app_passwords", "scrub"]

#: ``scheme://user:password@`` in any text (exception messages, driver errors).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]*@")
#: ``password=...`` in libpq-style connection strings and driver messages.
_KEY_PASSWORD = re.compile(r"(?i)(?P<head>\b(?:password|passwd|pwd)\s*[=:]\s*)[^\s,;)'\"]+")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` without passwords: in URLs, ``password=`` pairs and known secrets."""
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    text = _KEY_PASSWORD.sub(r"\g<head>***", text)
    for secret in secrets:
        if len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


def app_passwords(app: Any, store_url: str | None = None) -> list[str]:
    """Every password in the app's store, broker and result backend URLs.

    ``store_url`` is the store's URL when it is not (only) ``app.conf.cronstore_url``.
    """
    conf = app.conf
    found: list[str] = []
    for value in (
        store_url or conf.get("cronstore_url"),
        conf.get("broker_url"),
        conf.get("result_backend"),
    ):
        try:
            password = make_url(value).password if isinstance(value, str) else None
        except Exception:  # not an SQLAlchemy URL (amqp://...): scrub()'s patterns cover it
            password = None
        if password:
            found.append(str(password))
    return found
