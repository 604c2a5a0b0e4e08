"""Who may use the dashboard: a token or basic-auth users, signed sessions, CSRF tokens.

* A request authenticates with ``Authorization: Bearer <token>``, ``Authorization: Basic``
  (a configured user) or the session cookie that ``/login`` sets after checking either.
* Every write (POST) needs an identity and, unless it came with a bearer token (which a
  browser never sends by itself), the CSRF token of that identity in the form.
* With no credentials configured the dashboard is read-only: nobody can write.
* Each user has a role: an ``operator`` (the default, and the token) may write, a
  ``viewer`` sees every page and may write nothing. The role is looked up in the
  credentials at every request, never carried in the cookie: changing a user's role (or
  removing the user) takes effect at once, and a session cannot claim a role.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "OPERATOR",
    "ROLES",
    "TOKEN_USER",
    "VIEWER",
    "Credentials",
    "Identity",
    "Signer",
    "parse_accounts",
    "parse_users",
]

SESSION_COOKIE = "cronstore_session"
#: May read and write.
OPERATOR = "operator"
#: May read every page and write nothing.
VIEWER = "viewer"
ROLES = (OPERATOR, VIEWER)
#: The name a token login goes by (in pages and the audit trail); no user may take it.
TOKEN_USER = "token"


@dataclass(frozen=True)
class Credentials:
    """The secrets that let someone in: one token and/or ``{user: password}``."""

    token: str | None = None
    users: Mapping[str, str] = field(default_factory=dict)
    #: ``{user: role}`` (``operator`` or ``viewer``); a user not named is an operator.
    roles: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 16:
            raise ValueError("the web token must be at least 16 characters long")
        for user, password in self.users.items():
            if not user or ":" in user or not password:
                raise ValueError(f"bad web user {user!r}: need a name without ':' and a password")
            if user == TOKEN_USER:
                raise ValueError(
                    f"bad web user {user!r}: that name stands for the token login; pick another"
                )
        for user, role in self.roles.items():
            if user not in self.users:
                raise ValueError(f"a role is given for {user!r}, who is not a web user")
            if role not in ROLES:
                raise ValueError(
                    f"bad role {role!r} for web user {user!r}: give one of {', '.join(ROLES)}"
                )

    @property
    def configured(self) -> bool:
        """Whether anyone can log in at all (otherwise the dashboard is read-only)."""
        return self.token is not None or bool(self.users)

    def check_token(self, token: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            token.encode("utf-8"), self.token.encode("utf-8")
        )

    def check_user(self, user: str, password: str) -> bool:
        expected = self.users.get(user)
        # Compare against something even for an unknown user (no timing hint).
        return hmac.compare_digest(
            password.encode("utf-8"), (expected or "\x00" * 16).encode("utf-8")
        ) and (expected is not None)

    def role_of(self, name: str) -> str | None:
        """Return the role of a logged-in ``name`` (the token: operator), or ``None``
        when no such user is configured (any more): that session is not valid."""
        if name == TOKEN_USER and self.token is not None:
            return OPERATOR
        if name in self.users:
            return self.roles.get(name, OPERATOR)
        return None

    def secrets(self) -> list[str]:
        """Every secret here, for scrubbing text shown in a page."""
        return [s for s in (self.token, *self.users.values()) if s]


def parse_users(text: str) -> dict[str, str]:
    """Parse ``user:password[:role][,...]`` into ``{user: password}`` (roles dropped)."""
    return parse_accounts(text)[0]


def parse_accounts(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Parse ``user:password[:role][,user:password[:role]...]`` (``--users``,
    ``CRONSTORE_WEB_USERS``) into ``({user: password}, {user: role})``.

    A role is ``operator`` (the default) or ``viewer``. The password runs to the last
    ``:``, and what follows is the role if it names one: a password that itself ends in
    ``:viewer`` or ``:operator`` is written with its role after it
    (``ann:pw:viewer:operator``).
    """
    users: dict[str, str] = {}
    roles: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        user, sep, password = item.partition(":")
        head, colon, tail = password.rpartition(":")
        if colon and tail in ROLES:
            password, roles[user] = head, tail
        elif colon and tail.lower() in ROLES:
            raise ValueError(f"web user {user!r}: roles are lower case ({', '.join(ROLES)})")
        if not sep or not user or not password:
            raise ValueError(
                "web users must look like user:password[:role][,user:password[:role]] "
                f"(role: {' or '.join(ROLES)})"
            )
        users[user] = password
    return users, roles


@dataclass(frozen=True)
class Identity:
    """Who made a request and how: ``via`` is ``bearer``, ``basic`` or ``session``."""

    name: str
    via: str
    #: What the CSRF token is bound to (the session's nonce, or the basic-auth user).
    binding: str
    #: ``operator`` or ``viewer`` (:meth:`Credentials.role_of`, read at each request).
    role: str = OPERATOR

    @property
    def may_write(self) -> bool:
        """Whether this identity may change anything (an operator)."""
        return self.role == OPERATOR


class Signer:
    """HMAC-signed session cookies and CSRF tokens under one secret key."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else secrets.token_bytes(32)

    def _mac(self, purpose: str, value: str) -> str:
        digest = hmac.new(self.key, f"{purpose}|{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def session(self, name: str) -> str:
        """Return a new session cookie value for ``name`` (a fresh nonce each login)."""
        nonce = secrets.token_urlsafe(16)
        encoded = base64.urlsafe_b64encode(name.encode("utf-8")).decode("ascii")
        return f"{encoded}.{nonce}.{self._mac('session', f'{encoded}.{nonce}')}"

    def read_session(self, cookie: str) -> Identity | None:
        """Return the identity a cookie value stands for, or ``None`` if forged or garbled."""
        encoded, _, rest = cookie.partition(".")
        nonce, _, mac = rest.partition(".")
        if not (encoded and nonce and mac):
            return None
        if not hmac.compare_digest(mac, self._mac("session", f"{encoded}.{nonce}")):
            return None
        try:
            name = base64.urlsafe_b64decode(encoded.encode("ascii")).decode("utf-8")
        except (ValueError, binascii.Error, UnicodeError):
            return None
        return Identity(name, "session", f"session:{nonce}")

    def csrf(self, identity: Identity) -> str:
        """Return the CSRF token of ``identity`` (forms carry it; writes must echo it)."""
        return self._mac("csrf", identity.binding)

    def check_csrf(self, identity: Identity, token: str) -> bool:
        return hmac.compare_digest(token.encode("utf-8"), self.csrf(identity).encode("utf-8"))


def from_header(header: str, credentials: Credentials) -> Identity | None:
    """Return the identity an ``Authorization`` header proves, or ``None``."""
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and credentials.check_token(value):
        return Identity(TOKEN_USER, "bearer", "bearer")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (ValueError, binascii.Error, UnicodeError):
            return None
        user, sep, password = decoded.partition(":")
        if sep and credentials.check_user(user, password):
            return Identity(user, "basic", f"basic:{user}")
    return None
