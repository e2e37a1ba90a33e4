"""SCRAM credentials: the stored keys (RFC 5802 / 7677) and Kafka's alteration rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
from types import SimpleNamespace as NS

from protocol.errors import ErrorCode
from security import scram

SHA256, SHA512 = 1, 2


def test_stored_keys_verify_the_rfc_7677_exchange():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    stored = scram.derive(scram.ScramMechanism.SCRAM_SHA_256, salt, salted, 4096)
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r={nonce}".encode()
    server_signature = hmac.new(base64.b64decode(stored["server_key"]), auth, "sha256").digest()
    assert base64.b64encode(server_signature).decode() == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    # the client's proof checks out against StoredKey, as the server verifies it
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(base64.b64decode(stored["stored_key"]), auth, "sha256").digest()
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
    assert hashlib.sha256(client_key).digest() == base64.b64decode(stored["stored_key"])
    assert stored["salt"] == "W22ZaJ0SNY7soEsUEjb6gQ==" and "salted" not in str(stored)


def upsert(name, mechanism=SHA256, iterations=8192):
    return NS(name=name, mechanism=mechanism, iterations=iterations, salt=b"salt", salted_password=b"x" * 32)


def delete(name, mechanism=SHA256):
    return NS(name=name, mechanism=mechanism)


def test_alteration_errors_are_kafkas():
    existing = {"carol": {"SCRAM_SHA_256": {"iterations": 4096}}}
    changes, outcomes = scram.plan_alterations(existing, [delete("dave"), delete(""), delete("carol", 7)], [
        upsert("erin", iterations=100), upsert("frank", iterations=20000), upsert("gina"), upsert("gina", SHA512)])
    got = {o.user: (o.error_code, o.error_message) for o in outcomes}
    assert got == {
        "dave": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "carol": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "erin": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "frank": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "gina": (ErrorCode.duplicate_resource, scram.ALTERED_TWICE),
    }
    assert changes == {}


def test_delete_one_mechanism_keeps_the_other():
    existing = {"carol": {"SCRAM_SHA_256": {"iterations": 4096}, "SCRAM_SHA_512": {"iterations": 8192}}}
    changes, outcomes = scram.plan_alterations(existing, [delete("carol")], [upsert("hank", SHA512)])
    assert [(o.user, o.error_code) for o in outcomes] == [("carol", 0), ("hank", 0)]
    assert changes["carol"] == {"SCRAM_SHA_512": {"iterations": 8192}}
    assert set(changes["hank"]) == {"SCRAM_SHA_512"} and changes["hank"]["SCRAM_SHA_512"]["iterations"] == 8192


def test_describe_all_named_missing_and_duplicate():
    existing = {"carol": {"SCRAM_SHA_512": {"iterations": 8192}, "SCRAM_SHA_256": {"iterations": 4096}}}
    assert scram.describe(existing, None) == [{"user": "carol", "error_code": 0, "error_message": None,
                                               "credential_infos": [{"mechanism": SHA256, "iterations": 4096},
                                                                    {"mechanism": SHA512, "iterations": 8192}]}]
    twice, missing = scram.describe(existing, ["carol", "carol", "ivan"])
    assert (twice["error_code"], twice["error_message"]) == (
        ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials for the same user twice in a single request: carol")
    assert (missing["error_code"], missing["error_message"]) == (
        ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: ivan")
