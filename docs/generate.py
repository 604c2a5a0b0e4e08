"""Regenerate the parts of the docs that the code can state better than prose.

    python docs/generate.py            # rewrite the generated regions in docs/*.md
    python docs/generate.py --check    # exit 1 if any region is out of date (make docs)
    python docs/generate.py --systemd  # also compare the calendar examples with
                                       # `systemd-analyze calendar` (the reference)

A region is the text between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
in a page. Timer tables come from our own parser, option lists from the real ``--help``
output of ``celery -A <app> cronstore <command>``, the settings table from
:class:`celery_cronstore.config.Config`. Every fire time is computed after one fixed
instant (:data:`AFTER`), so the output does not depend on the day it is generated.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))

from celery_cronstore.config import Config  # noqa: E402
from celery_cronstore.timers import Timer, detect_kind, parse_timer  # noqa: E402
from celery_cronstore.timers.cron import MACROS  # noqa: E402

UTC = timezone.utc
#: Every "next fire" in the docs is computed after this instant (a Friday, two days
#: before Europe's spring-forward of 2026-03-29).
AFTER = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
BERLIN = "Europe/Berlin"
REGION = re.compile(
    r"(?P<head><!-- generated: (?P<name>[a-z0-9-]+) -->\n)"
    r"(?P<body>.*?)(?P<tail><!-- end generated -->)",
    re.DOTALL,
)
CLI_COMMANDS = (
    "list",
    "show",
    "add",
    "edit",
    "enable",
    "disable",
    "remove",
    "remove-owned-by",
    "next",
    "history",
    "run-now",
    "validate",
    "migrate",
    "health",
)


# -- formatting ---------------------------------------------------------------------------


def zone_of(timer: Timer) -> tzinfo:
    return UTC if timer.tz_name == "UTC" else ZoneInfo(timer.tz_name)


def local(instant: datetime, zone: tzinfo) -> str:
    """``Mon 2026-03-30 09:30:00 CEST``: the fire as the timer's zone shows it."""
    moment = instant.astimezone(zone)
    text = moment.strftime("%a %Y-%m-%d %H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return f"{text} {moment.strftime('%Z')}"


def fires(timer: Timer, after: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    moment: datetime | None = after
    while len(found) < count:
        moment = timer.next_after(moment) if moment is not None else None
        if moment is None:
            break
        found.append(moment)
    return found


def fire_cell(timer: Timer, after: datetime, count: int) -> str:
    times = fires(timer, after, count)
    if not times:
        return "(never: no fire after that)"
    return "<br>".join(local(t, zone_of(timer)) for t in times)


def code(text: str) -> str:
    """A table cell holding ``text`` as code (pipes escaped for the table)."""
    return "`" + text.replace("|", "\\|") + "`"


def prose(text: str) -> str:
    """A table cell holding ``text`` as prose (Markdown's ``*``, ``_`` and ``|`` escaped)."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("|", "\\|")


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def after_note(after: datetime = AFTER) -> str:
    return f"Fire times are computed after {local(after, UTC)} and shown in the timer's zone.\n"


# -- timer tables ---------------------------------------------------------------------------

DETECT = [
    "every 90m",
    "every 1 hour 30 minutes",
    "@daily",
    "2026-12-01T09:00:00Z",
    "2026-12-01T09:00",
    "*/5 * * * *",
    "0 9 * * mon-fri 30",
    "*:0/5",
    "Mon..Fri *-*-* 09:30",
    "daily",
    "2026-12-01 09:00",
]

CALENDAR: list[tuple[str, str | None]] = [
    ("*:0/5", None),
    ("minutely", None),
    ("hourly", None),
    ("daily", None),
    ("weekly", None),
    ("monthly", None),
    ("quarterly", None),
    ("yearly", None),
    ("Mon..Fri *-*-* 09:30", None),
    ("Mon..Fri *-*-* 09:30 Europe/Berlin", None),
    ("mon..fri 9:0/15", None),
    ("Sat,Sun 10:00", BERLIN),
    ("*-*-* 9..17:00", None),
    ("00/2:00", None),
    ("*-*-* *:*:0/15", None),
    ("*-*-01 06:00", None),
    ("*-*~01", None),
    ("*-*~01..03 18:00", None),
    ("Fri *-*~07/1 17:00", None),
    ("Mon *-*-1..7 10:00", None),
    ("*-02-29 12:00", None),
    ("*-1/3-1", None),
    ("2026-12-24 18:00 UTC", None),
    ("12:00:00.5", None),
    ("Mon,Wed,Fri 08:00,20:00", None),
    ("Mon,Wed,Fri 08,20:00", None),
    ("Wed..Sat,Tue 12-10-15 1:2:3", None),
]
#: ``@EPOCH`` starts with ``@`` and would be detected as a cron macro: kind is explicit.
CALENDAR_EXPLICIT: list[tuple[str, str | None]] = [("@1800000000", None)]

CRON = [
    "*/5 * * * *",
    "0 * * * *",
    "30 9 * * mon-fri",
    "30 9 * * 1-5",
    "0 9,18 * * *",
    "0 0 1 * *",
    "0 0 1,15 * 5",
    "*/15 9-17 * * 1-5",
    "0 22-2 * * *",
    "5/15 * * * *",
    "0 12 * jan,jul sun",
    "0 9 * * * 30",
    "* * * * * */10",
    "*/10 * * * * *",
]

INTERVAL: list[tuple[str, str | None]] = [
    ("every 30s", None),
    ("every 5m", None),
    ("every 90m", None),
    ("every 1 hour 30 minutes", None),
    ("every 14d", None),
    ("every 1d", BERLIN),
    ("every 1d from 2026-03-27T09:00", BERLIN),
    ("every 2h from 2026-01-01T00:30:00Z", None),
]

ONCE: list[tuple[str, str | None]] = [
    ("2026-12-01T09:00:00Z", None),
    ("2026-12-01T09:00", BERLIN),
    ("2026-12-01T09:00:00+05:30", None),
    ("2026-03-27T12:00:00.250Z", None),
    ("2026-01-01T00:00Z", None),
]

CRON_DST = [
    ("30 2 * * *", datetime(2026, 3, 27, 12, tzinfo=UTC), 3, "spring: 02:30 does not exist"),
    ("*/15 2 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC), 3, "spring: all of 02:xx missing"),
    ("30 * * * *", datetime(2026, 3, 29, 0, tzinfo=UTC), 3, "spring: hour field is `*`"),
    ("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: 02:30 happens twice"),
    ("0,30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: restricted hour"),
    ("*/30 * * * *", datetime(2026, 10, 24, 23, 45, tzinfo=UTC), 5, "autumn: hour field is `*`"),
]

CALENDAR_DST = [
    ("*-*-* 02:30", datetime(2026, 3, 27, 12, tzinfo=UTC), 3, "spring: 02:30 does not exist"),
    ("*:0/30", datetime(2026, 3, 29, 0, 15, tzinfo=UTC), 3, "spring: 02:xx does not exist"),
    ("*-*-* 02:30", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: 02:30 happens twice"),
    ("*:0/30", datetime(2026, 10, 24, 23, 45, tzinfo=UTC), 5, "autumn: 02:xx happens twice"),
]


def gen_detect() -> str:
    rows = []
    for expression in DETECT:
        timer = parse_timer(expression)
        rows.append([code(expression), detect_kind(expression), code(str(timer))])
    return table(["expression", "detected kind", "canonical form"], rows)


def _calendar_rows(items: list[tuple[str, str | None]], kind: str | None) -> list[list[str]]:
    rows = []
    for expression, tz in items:
        timer = parse_timer(expression, kind=kind, tz=tz)
        shown = code(expression) + (f" (tz {tz})" if tz else "")
        rows.append([shown, code(str(timer)), prose(timer.describe()), fire_cell(timer, AFTER, 2)])
    return rows


def gen_calendar() -> str:
    rows = _calendar_rows(CALENDAR, None) + _calendar_rows(CALENDAR_EXPLICIT, "calendar")
    rows[-1][0] += ' (`kind="calendar"`)'
    headers = ["expression", "normalized form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, rows)


def gen_cron() -> str:
    rows = []
    for expression in CRON:
        timer = parse_timer(expression, kind="cron")
        rows.append(
            [
                code(expression),
                code(str(timer)),
                prose(timer.describe()),
                fire_cell(timer, AFTER, 2),
            ]
        )
    headers = ["expression", "canonical form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, rows)


def gen_macros() -> str:
    rows = []
    for macro, expansion in MACROS.items():
        timer = parse_timer(macro)
        rows.append([code(macro), code(expansion), prose(timer.describe())])
    rows.append([code("@reboot"), "refused", "no meaning for a periodic scheduler"])
    return table(["macro", "same as", "description"], rows)


def _dst_rows(items: list[tuple[str, datetime, int, str]], kind: str) -> list[list[str]]:
    zone = ZoneInfo(BERLIN)
    rows = []
    for expression, after, count, case in items:
        timer = parse_timer(expression, kind=kind, tz=BERLIN)
        times = ", ".join(
            t.astimezone(zone).strftime("%m-%d %H:%M %Z") for t in fires(timer, after, count)
        )
        rows.append([code(expression), case, local(after, zone), times])
    return rows


def gen_cron_dst() -> str:
    headers = ["expression (Europe/Berlin)", "case", "after", "fires (local)"]
    return table(headers, _dst_rows(CRON_DST, "cron"))


def gen_calendar_dst() -> str:
    headers = ["expression (Europe/Berlin)", "case", "after", "fires (local)"]
    return table(headers, _dst_rows(CALENDAR_DST, "calendar"))


def _simple_rows(items: list[tuple[str, str | None]], kind: str) -> list[list[str]]:
    rows = []
    for expression, tz in items:
        timer = parse_timer(expression, kind=kind, tz=tz)
        rows.append(
            [
                code(expression),
                tz or "UTC",
                code(str(timer)),
                prose(timer.describe()),
                fire_cell(timer, AFTER, 2),
            ]
        )
    return rows


def gen_interval() -> str:
    headers = ["expression", "tz", "canonical form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, _simple_rows(INTERVAL, "interval"))


def gen_once() -> str:
    headers = ["expression", "tz", "canonical form", "description", "next fire"]
    rows = _simple_rows(ONCE, "once")
    return after_note() + "\n" + table(headers, rows)


def gen_timer_cli() -> str:
    argv = [
        "Mon..Fri *-*-* 09:30",
        "--tz",
        BERLIN,
        "-n",
        "3",
        "--after",
        AFTER.strftime("%Y-%m-%dT%H:%MZ"),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "celery_cronstore.timers", *argv],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    shown = " ".join(f"'{a}'" if " " in a else a for a in argv)
    return f"```console\n$ python -m celery_cronstore.timers {shown}\n{out}```\n"


# -- settings -------------------------------------------------------------------------------


def _setting_comments() -> dict[str, str]:
    """The ``#:`` comment above each Config field, from the source."""
    source = (ROOT / "celery_cronstore" / "config.py").read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Config":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    text: list[str] = []
                    index = item.lineno - 2
                    while index >= 0 and lines[index].strip().startswith("#:"):
                        text.insert(0, lines[index].strip()[2:].strip())
                        index -= 1
                    found[item.target.id] = " ".join(text)
    return found


def gen_settings() -> str:
    comments = _setting_comments()
    rows = []
    for item in dataclasses.fields(Config):
        if item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        else:
            default = item.default
        rows.append(
            [
                f"[`cronstore_{item.name}`](#cronstore_{item.name})",
                code(str(item.type)),
                code(repr(default)),
                comments.get(item.name, "").replace("``", "`"),
            ]
        )
    return table(["setting", "type", "default", "meaning"], rows)


# -- migrations -----------------------------------------------------------------------------


def gen_migrations() -> str:
    """The revisions this release ships, oldest first, with their docstring's first line."""
    from alembic.script import ScriptDirectory

    from celery_cronstore.store import migrate

    scripts = list(ScriptDirectory.from_config(migrate._config()).walk_revisions())
    rows = []
    for script in reversed(scripts):
        summary = (script.doc or "").strip().splitlines()[0] if script.doc else ""
        revises = script.down_revision
        shown = ", ".join(revises) if isinstance(revises, (list, tuple)) else revises or "-"
        rows.append([code(script.revision), code(shown), prose(summary)])
    return table(["revision", "revises", "what it does"], rows)


def gen_migrate_example() -> str:
    """Real runs on a scratch SQLite file: beat and the CLI before and after ``migrate``."""
    from celery_cronstore.store import Store
    from celery_cronstore.store.migrate import head_revision, upgrade

    with tempfile.TemporaryDirectory(prefix="cronstore-docs-") as scratch:
        Path(scratch, "docs_app.py").write_text(
            "from celery import Celery\n\n"
            "app = Celery('app', broker='memory://')\n"
            "app.conf.cronstore_url = 'sqlite:///cronstore.sqlite'\n"
            "app.conf.cronstore_auto_migrate_sqlite = False\n",
            encoding="utf-8",
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([scratch, str(ROOT)]))
        env.pop("CELERY_APP", None)
        shown: list[str] = []

        def run(*command: str, beat: bool = False) -> None:
            module = "celery" if beat else "celery_cronstore.cli"
            argv = [sys.executable, "-m", module, "-A", "docs_app", *command]
            result = subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=scratch, timeout=60
            )
            shown.append(f"$ celery -A proj {' '.join(command)}")
            if beat:  # its banner is not the point; its log lines lose their timestamps
                lines = [
                    re.sub(r"^\[[^\]]*?: ", "[", line)
                    for line in result.stderr.splitlines()
                    if "cronstore" in line and "->" not in line
                ]
                shown.extend(lines)
            else:
                shown.append((result.stdout + result.stderr).rstrip())
            if result.returncode:
                shown.append(f"$ echo $?\n{result.returncode}")

        run("beat", "-S", "cronstore", beat=True)
        run("cronstore", "list")
        first = gen_first_revision()
        if first != head_revision():  # show the "out of date" message too
            store = Store(f"sqlite:///{Path(scratch, 'cronstore.sqlite')}")
            upgrade(store.engine, first)
            store.close()
            shown.append(f"# ... an older release created the tables (revision {first})")
            run("cronstore", "list")
        run("cronstore", "migrate")
        run("cronstore", "migrate")
        run("cronstore", "list")
    body = "\n".join(line for line in shown if line)
    return f"```console\n{body}\n```\n"


def gen_first_revision() -> str:
    from alembic.script import ScriptDirectory

    from celery_cronstore.store import migrate

    return list(ScriptDirectory.from_config(migrate._config()).walk_revisions())[-1].revision


# -- the command line -----------------------------------------------------------------------


def _help(app_dir: str, *command: str) -> str:
    env = dict(os.environ, COLUMNS="80", PYTHONPATH=os.pathsep.join([app_dir, str(ROOT)]))
    env.pop("CELERY_APP", None)
    argv = ["-m", "celery_cronstore.cli", "-A", "docs_app", "cronstore", *command, "--help"]
    result = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=app_dir,
    )
    return result.stdout


