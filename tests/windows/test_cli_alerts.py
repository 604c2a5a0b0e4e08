"""``cronstore alerts``: the open episodes, ``--all`` the resolved ones too, ``--json``."""

from __future__ import annotations

import json
from typing import Any

from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from timeline import T0, at

from celery_cronstore.cli import cronstore
from celery_cronstore.policy.alerts import FAILING, OPEN, RESOLVE, SILENT, Change
from celery_cronstore.store import Store
from celery_cronstore.store import alerts as store_alerts
from celery_cronstore.testing import FrozenClock


def run(app: Celery, *args: str) -> Any:
    return CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )


def test_alerts_lists_what_is_open_and_with_all_what_was(
    sqlite_url: str, sqlite_store: Store, clock: FrozenClock
) -> None:
    app = Celery("cli-alerts", set_as_current=False)
    app.conf.cronstore_url = sqlite_url
    store = sqlite_store
    assert run(app, "alerts").output == "no alert episode is open\n"
    flaky = store.add("flaky", task="x.do", timer="every 1m")
    nightly = store.add("nightly", task="x.do", timer="every 1d", alert_after="2 periods")
    assert nightly.alert_after == "2 periods"
    db = store.db
    failing = Change(OPEN, FAILING, "3 bad end(s) in a row; newest failed: boom", 3)
    store_alerts.apply_changes(db, flaky.id, [failing], T0, deliver=True)
    store_alerts.apply_changes(db, nightly.id, [Change(OPEN, SILENT, "no success", 3)], at(60),
                               deliver=False)  # fmt: skip
    store_alerts.apply_changes(db, nightly.id, [Change(RESOLVE, SILENT)], at(120), deliver=False)
    listed = run(app, "alerts")
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[0].split() == ["TASK", "KIND", "OPENED", "RESOLVED", "COUNT", "DELIVERY", "REASON"]
    assert lines[1].split()[:6] == ["flaky", "failing", "2026-01-05T12:00:00Z", "open", "3", "open"]
    assert lines[1].endswith("3 bad end(s) in a row; newest failed: boom")
    assert len(lines) == 2
    everything = run(app, "--json", "alerts", "--all")
    assert everything.exit_code == 0, everything.output
    shown = json.loads(everything.output)
    assert [(e["name"], e["kind"], e["resolved_at"]) for e in shown] == [
        ("nightly", "silent", "2026-01-05T12:02:00Z"),
        ("flaky", "failing", None),
    ]
    assert shown[0]["delivery"] == "not sent (no webhook)"
    assert shown[1]["delivery"] == "open owed"
    assert json.loads(run(app, "--json", "alerts").output)[0]["name"] == "flaky"
