"""The claim's row update finds each due row through the primary key on PostgreSQL,
whatever the planner's statistics say (``store.bulk.joined_by_key``), and only that
statement is planned so."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from timeline import T0

from celery_cronstore.store import Store, bulk
from celery_cronstore.store.schema import periodic_task

pytestmark = pytest.mark.postgres

_PT = periodic_task.c


def test_the_row_update_joins_by_primary_key_and_only_it(direct: Store) -> None:
    with direct.begin() as conn:  # thousands of rows the statistics have not seen yet
        conn.execute(
            sa.insert(periodic_task),
            [
                {
                    "name": f"plan-{n}",
                    "task": "t.x",
                    "timer_kind": "interval",
                    "timer": "every 1m",
                    "next_run": T0,
                    "created_at": T0,
                    "updated_at": T0,
                }
                for n in range(3_000)
            ],
        )
    # The shape of ``store.batch.write_rows``'s statement: arrays joined by id and version.
    explain = (
        "EXPLAIN UPDATE cronstore_periodic_task AS t SET next_run = v.b_next"
        " FROM unnest(%(ids)s::BIGINT[], %(versions)s::INTEGER[], %(nexts)s::TIMESTAMP[])"
        " AS v(b_id, b_version, b_next) WHERE t.id = v.b_id AND t.version = v.b_version"
    )
    params = {
        "ids": list(range(1, 501)),
        "versions": [1] * 500,
        "nexts": [(T0 + timedelta(minutes=1)).replace(tzinfo=None)] * 500,
    }
    try:
        with direct.begin() as conn:
            with bulk.joined_by_key(conn):
                plan = "\n".join(conn.exec_driver_sql(explain, params).scalars())
            settings = ("enable_hashjoin", "enable_mergejoin")
            after = {s: conn.exec_driver_sql(f"SHOW {s}").scalar() for s in settings}
    finally:
        with direct.begin() as conn:
            conn.execute(sa.delete(periodic_task).where(_PT.name.like("plan-%")))
    assert "Hash Join" not in plan, plan
    assert "Merge Join" not in plan, plan
    assert "cronstore_periodic_task_pkey" in plan, plan
    assert after == {"enable_hashjoin": "on", "enable_mergejoin": "on"}
