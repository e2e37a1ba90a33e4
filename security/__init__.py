"""Authentication and authorization: who a caller is and what it may do.

Owns the ACL records and filters (:mod:`.acls`), Kafka's StandardAuthorizer over them
(:mod:`.authorizer`) and SCRAM credentials (:mod:`.scram`). Where a principal comes from (a
listener's security protocol, SASL, TLS) and the request-side checks of each API
(``broker/authorization.py``) build on these. Nothing here imports ``broker/`` or
``coordinator/``: the broker and the cluster metadata use this package, not the reverse.
"""
