"""The exactly-once application of ``compat/stream_eos.py`` in faust-streaming (runs in its own venv).

An agent keeps a per-key count in a table (in memory, rebuilt from its changelog topic on start)
with ``processing_guarantee="exactly_once"``, and sends ``{"seq", "count"}`` under the same key.
Each record waits ``COMPAT_RECORD_DELAY_MS`` so that a run lasts long enough to be killed in the
middle of its transactions. Started as ``python eos_app.py worker``.
"""

import asyncio
import os

import faust

DELAY_S = float(os.environ.get("COMPAT_RECORD_DELAY_MS", "2")) / 1000

app = faust.App(
    os.environ["COMPAT_GROUP"],
    broker=f"kafka://{os.environ['COMPAT_BOOTSTRAP']}",
    processing_guarantee="exactly_once",
    store="memory://",
    datadir=os.environ["COMPAT_STATE_DIR"],
    topic_partitions=int(os.environ.get("COMPAT_PARTITIONS", "4")),
    topic_replication_factor=int(os.environ.get("COMPAT_REPLICATION_FACTOR", "1")),
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6.0,
    broker_heartbeat_interval=0.5,
    broker_commit_every=100,
    broker_commit_interval=0.5,
    web_enabled=False,
)
source = app.topic(os.environ["COMPAT_INPUT"], key_type=str, key_serializer="raw", value_serializer="json")
sink = app.topic(os.environ["COMPAT_OUTPUT"], key_type=str, key_serializer="raw", value_serializer="json")
counts = app.Table("counts", default=int)


@app.agent(source)
async def process(stream):
    async for key, value in stream.items():
        await asyncio.sleep(DELAY_S)
        counts[key] += 1
        await sink.send(key=key, value={"seq": value["seq"], "count": counts[key]})


if __name__ == "__main__":
    app.main()
