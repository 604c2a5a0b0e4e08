"""Fault-injection harness: real beat replicas, a real broker and a recording worker.

Run ``python -m harness --help``; see ``docs/reliability.md`` for the scenarios, the
fault points and what the oracle checks.
"""
