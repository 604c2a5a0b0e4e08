"""Hostile text the windows and the store must keep verbatim and render harmless.

Shared by the store's round-trip tests, the dashboard's and the Django admin's.
"""

from __future__ import annotations

#: Text aimed at SQL, format strings, encodings and bidirectional rendering.
HOSTILE = [
    "'; DROP TABLE cronstore_periodic_task; --",
    '" OR 1=1 --',
    "Robert'); DELETE FROM cronstore_fire WHERE ('1'='1",
    "%s %(name)s %% :name ? $1 {0}",
    "back\\slash \\' \\\" \\x00 \\u0000",
    "line\nbreak\ttab\rreturn",
    "emoji 🚀🔥👩‍👩‍👧 and ✓",
    "עברית RTL עם \u202eoverride\u202c and العربية",
    "combining e\u0301 vs \u00e9, zero\u200bwidth",
    "日本語のタスク名",
    "🚀" * 200,  # 200 characters, 800 bytes of UTF-8
    " leading and trailing ",
]

#: Text aimed at HTML and template rendering.
HTML_HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "'><svg onload=alert(1)>",
    "javascript:alert(1)",
    "</title><script>alert(1)</script>",
    "{{ 7*7 }} {% raw %}",
    "&amp; &lt; &#x3c;",
]
