"""A pytest plugin the runner loads (``-p``) on a secure target.

In external-broker mode (``KAFKA_URI``) the suite's ``KafkaFixture`` is a PLAINTEXT broker at
that address, and every client the suite makes (its producer / consumer / admin / KafkaNetClient
fixtures, ``client_params`` and ``create_topics``) is configured by
``KafkaFixture._enrich_client_params``, which only ``setdefault``s ``security_protocol`` (the
fixture's transport) and, for a SASL / SSL fixture it started itself, its own credentials. This
puts the target's settings (``COMPAT_CLIENT_SECURITY``, a JSON object of kafka-python settings:
``security_protocol``, ``ssl_cafile``, ``ssl_certfile`` / ``ssl_keyfile``, ``sasl_mechanism``,
``sasl_plain_username`` / ``sasl_plain_password``) in first, so every client logs in as the
suite's user; a test's own explicit settings still win.
"""

from __future__ import annotations

import json
import os


def pytest_configure(config) -> None:
    extra = json.loads(os.environ.get("COMPAT_CLIENT_SECURITY") or "{}")
    if not extra:
        return
    from test.integration.fixtures import KafkaFixture

    original = KafkaFixture._enrich_client_params

    def _enrich_client_params(self, params, **defaults):
        return original(self, {**extra, **params}, **defaults)

    KafkaFixture._enrich_client_params = _enrich_client_params
