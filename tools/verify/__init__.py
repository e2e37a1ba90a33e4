"""kbroker-verify: an exactly-once checker after Jepsen's Kafka workload.

Workloads record a history of what clients sent, read and committed (:mod:`.history`), under
faults (:mod:`.nemesis`, :mod:`.proxy`) against a target (:mod:`.targets`); the checker
(:mod:`.checker`) finds Jepsen's anomalies in it (lost writes, duplicates, aborted reads,
cycles) and :mod:`.report` writes the verdict, a JSON result and an HTML report.
"""
