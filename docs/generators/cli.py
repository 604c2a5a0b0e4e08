"""The command line: each command's ``--help``, and a real ``migrate`` session.

The ``cronstore`` commands run in this process through click's ``CliRunner``, on a Celery
app built here; only ``celery beat`` runs as a process of its own (see
:func:`gen_migrate_example`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store
from celery_cronstore.store.migrate import head_revision, upgrade

from .markdown import console
from .settings import revisions

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    "alerts",
    "audit",
    "list",
    "show",
    "add",
    "edit",
    "enable",
    "disable",
    "pause",
    "resume",
    "remove",
    "remove-owned-by",
    "next",
    "history",
    "run-now",
    "backfill",
    "validate",
    "import",
    "export",
    "apply",
    "check",
    "migrate",
    "health",
    "prune",
)
#: Wrap the help as click does in an 80-column terminal (two columns short of it), whatever
#: the terminal at hand; CliRunner would otherwise wrap at 80.
WIDTH = 78


def invoke(app: Celery, *args: str) -> Result:
    """Run ``celery -A <app> cronstore ARGS`` in this process; return what it printed."""
    return CliRunner().invoke(
        cronstore,
        list(args),
        prog_name="celery cronstore",
        obj=CLIContext(app=app, no_color=True, workdir=None),
        terminal_width=WIDTH,
    )


def cli_generators() -> dict[str, Callable[[], str]]:
    """Return one generator per command's ``--help`` (and the group's: ``cli-group``)."""
    app = Celery("app", set_as_current=False)

    def one(*command: str) -> Callable[[], str]:
        def make() -> str:
            result = invoke(app, *command, "--help")
            if result.exit_code:
                raise SystemExit(f"cronstore {' '.join(command)} --help: {result.output}")
            shown = " ".join(["celery -A proj cronstore", *command, "--help"])
            return console(shown, result.output)

        return make

    generators = {"cli-group": one()}
    for command in COMMANDS:
        generators[f"cli-{command}"] = one(command)
    generators["cli-calendar-add"] = one("calendar", "add")
    return generators


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """Yield a new empty folder as the working directory; restore it and remove the folder."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="cronstore-docs-") as folder:
        os.chdir(folder)
        try:
            yield Path(folder)
        finally:
            os.chdir(before)


def gen_migrate_example() -> str:
    """Real runs on a scratch SQLite file: beat and the CLI before and after ``migrate``.

    Beat runs as a process: what the page shows is what that process does (its log lines,
    the message Python prints for its ``SystemExit``, its exit status), and beat in this
    process would take over its logging, standard streams and signal handlers.
    """
    settings = {
        "cronstore_url": "sqlite:///cronstore.sqlite",
        "cronstore_auto_migrate_sqlite": False,
    }
    shown: list[str] = []

    def status(code: int) -> None:
        if code:
            shown.append(f"$ echo $?\n{code}")

    def run(*command: str) -> None:
        result = invoke(app, *command)
        shown.append(f"$ celery -A proj cronstore {' '.join(command)}")
        shown.append(result.output.rstrip())
        status(result.exit_code)

    app = Celery("proj", broker="memory://", set_as_current=False)
    app.conf.update(settings)
    with scratch_folder() as scratch:
        Path(scratch, "docs_app.py").write_text(
            f"from celery import Celery\n\napp = Celery('proj', broker='memory://')\n"
            f"app.conf.update({settings!r})\n",
            encoding="utf-8",
        )
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(scratch), str(ROOT)]))
        env.pop("CELERY_APP", None)
        beat = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "docs_app", "beat", "-S", "cronstore"],
            capture_output=True,
            text=True,
            env=env,
            cwd=scratch,
            timeout=60,
        )
        shown.append("$ celery -A proj beat -S cronstore")
        # Its banner is not the point; its log lines lose their timestamps.
        shown.extend(
            re.sub(r"^\[[^\]]*?: ", "[", line)
            for line in beat.stderr.splitlines()
            if "cronstore" in line and "->" not in line
        )
        status(beat.returncode)
        run("list")
        first = revisions()[0].revision
        if first != head_revision():  # show the "out of date" message too
            store = Store("sqlite:///cronstore.sqlite")
            try:
                upgrade(store.engine, first)
            finally:
                store.close()
            shown.append(f"# ... an older release created the tables (revision {first})")
            run("list")
        run("migrate")
        run("migrate")
        run("list")
    body = "\n".join(line for line in shown if line)
    return f"```console\n{body}\n```\n"
