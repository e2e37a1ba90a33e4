"""SCRAM credentials (KIP-554): what AlterUserScramCredentials stores and Describe reports.

Owns the mechanisms, the checks of an alteration (Kafka's ``ScramControlManager``), the derived
keys (the client sends a salted password; the server keeps only the salt, StoredKey = H(HMAC(
salted, "Client Key")), ServerKey = HMAC(salted, "Server Key") and the iteration count, as
Kafka's ``ScramFormatter``) and the description (Kafka's ``ScramImage.describe``).

Credentials live in the cluster metadata as ``{user: {mechanism name: credential}}`` with
base64 fields, so every broker of a cluster sees the same set and they survive restarts.

SASL_PLAINTEXT and SASL_SSL listeners log users in with them (:mod:`security.sasl`), reading
them at each login: an altered or deleted credential applies to the next connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from protocol.errors import ErrorCode

MAX_ITERATIONS = 16384
ALTERED_TWICE = "A user credential cannot be altered twice in the same request"

Credentials = dict[str, dict[str, dict]]  # user -> mechanism name -> stored credential (JSON)


class ScramMechanism(IntEnum):
    """Kafka's ``org.apache.kafka.clients.admin.ScramMechanism`` type codes."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @property
    def min_iterations(self) -> int:
        return 4096

    @classmethod
    def of(cls, code: int) -> ScramMechanism:
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class Outcome:
    user: str
    error_code: int = ErrorCode.none
    error_message: str | None = None


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, i): what a client sends AlterUserScramCredentials."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def derive(mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int) -> dict:
    """The stored form of a credential (no password, no salted password)."""
    def mac(key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, mechanism.hash_name).digest()

    client_key = mac(salted_password, b"Client Key")
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = mac(salted_password, b"Server Key")
    return {"salt": _b64(salt), "stored_key": _b64(stored_key), "server_key": _b64(server_key),
            "iterations": iterations}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _check_user_and_mechanism(user: str, mechanism: ScramMechanism) -> tuple[int, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism is ScramMechanism.UNKNOWN:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def plan_alterations(existing: Mapping[str, Mapping[str, dict]], deletions: Iterable, upsertions: Iterable,
                     ) -> tuple[dict[str, dict[str, dict]], list[Outcome]]:
    """Kafka's ``ScramControlManager.alterCredentials``: the users' new credential sets (an empty
    set removes the user) and one outcome per user named, all applied together or not at all."""
    errors: dict[str, tuple[int, str]] = {}
    deletes: dict[str, ScramMechanism] = {}
    upserts: dict[str, object] = {}
    for d in deletions:
        if d.name in errors:
            continue
        if deletes.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, ALTERED_TWICE)
            continue
        mechanism = ScramMechanism.of(d.mechanism)
        problem = _check_user_and_mechanism(d.name, mechanism)
        if problem is None and mechanism.name not in existing.get(d.name, {}):
            problem = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
        if problem:
            errors[d.name] = problem
        else:
            deletes[d.name] = mechanism
    for u in upsertions:
        if u.name in errors:
            continue
        if deletes.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, ALTERED_TWICE)
            continue
        mechanism = ScramMechanism.of(u.mechanism)
        problem = _check_user_and_mechanism(u.name, mechanism)
        if problem is None and u.iterations < mechanism.min_iterations:
            problem = (ErrorCode.unacceptable_credential, "Too few iterations")
        elif problem is None and u.iterations > MAX_ITERATIONS:
            problem = (ErrorCode.unacceptable_credential, "Too many iterations")
        if problem:
            errors[u.name] = problem
        else:
            upserts[u.name] = u
    changes: dict[str, dict[str, dict]] = {}
    for user, mechanism in deletes.items():
        changes[user] = {m: c for m, c in existing.get(user, {}).items() if m != mechanism.name}
    for user, u in upserts.items():
        mechanism = ScramMechanism.of(u.mechanism)
        changes[user] = {**existing.get(user, {}),
                         mechanism.name: derive(mechanism, u.salt, u.salted_password, u.iterations)}
    outcomes = [Outcome(user) for user in [*deletes, *upserts]]
    outcomes += [Outcome(user, code, message) for user, (code, message) in errors.items()]
    return changes, outcomes


def describe(existing: Mapping[str, Mapping[str, dict]], users: list[str] | None) -> list[dict]:
    """Kafka's ``ScramImage.describe``: every user with credentials when none is named."""
    if not users:
        named = {user: False for user in existing}
    else:
        named = {}
        for user in users:
            named[user] = user in named
    results = []
    for user, twice in named.items():
        result = {"user": user, "error_code": 0, "error_message": None, "credential_infos": []}
        if twice:
            result.update(error_code=ErrorCode.duplicate_resource,
                          error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                        f"single request: {user}")
        elif existing.get(user):
            result["credential_infos"] = [{"mechanism": ScramMechanism[m], "iterations": c["iterations"]}
                                          for m, c in sorted(existing[user].items())]
        else:
            result.update(error_code=ErrorCode.resource_not_found,
                          error_message=f"Attempt to describe a user credential that does not exist: {user}")
        results.append(result)
    return results
