"""Run beat and a worker from an installed wheel against one extra's real service.

    python extras_check.py redis|postgres|mysql|none WORKDIR

Run with the Python of a fresh virtual environment holding only the wheel and that
extra, from outside the checkout (so nothing is imported from the source tree). Exit 0
once a stored task fired through the service; 1 with the logs otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

POSTGRES = os.environ.get(
    "CRONSTORE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MYSQL = os.environ.get("CRONSTORE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
REDIS = os.environ.get("CRONSTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TIMEOUT = 60.0


def scratch_database(admin_url: str, name: str) -> str:
    """Create database ``name`` on the server of ``admin_url``; return its URL."""
    import sqlalchemy as sa

    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_database(admin_url: str, name: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    force = " WITH (FORCE)" if engine.dialect.name == "postgresql" else ""
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
    engine.dispose()


def main() -> int:
    extra, work = sys.argv[1], Path(sys.argv[2]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:10]
    fired = work / "fired"
    broker_dir = work / "broker"
    broker = "filesystem://localhost//"
    store_url = f"sqlite:///{work / 'store.sqlite'}"
    admin = {"postgres": POSTGRES, "mysql": MYSQL}.get(extra)
    database = f"cronstore_extras_{token}"
    if extra == "redis":
        broker = REDIS
    elif admin is not None:
        store_url = scratch_database(admin, database)
    (work / "extras_app.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from celery import Celery

            app = Celery("extras", broker={broker!r})
            app.conf.update(
                broker_transport_options={{
                    "data_folder_in": {str(broker_dir)!r},
                    "data_folder_out": {str(broker_dir)!r},
                    "control_folder": {str(broker_dir)!r},
                }},
                broker_connection_retry_on_startup=True,
                task_default_queue="cronstore-extras-{token}",
                task_ignore_result=True,
                worker_hijack_root_logger=False,
                cronstore_url={store_url!r},
                cronstore_poll_interval=1.0,
            )

            @app.task(name="extras.touch")
            def touch():
                Path({str(fired)!r}).write_text("fired")
            """
        )
    )
    broker_dir.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(work)}
    celery = [sys.executable, "-m", "celery", "-A", "extras_app"]
    subprocess.run([*celery, "cronstore", "migrate"], cwd=work, env=env, check=True)
    subprocess.run(
        [*celery, "cronstore", "add", "touch", "--task", "extras.touch", "--timer", "every 1s"],
        cwd=work,
        env=env,
        check=True,
    )
    logs = {name: (work / f"{name}.log").open("w") for name in ("beat", "worker")}
    processes = [
        subprocess.Popen(
            [*celery, "beat", "-S", "cronstore", "--loglevel", "INFO"],
            cwd=work,
            env=env,
            stdout=logs["beat"],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*celery, "worker", "--pool", "solo", "--loglevel", "INFO"],
            cwd=work,
            env=env,
            stdout=logs["worker"],
            stderr=subprocess.STDOUT,
        ),
    ]
    started = time.monotonic()
    try:
        while not fired.exists() and time.monotonic() - started < TIMEOUT:
            if any(p.poll() is not None for p in processes):
                break
            time.sleep(0.2)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in logs.values():
            log.close()
        if admin is not None:
            drop_database(admin, database)
    if fired.exists():
        print(f"[{extra}] a task fired {time.monotonic() - started:.1f}s after start")
        return 0
    for name in logs:
        print(f"----- {name}.log -----\n{(work / f'{name}.log').read_text()[-4000:]}")
    print(f"[{extra}] no task fired within {TIMEOUT:g}s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
