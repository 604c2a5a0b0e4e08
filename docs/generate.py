"""Regenerate the parts of the docs that the code can state better than prose.

    python docs/generate.py            # rewrite the generated regions in docs/*.md
    python docs/generate.py --check    # exit 1 if any region is out of date (make docs)
    python docs/generate.py --systemd  # also compare the calendar examples with
                                       # `systemd-analyze calendar` (the reference)

A region is the text between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
in a page. Timer tables come from our own parser, option lists from the real ``--help``
output of ``celery -A <app> cronstore <command>``, the settings table from the fields of
:class:`celery_cronstore.config.Config`. Every fire time is computed after one fixed
instant, so the output does not depend on the day it is generated. The generators live in
``docs/generators/``, one module per subject; this file finds the regions and fills them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))  # the package, when it is not installed

from generators import cli, settings, timers  # noqa: E402  (docs/ is on the path: it runs)

REGION = re.compile(
    r"(?P<head><!-- generated: (?P<name>[a-z0-9-]+) -->\n)"
    r"(?P<body>.*?)(?P<tail><!-- end generated -->)",
    re.DOTALL,
)

GENERATORS: dict[str, Callable[[], str]] = {
    "timer-detect": timers.gen_detect,
    "timer-cli": timers.gen_timer_cli,
    "calendar-examples": timers.gen_calendar,
    "calendar-dst": timers.gen_calendar_dst,
    "cron-examples": timers.gen_cron,
    "cron-macros": timers.gen_macros,
    "cron-dst": timers.gen_cron_dst,
    "interval-examples": timers.gen_interval,
    "once-examples": timers.gen_once,
    "settings": settings.gen_settings,
    "migrations": settings.gen_migrations,
    "migrate-example": cli.gen_migrate_example,
    **cli.cli_generators(),
}


def regions(text: str) -> Iterator[re.Match[str]]:
    return REGION.finditer(text)


def render(text: str, cache: dict[str, str], path: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise SystemExit(f"{path.name}: unknown generated region {name!r}")
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return match["head"] + cache[name] + match["tail"]

    return REGION.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a page is out of date")
    parser.add_argument("--systemd", action="store_true", help="cross-check with systemd")
    options = parser.parse_args(argv)
    cache: dict[str, str] = {}
    stale: list[str] = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        if not any(True for _ in regions(text)):
            continue
        new = render(text, cache, path)
        if new != text:
            stale.append(path.name)
            if not options.check:
                path.write_text(new, encoding="utf-8")
    unused = set(GENERATORS) - set(cache)
    if unused:
        print(f"warning: no page uses {', '.join(sorted(unused))}", file=sys.stderr)
    if options.systemd:
        problems = timers.check_systemd()
        for problem in problems:
            print(f"systemd mismatch: {problem}", file=sys.stderr)
        if problems:
            return 1
        examples = len(timers.CALENDAR) + len(timers.CALENDAR_EXPLICIT)
        print(f"systemd-analyze agrees on {examples} examples")
    if options.check and stale:
        print(
            f"out of date: {', '.join(stale)}; run `python docs/generate.py` and commit",
            file=sys.stderr,
        )
        return 1
    if stale and not options.check:
        print(f"rewrote {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
