"""The exactly-once application of ``compat/stream_eos.py`` in Quix Streams (runs in its own venv).

A stateful per-key count in Quix's RocksDB state (changelog topic), exactly-once processing,
one incarnation per process. Each record waits ``COMPAT_RECORD_DELAY_MS`` so that a run lasts
long enough to be killed in the middle of its transactions. ``COMPAT_CLIENT_CONFIG`` (JSON,
librdkafka's settings) is the connection on a secure target.
"""

import json
import os
import time

from quixstreams import Application
from quixstreams.kafka.configuration import ConnectionConfig

DELAY_S = float(os.environ.get("COMPAT_RECORD_DELAY_MS", "2")) / 1000

SECURITY = json.loads(os.environ.get("COMPAT_CLIENT_CONFIG") or "{}")
BROKER = (ConnectionConfig.from_librdkafka_dict({"bootstrap.servers": os.environ["COMPAT_BOOTSTRAP"], **SECURITY})
          if SECURITY else os.environ["COMPAT_BOOTSTRAP"])

app = Application(
    broker_address=BROKER,
    consumer_group=os.environ["COMPAT_GROUP"],
    processing_guarantee="exactly-once",
    auto_offset_reset="earliest",
    state_dir=os.environ["COMPAT_STATE_DIR"],
    commit_interval=0.5,
    # A killed incarnation's member leaves the group after 6 s, not librdkafka's 45.
    consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    # One transactional.id for every incarnation (Quix draws a random one per process by
    # default): the next incarnation's InitProducerId fences a killed one and aborts its open
    # transaction, instead of leaving it open until its timeout. That open transaction holds
    # the changelog's last stable offset below offsets already in the local store, which Quix's
    # recovery check then refuses (InvalidStoreChangelogOffset; FINDINGS.md).
    producer_extra_config={"transactional.id": os.environ["COMPAT_GROUP"] + "-tx", "transaction.timeout.ms": 15000},
    loglevel="INFO",
)
source = app.topic(os.environ["COMPAT_INPUT"], key_deserializer="str", value_deserializer="json")
sink = app.topic(os.environ["COMPAT_OUTPUT"], key_serializer="str", value_serializer="json")


def count(value: dict, state) -> dict:
    time.sleep(DELAY_S)
    n = state.get("count", 0) + 1
    state.set("count", n)
    return {"seq": value["seq"], "count": n}


app.dataframe(source).apply(count, stateful=True).to_topic(sink)

if __name__ == "__main__":
    app.run()
