"""The etcd key space of one cluster, and the JSON of the values kept in it.

Owns the layout under ``metadata.etcd.prefix`` (default ``/kbroker``)::

    cluster_id                      put once, by whoever comes first
    brokers/<node.id>               BrokerRegistration (endpoints by listener name, rack,
                                    incarnation): persists across crashes and restarts; only
                                    UnregisterBroker deletes it
    alive/<node.id>                 the broker's session: its incarnation id, attached to its
                                    lease (its create_revision is the broker epoch, KIP-903);
                                    "<incarnation> fenced" while the broker starts, as a KRaft
                                    broker stays fenced until it has caught up. Registered
                                    without it, or with it fenced = fenced
    controller                      the elected controller's node id, under a lease of its own;
                                    its create_revision is the controller epoch
    topics/<name>                   topic id, configs, partition count
    partitions/<name>/<index>       PartitionState (leader, leader epoch, replicas, ISR, partition epoch)
    producer_id_block               the next free producer-id block, and who took the last one
    group_configs/<group id>        a group's config overrides (GROUP config resource)
    scram/<user>                    a user's SCRAM credentials by mechanism
    quotas/<entity key>             a client-quota entity's quotas (client_quotas.entity_key)
    acls/<id>                       one ACL (its id derives from its content)
    features                        the finalized feature levels; its mod_revision is their epoch

Differs from Kafka: these keys are the whole metadata state, not a log of records; a key's
mod_revision plays the part of a record's offset.
"""

from __future__ import annotations

import json

from ..records import BrokerRegistration

__all__ = ["KeySpace", "FENCED_SESSION", "MAX_TXN_OPS", "dumps", "chunks", "registration_json",
           "registration_from_json"]

FENCED_SESSION = " fenced"  # the suffix of a starting broker's session value
MAX_TXN_OPS = 120  # etcd refuses transactions of more than 128 operations (--max-txn-ops)


class KeySpace:
    def __init__(self, prefix: str = "/kbroker") -> None:
        self.prefix = prefix.rstrip("/")
        self.root = self.prefix.encode() + b"/"  # every key of the cluster starts so

    def key(self, *parts: object) -> bytes:
        return "/".join([self.prefix, *map(str, parts)]).encode()

    def parts(self, key: bytes) -> list[str]:
        """``[kind, name, ...]`` of a key of this space."""
        return key.decode()[len(self.prefix) + 1:].split("/")

    def kind(self, key: bytes) -> str:
        return self.parts(key)[0]

    @staticmethod
    def range_end(key: bytes) -> bytes:
        """The end of the range of keys starting with ``key``."""
        return key[:-1] + bytes([key[-1] + 1])


def dumps(value: dict | list) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def chunks(items: list, size: int = MAX_TXN_OPS) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def registration_json(r: BrokerRegistration) -> dict:
    """``host``/``port`` (the inter-broker endpoint) stay for readers of the one-endpoint form."""
    return {"node_id": r.node_id, "host": r.host, "port": r.port, "rack": r.rack,
            "incarnation_id": r.incarnation_id, "controlled_shutdown": r.controlled_shutdown,
            "endpoints": [{"listener": name, "host": host, "port": port}
                          for name, (host, port) in r.endpoints.items()]}


def registration_from_json(raw: dict) -> BrokerRegistration:
    """Also reads a registration without ``endpoints`` (written before listeners had names)."""
    endpoints = {e["listener"]: (e["host"], e["port"]) for e in raw.get("endpoints", ())}
    return BrokerRegistration(raw["node_id"], raw["host"], raw["port"], raw.get("rack"),
                              raw.get("incarnation_id", ""), raw.get("controlled_shutdown", False),
                              endpoints)
