"""Cluster metadata and its controller: what every broker knows of the cluster, and how it changes.

The house of Kafka's ``metadata`` module (its image, records and QuorumController with the
control managers), on a metadata store instead of a KRaft log:

- :mod:`.records`, :mod:`.image`: the records (a broker's registration, partition and topic
  states) and the image every handler reads synchronously (:class:`~.image.MetadataCache`).
- The store, behind one set of write methods: :mod:`.embedded_store` (a single broker's JSON
  snapshot and log, :mod:`.embedded_log`), or :mod:`.etcd` for a cluster: the store client
  with failover between etcd members, the broker's session, the image's loader and watch, the
  compare-and-swap writes and the controller election.
- :mod:`.controller`: the active controller's loop, its decisions (placement, partition
  changes) and the control managers the brokers write through (topics and partitions, features,
  client quotas, ACLs, SCRAM, configs, producer ids).

Differs from Kafka: no metadata log replicated to brokers; every broker reads the store
directly, writes its own requests' changes by compare-and-swap, and the controller only
elects leaders and moves partitions.
"""
