"""The installed commands (``kbroker``, ``kbroker-transactions``, ``kbroker-verify``).

Each runs in a process of its own, so it may put the broker's packages first on ``sys.path``
(in an installed wheel they live under ``kbroker/_app``, see :mod:`kbroker.layout`).
"""

from __future__ import annotations

import importlib
import sys

from .layout import app_root


def _run(module: str) -> int:
    root = str(app_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module(module).main()


def broker() -> int:
    return _run("broker.__main__")


def transactions() -> int:
    return _run("tools.transactions")


def verify() -> int:
    return _run("tools.verify.__main__")
