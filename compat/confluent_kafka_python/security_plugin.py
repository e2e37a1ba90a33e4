"""A pytest plugin the runner loads (``-p``) on a secure target.

The suite's BYO cluster fixture (``ByoFixture``) takes only ``bootstrap.servers`` from the
environment; every client it makes is built from its ``client_conf()``. This adds the
target's client security settings (``COMPAT_CLIENT_SECURITY``, a JSON object of librdkafka
settings) to that configuration, so every test's clients log in as the suite's user.
"""

from __future__ import annotations

import json
import os


def pytest_configure(config) -> None:
    extra = json.loads(os.environ.get("COMPAT_CLIENT_SECURITY") or "{}")
    if not extra:
        return
    from tests.integration.cluster_fixture import ByoFixture

    original = ByoFixture.__init__

    def __init__(self, conf):
        original(self, {**conf, **extra})

    ByoFixture.__init__ = __init__
