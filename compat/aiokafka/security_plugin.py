"""A pytest plugin the runner loads (``-p``) on a secure target.

aiokafka's tests build their producers, consumers, admin clients and ``AIOKafkaClient``s with
``bootstrap_servers=self.hosts`` and nothing else; every one of them ends in
``AIOKafkaClient.__init__``. This gives each client that would speak PLAINTEXT the target's
settings instead (``COMPAT_CLIENT_SECURITY``: a JSON object of kafka-python-style settings,
``security_protocol``, ``ssl_cafile``, ``ssl_certfile`` / ``ssl_keyfile``, ``sasl_mechanism``,
``sasl_plain_username`` / ``sasl_plain_password``). The tests that open an ``AIOKafkaConnection``
themselves (``test_conn.py``) stay plaintext and fail on every secure target.
"""

from __future__ import annotations

import json
import os


def pytest_configure(config) -> None:
    settings = json.loads(os.environ.get("COMPAT_CLIENT_SECURITY") or "{}")
    if not settings:
        return
    from aiokafka.client import AIOKafkaClient
    from aiokafka.helpers import create_ssl_context

    context = create_ssl_context(cafile=settings.get("ssl_cafile"), certfile=settings.get("ssl_certfile"),
                                 keyfile=settings.get("ssl_keyfile"))
    secure = {"security_protocol": settings["security_protocol"], "ssl_context": context}
    for key in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password"):
        if key in settings:
            secure[key] = settings[key]
    original = AIOKafkaClient.__init__

    def __init__(self, *args, **kwargs):
        if kwargs.get("security_protocol", "PLAINTEXT") == "PLAINTEXT":
            kwargs.update(secure)
        original(self, *args, **kwargs)

    AIOKafkaClient.__init__ = __init__
