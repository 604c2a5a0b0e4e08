"""``python -m celery_cronstore.cli -A app cronstore ...``: the CLI without the entry point."""

from __future__ import annotations

from celery_cronstore.cli import main

if __name__ == "__main__":
    main()
