"""The StandardAuthorizer's decision rules and the ACL filters (security/authorizer.py,
security/acls.py), as Kafka's StandardAuthorizerData and AclBindingFilter apply them."""

from __future__ import annotations

import pytest

from protocol.errors import ErrorCode, KafkaError
from security.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    validate_new_acl,
)
from security.authorizer import StandardAuthorizer, java_host_address, parse_super_users

Op, Perm, PT, RT = AclOperation, AclPermissionType, PatternType, ResourceType
ANON, HOST = "User:ANONYMOUS", "127.0.0.1"


def acl(name, op=Op.ALL, perm=Perm.DENY, principal="User:*", host="*", pattern=PT.LITERAL, rtype=RT.TOPIC):
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls, allow_if_no_acl=True, super_users=""):
    a = StandardAuthorizer(parse_super_users(super_users), allow_if_no_acl)
    a.reload(acls)
    return a


def allowed(a, op, name, rtype=RT.TOPIC, principal=ANON, host=HOST):
    return a.authorize(principal, host, op, rtype, name)


def test_no_acl_follows_allow_everyone_if_no_acl_found():
    assert allowed(authorizer(allow_if_no_acl=True), Op.WRITE, "t")
    assert not allowed(authorizer(allow_if_no_acl=False), Op.WRITE, "t")


def test_deny_all_to_everyone_on_a_topic_refuses_every_operation_on_it_only():
    a = authorizer(acl("t"))
    assert not allowed(a, Op.WRITE, "t")
    assert not allowed(a, Op.DESCRIBE, "t")
    assert allowed(a, Op.WRITE, "t2")
    assert allowed(a, Op.WRITE, "t", rtype=RT.GROUP)


def test_deny_wins_over_allow():
    a = authorizer(acl("t", Op.WRITE, Perm.ALLOW), acl("t", Op.WRITE, Perm.DENY, principal=ANON))
    assert not allowed(a, Op.WRITE, "t")


def test_a_resource_with_acls_denies_what_none_allows_whatever_allow_everyone_says():
    a = authorizer(acl("t", Op.READ, Perm.DENY))
    assert not allowed(a, Op.WRITE, "t")
    assert not allowed(a, Op.DESCRIBE, "t")  # a DENY implies nothing, but the topic has ACLs


def test_allow_read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(authorizer(acl("t", op, Perm.ALLOW), allow_if_no_acl=False), Op.DESCRIBE, "t")
    assert not allowed(authorizer(acl("t", Op.CREATE, Perm.ALLOW), allow_if_no_acl=False), Op.DESCRIBE, "t")
    a = authorizer(acl("t", Op.ALTER_CONFIGS, Perm.ALLOW), allow_if_no_acl=False)
    assert allowed(a, Op.DESCRIBE_CONFIGS, "t")
    assert not allowed(a, Op.ALTER, "t")


def test_a_deny_of_read_does_not_deny_describe_to_an_explicit_allow():
    a = authorizer(acl("t", Op.DESCRIBE, Perm.ALLOW), acl("t", Op.READ, Perm.DENY))
    assert allowed(a, Op.DESCRIBE, "t")
    assert not allowed(a, Op.READ, "t")


def test_prefixed_and_wildcard_acls_apply_to_the_names_they_cover():
    a = authorizer(acl("pay", pattern=PT.PREFIXED), acl("*", Op.CREATE, Perm.ALLOW))
    assert not allowed(a, Op.READ, "payments")
    assert allowed(a, Op.CREATE, "pa")
    assert not allowed(a, Op.READ, "pa")  # the wildcard ACL gives every topic ACLs
    assert allowed(a, Op.READ, "anything", rtype=RT.GROUP)


def test_a_literal_acl_applies_to_its_exact_name_only():
    a = authorizer(acl("pay"))
    assert allowed(a, Op.READ, "payments")
    assert not allowed(a, Op.READ, "pay")


def test_principal_and_host_must_match():
    a = authorizer(acl("t", Op.READ, Perm.ALLOW, principal="User:bob"),
                   acl("u", Op.READ, Perm.ALLOW, host="10.0.0.1"), allow_if_no_acl=False)
    assert not allowed(a, Op.READ, "t")
    assert allowed(a, Op.READ, "t", principal="User:bob")
    assert not allowed(a, Op.READ, "u")
    assert allowed(a, Op.READ, "u", host="10.0.0.1")


