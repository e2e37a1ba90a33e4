"""A throwaway certificate authority for development clusters and tests.

Owns making a CA, server certificates (with the names and addresses a client checks) and client
certificates as PEM files, and PKCS12 stores, with ``cryptography``. ``python -m tools.devcluster
--security`` and the TLS and SASL tests use it; nothing it makes is meant to outlive them (the
certificates expire after a day or two).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID


@dataclass
class Issued:
    cert: Path   # the certificate (PEM)
    key: Path    # its private key (PEM, unencrypted unless a password was given)
    bundle: Path  # key and certificate in one PEM file (Kafka's PEM key store)
    subject: str  # RFC 2253, as the broker maps it


def _name(**attrs: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
            "C": NameOID.COUNTRY_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


class DevCA:
    def __init__(self, directory: Path, name: str = "kbroker test CA") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(CN=name)
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.dir / "ca.pem"
        self.pem.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, *, cn: str, ou: str | None = None, o: str | None = None,
              hosts: tuple[str, ...] = (), key_password: str | None = None) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = {"CN": cn, **({"OU": ou} if ou else {}), **({"O": o} if o else {})}
        # x509 names list attributes from the most general; RFC 2253 prints them reversed.
        subject = x509.Name(list(reversed(list(_name(**attrs)))))
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if hosts:
            sans = [x509.IPAddress(ipaddress.ip_address(h)) if h.replace(".", "").isdigit() else x509.DNSName(h)
                    for h in hosts]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
                      else serialization.NoEncryption())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        paths = Issued(self.dir / f"{stem}.crt", self.dir / f"{stem}.key", self.dir / f"{stem}.pem",
                       subject.rfc4514_string())
        paths.cert.write_bytes(cert_pem)
        paths.key.write_bytes(key_pem)
        paths.bundle.write_bytes(key_pem + cert_pem)
        self._issued = getattr(self, "_issued", {})
        self._issued[stem] = (key, cert)
        return paths

    def pkcs12(self, stem: str, password: str) -> Path:
        key, cert = self._issued[stem]
        path = self.dir / f"{stem}.p12"
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            stem.encode(), key, cert, [self.cert], serialization.BestAvailableEncryption(password.encode())))
        return path
