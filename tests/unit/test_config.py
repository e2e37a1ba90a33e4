"""Configuration: Kafka's keys, clear errors, close-match warnings, properties parsing."""

import subprocess
import sys

import pytest

from broker.config import ConfigError, load_config, parse_properties
from tests.support.broker_process import REPO


def test_single_node_defaults_apply():
    c = load_config({})
    assert c["offsets.topic.replication.factor"] == 1
    assert c["transaction.state.log.min.isr"] == 1
    assert c["group.initial.rebalance.delay.ms"] == 0
    assert c.listener() == ("localhost", 9092)


def test_bad_value_names_the_key():
    with pytest.raises(ConfigError, match="num.partitions"):
        load_config({"num.partitions": "zero"})
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        load_config({"log.segment.bytes": "3"})


def test_unknown_key_suggests_closest():
    c = load_config({"log.retention.hour": "5", "confluent.plugin.x": "1"})
    assert any("did you mean log.retention.hours" in w for w in c.unknown)
    with pytest.raises(ConfigError, match="Unknown configuration"):
        load_config({"log.retention.hour": "5"}, strict=True)


def test_retention_precedence():
    assert load_config({"log.retention.hours": "1"}).retention_ms == 3_600_000
    assert load_config({"log.retention.minutes": "2", "log.retention.hours": "1"}).retention_ms == 120_000
    assert load_config({"log.retention.ms": "5", "log.retention.minutes": "2"}).retention_ms == 5


def test_properties_format():
    props = parse_properties("# comment\n! also\nlisteners=PLAINTEXT://:9093\nlog.dirs : /tmp/x\n"
                             "num.partitions 3\nlong.value=a,\\\n    b\n")
    assert props == {"listeners": "PLAINTEXT://:9093", "log.dirs": "/tmp/x", "num.partitions": "3",
                     "long.value": "a,b"}


def test_cli_bad_value_exits_with_one_line_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "broker", "--override", "num.partitions=-4",
                           "--override", f"log.dirs={tmp_path}"], cwd=REPO, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2
    assert "num.partitions" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_strict_config_rejects_unknown_key(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "broker", "--strict-config", "--override",
                           "log.segmant.bytes=1000", "--override", f"log.dirs={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "log.segment.bytes" in proc.stderr
