"""The secure compose profile's certificates, passwords and settings (``stack.sh up --secure``).

Run inside the kbroker image (it has the project and ``cryptography``) with this directory
mounted; writes into OUT, which the brokers and the etcd members mount read-only at
/etc/kbroker/secrets:

- ``ca.pem`` and ``broker.pem``: a throwaway CA (:mod:`tools.dev_ca`) and the brokers'
  certificate and key, for broker1..3 (the compose network) and 127.0.0.1 / localhost (the
  published ports). The certificates are valid for a day: ``make compose-down`` then
  ``make compose-up-secure`` makes new ones.
- ``etcd.crt`` / ``etcd.key``: the etcd members' certificate, for etcd1..3 and 127.0.0.1 /
  localhost (a member's health check), served to clients and to peers and presented as a peer's
  client certificate (no EKU: one certificate serves both sides); ``etcd-client.crt`` /
  ``etcd-client.key``: the brokers' client certificate for etcd's ``--client-cert-auth``
  (compose/secure.yml gives the members the TLS flags).
- ``server.properties``: ``broker.properties`` with both listeners on SASL_SSL (PLAIN and
  SCRAM-SHA-512), the brokers logging in to each other as ``broker``, the StandardAuthorizer
  with ``broker`` and ``admin`` as its super users, random passwords, and the brokers reaching
  every etcd member over TLS with their client certificate (``metadata.etcd.*``).
- ``client.properties`` (librdkafka: confluent-kafka, kcat) and ``client-java.properties`` (the
  Java client, and Kafka's tools with ``--command-config``) for ``admin`` on the published
  ports, naming the CA by its path on the host (``--host-dir``).

Never committed: OUT is git-ignored, and ``stack.sh down`` removes it.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

from kbroker.layout import app_root

sys.path.insert(0, str(app_root()))  # the image installs the broker's packages inside kbroker
from tools.dev_ca import DevCA  # noqa: E402

CONTAINER_DIR = "/etc/kbroker/secrets"
BROKER_HOSTS = ("broker1", "broker2", "broker3", "127.0.0.1", "localhost")
ETCD_MEMBERS = ("etcd1", "etcd2", "etcd3")  # docker-compose.yml's services, one per node
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def secure_properties(passwords: dict[str, str]) -> dict[str, str]:
    users = " ".join(f'user_{u}="{p}"' for u, p in passwords.items())
    login = f'username="broker" password="{passwords["broker"]}"'
    return {
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        # The inter-broker listener's line also names the broker's own login.
        "listener.name.internal.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {login} {users};",
        "listener.name.external.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": f"{CONTAINER_DIR}/broker.pem",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": f"{CONTAINER_DIR}/ca.pem",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        # host:port is all the broker takes: it speaks TLS to etcd because a CA is named.
        "metadata.etcd.endpoints": ",".join(f"{m}:2379" for m in ETCD_MEMBERS),
        "metadata.etcd.tls.ca.file": f"{CONTAINER_DIR}/ca.pem",
        "metadata.etcd.tls.cert.file": f"{CONTAINER_DIR}/etcd-client.crt",
        "metadata.etcd.tls.key.file": f"{CONTAINER_DIR}/etcd-client.key",
    }


def server_properties(base: str, overrides: dict[str, str]) -> str:
    """``base`` with ``overrides`` replacing its keys (in place) or appended."""
    lines, seen = [], set()
    for line in base.splitlines():
        key = line.split("=", 1)[0].strip()
        if not line.lstrip().startswith("#") and key in overrides:
            lines.append(f"{key}={overrides[key]}")
            seen.add(key)
        else:
            lines.append(line)
    lines.append("# The secure profile (compose/make_secrets.py)")
    lines += [f"{k}={v}" for k, v in overrides.items() if k not in seen]
    return "\n".join(lines) + "\n"


def client_settings(bootstrap: str, password: str, ca: str) -> tuple[str, str]:
    librdkafka = (f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                  f"sasl.username=admin\nsasl.password={password}\nssl.ca.location={ca}\n")
    java = (f"bootstrap.servers={bootstrap}\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            f'sasl.jaas.config={PLAIN_MODULE} required username="admin" password="{password}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    return librdkafka, java


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--base", type=Path, default=Path(__file__).with_name("broker.properties"))
    ap.add_argument("--host-dir", required=True, help="OUT as the host names it (for the client settings)")
    ap.add_argument("--bootstrap", required=True, help="the published listeners, host:port,...")
    args = ap.parse_args(argv)

    ca = DevCA(args.out, name="kbroker compose CA")
    ca.issue("broker", cn="kbroker", hosts=BROKER_HOSTS)
    ca.issue("etcd", cn="etcd", hosts=(*ETCD_MEMBERS, "127.0.0.1", "localhost"))
    ca.issue("etcd-client", cn="kbroker")
    passwords = {u: secrets.token_urlsafe(12) for u in ("broker", "admin")}
    (args.out / "server.properties").write_text(server_properties(args.base.read_text(), secure_properties(passwords)))
    librdkafka, java = client_settings(args.bootstrap, passwords["admin"], f"{args.host_dir}/ca.pem")
    (args.out / "client.properties").write_text(librdkafka)
    (args.out / "client-java.properties").write_text(java)
    # broker.pem has the broker's key and certificate; etcd wants them apart, and no bundle.
    for stale in ("broker.crt", "broker.key", "etcd.pem", "etcd-client.pem"):
        (args.out / stale).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
