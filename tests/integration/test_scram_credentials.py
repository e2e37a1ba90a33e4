"""SCRAM credentials through confluent-kafka's admin client (answers compared with Kafka 4.3.1)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)


def alter(admin: AdminClient, *alterations):
    for future in admin.alter_user_scram_credentials(list(alterations)).values():
        future.result(15)


def described(admin: AdminClient, user: str) -> dict:
    (future,) = admin.describe_user_scram_credentials([user]).values()
    return {info.mechanism: info.iterations for info in future.result(15).scram_credential_infos}


def test_scram_credentials_are_stored_described_and_deleted(own_broker):
    b = own_broker()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    user = f"user-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException, match="does not exist"):
        described(admin, user)
    alter(admin, UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10000),
                                              b"secret", b"salt"),)
    alter(admin, UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              b"secret", b"salt"))
    assert described(admin, user) == {ScramMechanism.SCRAM_SHA_256: 10000, ScramMechanism.SCRAM_SHA_512: 8192}
    with pytest.raises(KafkaException, match="Too few iterations"):
        alter(admin, UserScramCredentialUpsertion("other", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100),
                                                  b"secret", b"salt"))
    b.restart(kill=True)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    alter(admin, UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256))
    assert described(admin, user) == {ScramMechanism.SCRAM_SHA_512: 8192}
    with pytest.raises(KafkaException, match="does not exist"):
        alter(admin, UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256))
