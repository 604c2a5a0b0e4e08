"""``python -m harness``: run fault scenarios against real processes; print the table.

Examples::

    .venv/bin/python -m harness --scenario all --seconds 600
    .venv/bin/python -m harness --scenario soak --seconds 600   # one per backend, every fault
    .venv/bin/python -m harness --scenario kill9,db-outage --seconds 60 --keep
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from harness.oracle import Result
from harness.scenarios import SCENARIOS, SOAK, Settings, run


def table(results: list[Result]) -> str:
    """Return the summary table (Markdown) of ``results``."""
    head = (
        "| scenario | fires expected | delivered | recorded (missed/expired/dropped/skipped)"
        " | duplicates | double starts | lost | stuck | p50 late | p99 late | verdict |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in results:
        rec = "/".join(
            str(r.recorded.get(k, 0)) for k in ("missed", "expired", "dropped", "skipped")
        )
        p50, p99 = r.percentile(0.5), r.percentile(0.99)
        lines.append(
            f"| {r.scenario} | {r.expected} | {r.delivered} | {rec} | {r.duplicates} | "
            f"{r.double_starts} | {r.lost} | {r.stuck} | {_ms(p50)} | {_ms(p99)} | "
            f"{'PASS' if r.ok else 'FAIL'} |"
        )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenario",
        default="all",
        help=f"comma-separated names, 'soak' ({', '.join(SOAK)}) or 'all' ({', '.join(SCENARIOS)})",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="fault window per scenario")
    parser.add_argument("--lease", type=float, default=4.0, help="beat lease (seconds)")
    parser.add_argument("--workers", type=int, default=2, help="recording workers")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random faults")
    parser.add_argument("--logs", type=Path, default=Path("var/harness"), help="log directory")
    parser.add_argument(
        "--sample-every", type=float, default=30.0, help="seconds between soak samples"
    )
    parser.add_argument("--keep", action="store_true", help="keep each scenario's database")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    groups = {"all": list(SCENARIOS), "soak": list(SOAK)}
    names = groups.get(args.scenario) or args.scenario.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    settings = Settings(
        seconds=args.seconds,
        lease=args.lease,
        workers=args.workers,
        seed=args.seed,
        keep=args.keep,
        sample_every=args.sample_every,
        logs=args.logs,
    )
    results = []
    for name in names:
        print(f"== {name}: {SCENARIOS[name].description} ({args.seconds:g}s)", flush=True)
        result = run(SCENARIOS[name], settings)
        results.append(result)
        for note in result.notes:
            print(f"   {note}")
        for violation in result.violations:
            print(f"   VIOLATION {violation}")
        print(f"   {'PASS' if result.ok else 'FAIL'} in {result.seconds:.0f}s", flush=True)
    print()
    print(table(results))
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "scenario": r.scenario,
                        "expected": r.expected,
                        "delivered": r.delivered,
                        "recorded": dict(r.recorded),
                        "duplicates": r.duplicates,
                        "double_starts": r.double_starts,
                        "lost": r.lost,
                        "stuck": r.stuck,
                        "samples": [asdict(x) for x in r.samples],
                        "p50": r.percentile(0.5),
                        "p99": r.percentile(0.99),
                        "violations": r.violations,
                        "notes": r.notes,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