def cli_generators() -> dict[str, Callable[[], str]]:
    holder: dict[str, str] = {}

    def app_dir() -> str:
        if "dir" not in holder:
            path = tempfile.mkdtemp(prefix="cronstore-docs-")
            Path(path, "docs_app.py").write_text(
                "from celery import Celery\n\napp = Celery('app')\n", encoding="utf-8"
            )
            holder["dir"] = path
        return holder["dir"]

    def one(*command: str) -> Callable[[], str]:
        def make() -> str:
            text = _help(app_dir(), *command)
            shown = " ".join(["celery -A proj cronstore", *command, "--help"])
            return f"```console\n$ {shown}\n{text}```\n"

        return make

    generators = {"cli-group": one()}
    for command in CLI_COMMANDS:
        generators[f"cli-{command}"] = one(command)
    return generators


GENERATORS: dict[str, Callable[[], str]] = {
    "timer-detect": gen_detect,
    "timer-cli": gen_timer_cli,
    "calendar-examples": gen_calendar,
    "calendar-dst": gen_calendar_dst,
    "cron-examples": gen_cron,
    "cron-macros": gen_macros,
    "cron-dst": gen_cron_dst,
    "interval-examples": gen_interval,
    "once-examples": gen_once,
    "settings": gen_settings,
    "migrations": gen_migrations,
    "migrate-example": gen_migrate_example,
    **cli_generators(),
}


