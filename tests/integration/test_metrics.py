"""The Prometheus endpoint serves Kafka-named metrics that move with traffic."""

import re
import urllib.request

from confluent_kafka import Producer

from tests.support.clients import create_topic


def metrics_url(broker) -> str:
    match = re.search(r"metrics_listening\s+address=(\S+)", broker.output())
    assert match, "the broker did not log its metrics address"
    return match.group(1)


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
