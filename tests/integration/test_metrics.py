"""The Prometheus endpoint serves Kafka-named metrics that move with traffic."""

import re
import time
import urllib.request

from confluent_kafka import Producer

from tests.support.clients import create_topic


def metrics_url(broker) -> str:
    """The address the broker's current incarnation logged (a restarted one logs it again)."""
    found = re.findall(r"metrics_listening\s+address=(\S+)", broker.output())
    assert found, "the broker did not log its metrics address"
    return found[-1]


def scrape(broker) -> str:
    with urllib.request.urlopen(metrics_url(broker), timeout=5) as resp:
        return resp.read().decode()


def test_metrics_count_requests_and_bytes(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(10):
        p.produce(topic_name, value=b"x" * 100)
    assert p.flush(10) == 0
    text = scrape(broker)
    assert re.search(r'kafka_network_requestmetrics_requests_total\{request="Produce",version="\d+"\} \d', text)
    assert re.search(r'kafka_network_requestmetrics_totaltimems_bucket\{le="[^"]+",request="Metadata"\}', text)
    bytes_in = re.search(rf'kafka_server_brokertopicmetrics_bytesin_total\{{topic="{topic_name}"\}} (\S+)', text)
    assert bytes_in and float(bytes_in.group(1)) >= 1000


def test_partition_and_replica_gauges_are_read_when_scraped(broker, topic_name):
    """kafka.log:type=Log offsets and the replica manager's counts are current at every scrape
    (computed then, as Kafka's gauges are), and a deleted topic's partitions leave the answer."""
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, topic_name, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(7):
        p.produce(topic_name, value=b"y", partition=1)
    assert p.flush(10) == 0
    text = scrape(broker)
    assert re.search(rf'^kafka_log_log_logendoffset\{{partition="1",topic="{topic_name}"\}} 7\.0$', text, re.M)
    assert re.search(rf'^kafka_log_log_logstartoffset\{{partition="0",topic="{topic_name}"\}} 0\.0$', text, re.M)
    leaders = re.search(r"^kafka_server_replicamanager_leadercount (\S+)$", text, re.M)
    assert leaders and float(leaders.group(1)) >= 2
    assert re.search(r"^kafka_controller_kafkacontroller_activecontrollercount 1\.0$", text, re.M)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(20)
    for _ in range(100):
        if f'topic="{topic_name}"' not in "\n".join(
                line for line in scrape(broker).splitlines() if line.startswith("kafka_log_log_")):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the deleted topic's partitions are still in the log gauges")
