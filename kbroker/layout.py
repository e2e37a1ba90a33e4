"""Where the broker's own packages are, in a repository checkout and in an installed wheel.

A wheel built from this repository (``pip install kbroker``) carries the broker's packages under
``kbroker/_app/``, not as top-level import names; a checkout (and its editable install) keeps
them at the repository's top level. Either way :func:`app_root` is the directory a broker
process is started from (its working directory, so ``python -m broker`` finds them first).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
APP_PACKAGES = ("protocol", "storage", "metadata", "coordinator", "security", "broker", "tools", "pipeline")


def app_root() -> Path:
    bundled = PACKAGE_DIR / "_app"
    if (bundled / "broker" / "__main__.py").is_file():
        return bundled
    checkout = PACKAGE_DIR.parent
    if (checkout / "broker" / "__main__.py").is_file():
        return checkout
    raise RuntimeError(f"kbroker's broker packages are neither in {bundled} nor in {checkout}; "
                       "reinstall kbroker")
