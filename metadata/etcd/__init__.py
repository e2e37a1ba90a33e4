"""The etcd backend of cluster metadata, by job: the store client and its failover
(:mod:`.client`), the key space (:mod:`.keys`), a broker's session (:mod:`.session`), the image
and its watch (:mod:`.loader`), the writes (:mod:`.writer`), the controller election
(:mod:`.election`), and the store that wires them for a broker (:mod:`.store`)."""
