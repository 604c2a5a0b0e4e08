"""The fault-injection harness in its short CI form: every scenario, a few seconds each.

Each scenario starts three real beat replicas, two recording CronTask workers, a real
broker and a scratch database, injects its faults, heals, and asks the oracle
(``harness/oracle.py``): nothing claimed twice, one task id per fire, at most one start
per fire, nothing lost or early, nothing after a disable. The soak form is
``python -m harness --scenario soak --seconds 600`` (one scenario per backend with every
fault it can have; docs/reliability.md).
CRONSTORE_FAULTS_SECONDS sets the fault window here (default 8).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.__main__ import table
from harness.scenarios import SCENARIOS, Settings, run

SECONDS = float(os.environ.get("CRONSTORE_FAULTS_SECONDS", "8"))


def _param(name: str) -> object:
    scenario = SCENARIOS[name]
    marks = [
        pytest.mark.slow,
        pytest.mark.redis if scenario.broker == "redis" else pytest.mark.rabbitmq,
    ]
    if scenario.db != "sqlite":  # a SQLite file needs no server
        marks.append(pytest.mark.postgres if scenario.db == "postgres" else pytest.mark.mysql)
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in SCENARIOS])
def test_scenario_keeps_the_contract(
    request: pytest.FixtureRequest, tmp_path: Path, name: str
) -> None:
    scenario = SCENARIOS[name]
    # The session fixtures skip (or fail under CI=true) when a service is down.
    servers = (scenario.db, scenario.broker) if scenario.db != "sqlite" else (scenario.broker,)
    for fixture in (f"{server}_url" for server in servers):
        request.getfixturevalue(fixture)
    result = run(scenario, Settings(seconds=SECONDS, logs=tmp_path))
    print(table([result]))
    assert result.expected > 0
    assert result.delivered > 0, "nothing was delivered"
    assert result.violations == [], "\n".join([*result.violations, *result.notes])
    assert result.double_starts == 0
    assert result.lost == 0
