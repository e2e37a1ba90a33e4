"""``python -m tools.storage add-scram``: SCRAM users before the first start (Kafka's
``kafka-storage format --add-scram``).

Owns writing SCRAM credentials into a single broker's metadata (``<log.dirs>/<metadata file>``)
while the broker is stopped, with Kafka's argument syntax::

    python -m tools.storage add-scram server.properties \\
        'SCRAM-SHA-512=[name=admin,password=admin-secret]' \\
        'SCRAM-SHA-256=[name=alice,password=alice-secret,iterations=8192]'

The broker reads them at start-up; AlterUserScramCredentials changes them later. Differs from
Kafka: a cluster on etcd keeps its credentials in etcd, which this tool does not write; there,
create the first administrator over a listener it may use (a PLAIN user of the JAAS line,
as ``python -m tools.devcluster --security`` does) with AlterUserScramCredentials.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
from types import SimpleNamespace

from broker.config import ConfigError, load_from_args
from security import scram

_ARG = re.compile(r"^(SCRAM-SHA-256|SCRAM-SHA-512)=\[(.*)\]$")


def parse_scram_argument(text: str) -> SimpleNamespace:
    """``SCRAM-SHA-512=[name=admin,password=secret(,iterations=N)]`` as an upsertion."""
    m = _ARG.match(text.strip())
    if m is None:
        raise ValueError(f"expected 'SCRAM-SHA-256=[name=...,password=...]' or SCRAM-SHA-512, got {text!r}")
    fields = dict(part.split("=", 1) for part in m.group(2).split(",") if "=" in part)
    name, password = fields.get("name", "").strip('"'), fields.get("password", "").strip('"')
    if not name or not password:
        raise ValueError(f"{text!r}: name and password are required")
    mechanism = scram.ScramMechanism[m.group(1).replace("-", "_")]
    iterations = int(fields.get("iterations", 4096))
    salt = secrets.token_bytes(32)
    salted = scram.salted_password(mechanism, password, salt, iterations)
    return SimpleNamespace(name=name, mechanism=int(mechanism), iterations=iterations, salt=salt,
                           salted_password=salted)


def add_scram(properties: str | None, overrides: list[str], arguments: list[str]) -> list[str]:
    """Writes the credentials; returns one line per user."""
    from broker.broker import METADATA_FILE
    from metadata.embedded_store import EmbeddedMetadataStore

    config = load_from_args(properties, overrides)
    if config["metadata.etcd.endpoints"]:
        raise ValueError("this broker keeps its metadata in etcd: create SCRAM users with "
                         "AlterUserScramCredentials (kafka-configs) instead")
    os.makedirs(config.log_dir, exist_ok=True)
    store = EmbeddedMetadataStore(os.path.join(config.log_dir, METADATA_FILE), config.node_id)
    upsertions = [parse_scram_argument(a) for a in arguments]
    changes, outcomes = scram.plan_alterations(store.image.scram_credentials, [], upsertions)
    failed = [o for o in outcomes if o.error_code]
    if failed:
        raise ValueError(f"{failed[0].user}: {failed[0].error_message}")
    store.alter_scram_credentials(changes)
    return [f"added {scram.ScramMechanism(u.mechanism).name.replace('_', '-')} credential for {u.name} "
            f"({u.iterations} iterations) to {store.path}" for u in upsertions]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.storage", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add-scram", help="SCRAM users in a stopped single broker's metadata")
    add.add_argument("properties", nargs="?", help="server.properties (optional)")
    add.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    add.add_argument("--add-scram", dest="scram", action="append", default=[], metavar="MECHANISM=[...]",
                     help="e.g. 'SCRAM-SHA-512=[name=admin,password=admin-secret]' (repeatable)")
    args = p.parse_args(argv)
    if not args.scram:
        p.error("at least one --add-scram 'SCRAM-SHA-512=[name=...,password=...]' is required")
    try:
        for line in add_scram(args.properties, args.override, args.scram):
            print(line)
    except (ConfigError, ValueError) as exc:
        print(f"kbroker storage: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