# -- systemd cross-check --------------------------------------------------------------------


def check_systemd() -> list[str]:
    """Compare the calendar examples with ``systemd-analyze calendar``; return mismatches."""
    problems: list[str] = []
    for expression, tz in CALENDAR + CALENDAR_EXPLICIT:
        timer = parse_timer(expression, kind="calendar", tz=tz)
        zone = "UTC" if tz is None else tz
        result = subprocess.run(
            [
                "systemd-analyze",
                "calendar",
                "--iterations=2",
                f"--base-time=@{int(AFTER.timestamp())}",
                expression,
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, TZ=zone),
            check=False,
        )
        if result.returncode != 0:
            problems.append(f"{expression!r}: systemd refuses it: {result.stderr.strip()}")
            continue
        normalized = re.search(r"Normalized form: (.*)", result.stdout)
        if normalized is None or normalized.group(1) != str(timer):
            problems.append(f"{expression!r}: systemd normalizes to {normalized}, we {timer}")
        theirs = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) (\S+)", result.stdout)
        # systemd prints whole seconds in the TZ it runs under.
        host = UTC if zone == "UTC" else ZoneInfo(zone)
        want = [t.astimezone(host).strftime("%Y-%m-%d %H:%M:%S") for t in fires(timer, AFTER, 2)]
        if want != [t[0] for t in theirs]:
            problems.append(f"{expression!r}: systemd fires at {theirs}, we at {want}")
    return problems


# -- driver ---------------------------------------------------------------------------------


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
        problems = check_systemd()
        for problem in problems:
            print(f"systemd mismatch: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"systemd-analyze agrees on {len(CALENDAR) + len(CALENDAR_EXPLICIT)} examples")
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
