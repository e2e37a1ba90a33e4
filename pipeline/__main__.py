"""``python -m pipeline``: the command line (see ``pipeline/cli.py``)."""

from pipeline.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
