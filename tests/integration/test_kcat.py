"""kcat (librdkafka's CLI, Debian package ``kcat``) against the broker.

- ``kcat -L`` (text and ``-J``) lists this broker (as controller) and the topic with its
  partitions, leaders, replicas and ISRs.
- ``kcat -P -K :`` (with ``-z`` for gzip/snappy/lz4/zstd) produces keyed lines; ``kcat -C -e
  -o beginning`` reads exactly those lines back: the same (key, value) pairs, per partition
  in input order with contiguous offsets from 0; the stored batches carry the codec asked for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from types import SimpleNamespace

import pytest

from tests.support.workload import CODECS, verify_stored_codec

KCAT = shutil.which("kcat")
PARTITIONS = 3
LINES = 3000

pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (Debian/Ubuntu: apt-get install -y kcat)")


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future resolves
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)


def _kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> bytes:
    res = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout,
                         check=False)
    assert res.returncode == 0, (f"kcat {' '.join(args)} exited {res.returncode}:\n"
                                 f"{res.stderr.decode(errors='replace')[-3000:]}")
    return res.stdout


def _lines(n: int) -> list[tuple[bytes, bytes]]:
    """Keyed, compressible lines; some values empty, some non-ASCII, sizes 0..~1 KiB."""
    words = ["lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
             "sed", "do", "eiusmod", "tempor"]
    out = []
    for i in range(n):
        key = b"key-%05d" % i
        if i % 53 == 7:
            value = b""
        else:
            text = " ".join(words[(i + j) % len(words)] for j in range(i % 150))
            value = f"line {i} ünïcødé ✓ {text}".encode()
        out.append((key, value))
    return out


def test_kcat_metadata_lists_broker_and_topics(broker, topic_name):
    _create_topic(broker.bootstrap, topic_name, PARTITIONS)
    host, port = broker.bootstrap.split(":")

    text = _kcat("-b", broker.bootstrap, "-L").decode()
    assert " 1 brokers:" in text, text
    assert f"at {host}:{port} (controller)" in text, text
    assert f'topic "{topic_name}" with {PARTITIONS} partitions:' in text, text

    meta = json.loads(_kcat("-b", broker.bootstrap, "-L", "-J", "-t", topic_name))
    assert [b["name"] for b in meta["brokers"]] == [f"{host}:{port}"]
    node = meta["brokers"][0]["id"]
    assert meta["controllerid"] == node
    (topic,) = meta["topics"]
    assert topic["topic"] == topic_name and "error" not in topic, topic
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(PARTITIONS))
    for p in topic["partitions"]:
        assert p["leader"] == node, p
        assert [r["id"] for r in p["replicas"]] == [node]
        assert [r["id"] for r in p["isrs"]] == [node]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_consume(codec, broker, topic_name):
    _create_topic(broker.bootstrap, topic_name, PARTITIONS)
    lines = _lines(LINES)
    produce = ["-b", broker.bootstrap, "-P", "-t", topic_name, "-K", ":", "-X", "linger.ms=50"]
    if codec != "none":
        produce += ["-z", codec]
    _kcat(*produce, stdin=b"".join(k + b":" + v + b"\n" for k, v in lines))

    out = _kcat("-b", broker.bootstrap, "-C", "-t", topic_name, "-e", "-o", "beginning",
                "-f", "%p\t%o\t%k\t%s\n")
    got = defaultdict(list)  # partition -> [(offset, key, value)]
    for row in out.split(b"\n")[:-1]:
        p, o, k, v = row.split(b"\t", 3)
        got[int(p)].append((int(o), k, v))

    assert sum(len(v) for v in got.values()) == LINES, "consumed a different number of lines"
    assert sorted((k, v) for rows in got.values() for _, k, v in rows) == sorted(lines)
    order = {k: i for i, (k, _) in enumerate(lines)}
    for p, rows in got.items():
        assert [o for o, _, _ in rows] == list(range(len(rows))), f"partition {p}: offsets"
        idx = [order[k] for _, k, _ in rows]
        assert idx == sorted(idx), f"partition {p}: lines out of input order"

    counts = [SimpleNamespace(partition=p) for p, rows in got.items() for _ in rows]
    verify_stored_codec(broker.log_dir, topic_name, PARTITIONS, codec, counts)