def test_super_users_may_do_anything():
    a = authorizer(acl("t"), allow_if_no_acl=False, super_users="User:admin; User:ANONYMOUS")
    assert allowed(a, Op.WRITE, "t")
    assert allowed(a, Op.CLUSTER_ACTION, "kafka-cluster", rtype=RT.CLUSTER)


def test_a_topic_deny_does_not_touch_cluster_action():
    """Follower fetch is CLUSTER_ACTION on the cluster: a topic ACL leaves replication alone."""
    a = authorizer(acl("t"))
    assert allowed(a, Op.CLUSTER_ACTION, "kafka-cluster", rtype=RT.CLUSTER)


def test_authorize_by_resource_type_as_kafkas_default():
    assert authorizer(allow_if_no_acl=True).authorize_by_resource_type(ANON, HOST, Op.WRITE, RT.TOPIC)
    assert not authorizer(allow_if_no_acl=False).authorize_by_resource_type(ANON, HOST, Op.WRITE, RT.TOPIC)
    a = authorizer(acl("t", Op.WRITE, Perm.ALLOW), allow_if_no_acl=False)
    assert a.authorize_by_resource_type(ANON, HOST, Op.WRITE, RT.TOPIC)
    a = authorizer(acl("t", Op.WRITE, Perm.ALLOW), acl("t", Op.WRITE, Perm.DENY, pattern=PT.PREFIXED),
                   allow_if_no_acl=False)
    assert not a.authorize_by_resource_type(ANON, HOST, Op.WRITE, RT.TOPIC)
    assert not authorizer(acl("*", Op.WRITE)).authorize_by_resource_type(ANON, HOST, Op.WRITE, RT.TOPIC)


def test_authorized_operations_lists_the_allowed_ones():
    a = authorizer(acl("t", Op.READ, Perm.ALLOW), allow_if_no_acl=False)
    ops = a.authorized_operations(ANON, HOST, [Op.READ, Op.WRITE, Op.DESCRIBE], RT.TOPIC, "t")
    assert ops == {Op.READ, Op.DESCRIBE}


def _filter(rtype=RT.ANY, name=None, pattern=PT.ANY, principal=None, host=None, op=Op.ANY, perm=Perm.ANY):
    return AclBindingFilter(rtype, name, pattern, principal, host, op, perm)


def test_filters_any_literal_prefixed_and_match():
    literal, prefixed, wildcard = acl("foo"), acl("fo", pattern=PT.PREFIXED), acl("*")
    assert all(_filter().matches(a) for a in (literal, prefixed, wildcard))
    assert _filter(name="foo").matches(literal) and not _filter(name="foo").matches(prefixed)
    assert _filter(pattern=PT.PREFIXED).matches(prefixed) and not _filter(pattern=PT.PREFIXED).matches(literal)
    match = _filter(name="foo", pattern=PT.MATCH)
    assert match.matches(literal) and match.matches(prefixed) and match.matches(wildcard)
    assert not _filter(name="bar", pattern=PT.MATCH).matches(prefixed)
    assert not _filter(rtype=RT.GROUP).matches(literal)
    assert not _filter(op=Op.READ).matches(literal) and _filter(op=Op.ALL).matches(literal)
    assert not _filter(perm=Perm.ALLOW).matches(literal)
    assert not _filter(principal="User:bob").matches(literal)


@pytest.mark.parametrize("bad, message", [
    (acl("x", rtype=RT.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(""), "Invalid empty resource name"),
    (acl("t", principal="bob"), "Could not parse principal from `bob` (no colon is present separating "
                                "the principal type from the principal name)"),
])
def test_new_acl_validation_messages(bad, message):
    with pytest.raises(KafkaError) as err:
        validate_new_acl(bad)
    assert err.value.code == ErrorCode.invalid_request and err.value.message == message


def test_acl_id_is_its_content_and_json_round_trips():
    a = acl("t", Op.READ, Perm.ALLOW, host="1.2.3.4", pattern=PT.PREFIXED)
    assert a.acl_id == acl("t", Op.READ, Perm.ALLOW, host="1.2.3.4", pattern=PT.PREFIXED).acl_id
    assert a.acl_id != acl("t").acl_id
    assert StandardAcl.from_json(a.to_json()) == a


def test_hosts_are_compared_as_java_writes_them():
    assert java_host_address("127.0.0.1") == "127.0.0.1"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1"
