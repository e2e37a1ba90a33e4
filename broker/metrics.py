"""Prometheus metrics, named after Kafka's JMX metrics where one exists, served over HTTP.

Kafka's ``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce`` becomes
``kafka_network_requestmetrics_requests_total{request="Produce"}``, and so on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = structlog.get_logger("broker.metrics")


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests by API",
                                ["request", "version"], registry=r)
        self.errors = Counter("kafka_network_requestmetrics_errors", "Error codes in responses",
                              ["request", "error"], registry=r)
        self.request_time = Histogram(
            "kafka_network_requestmetrics_totaltimems", "Request total time in milliseconds",
            ["request"], registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 30000))
        self.bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "Bytes appended from clients",
                                ["topic"], registry=r)
        self.bytes_out = Counter("kafka_server_brokertopicmetrics_bytesout", "Bytes fetched by clients",
                                 ["topic"], registry=r)
        self.messages_in = Counter("kafka_server_brokertopicmetrics_messagesin",
                                   "Records appended", ["topic"], registry=r)
        self.connections = Gauge("kafka_server_socketservermetrics_connection_count",
                                 "Open client connections", registry=r)
        self.connections_rejected = Counter("kbroker_connections_rejected",
                                            "Connections closed at once for a connection limit, by listener",
                                            ["listener"], registry=r)
        self.closed_bad_input = Counter("kbroker_connections_closed_invalid_request",
                                        "Connections closed for an unreadable or unsupported request",
                                        ["reason"], registry=r)
        # Kafka's socket-server-metrics successful-/failed-authentication-total, per listener.
        self.successful_authentication = Counter("kafka_server_socketservermetrics_successful_authentication",
                                                 "Completed SASL authentications", ["listener"], registry=r)
        self.failed_authentication = Counter("kafka_server_socketservermetrics_failed_authentication",
                                             "Failed TLS principal mappings and SASL authentications",
                                             ["listener"], registry=r)
        # Kafka's Produce / Fetch / Request / ControllerMutation throttle-time, summed (ms), by quota kind.
        self.quota_throttle_time = Counter("kafka_server_quota_throttle_time",
                                           "Milliseconds clients were throttled for exceeding a quota",
                                           ["quota"], registry=r)
        # ... successful-reauthentication-total and expired-connections-killed-count (KIP-368).
        self.successful_reauthentication = Counter("kafka_server_socketservermetrics_successful_reauthentication",
                                                   "Completed SASL re-authentications", ["listener"], registry=r)
        self.expired_connections_killed = Counter(
            "kafka_server_socketservermetrics_expired_connections_killed",
            "Connections closed because their SASL session expired before they re-authenticated",
            ["listener"], registry=r)
        self.txn_events = Counter("kbroker_transaction_coordinator_events",
                                  "Fences, forced aborts, id expiries and producer-id rotations, by reason",
                                  ["event", "reason"], registry=r)
        # The metadata store: reachable (under its older name too, for dashboards made before it
        # was etcd's), how often the client moved to another etcd member, and the one it uses.
        self._store_connected = [Gauge(name, "1 while the cluster's etcd has a member with a quorum that answers "
                                             "this broker (always 1 embedded)", registry=r)
                                 for name in ("kbroker_etcd_connected", "kbroker_metadata_store_connected")]
        self.set_store_connected(True)
        self.etcd_member_switches = Counter("kbroker_etcd_member_switches",
                                            "Times the etcd client moved to another member (a member failed, "
                                            "lost its quorum or left)", registry=r)
        self.etcd_member = Gauge("kbroker_etcd_member_in_use", "1 for the etcd member this broker talks to",
                                 ["endpoint"], registry=r)
        self.under_replicated = Gauge("kafka_server_replicamanager_underreplicatedpartitions",
                                      "Partitions led here whose ISR is smaller than their replica set",
                                      registry=r)
        self.leader_count = Gauge("kafka_server_replicamanager_leadercount", "Partitions led here",
                                  registry=r)
        self.active_controller = Gauge("kafka_controller_kafkacontroller_activecontrollercount",
                                       "1 on the broker that is the controller", registry=r)
        self.log_truncations = Counter("kafka_log_recovery_truncated_bytes",
                                       "Bytes cut from torn or corrupt log tails at start-up", registry=r)
        # Kafka's kafka.server:type=FetchSessionCache metrics, read when scraped (broker.py sets them).
        self.fetch_sessions = Gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                    "Fetch sessions (KIP-227) in the cache", registry=r)
        self.fetch_session_partitions = Gauge("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                                              "Partitions held by all fetch sessions", registry=r)
        self.fetch_sessions_by_kind = Gauge("kbroker_fetchsessioncache_sessions",
                                            "Fetch sessions in the cache, of followers and of consumers",
                                            ["kind"], registry=r)
        self.fetch_session_evictions = Gauge("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                                             "Fetch sessions evicted to make room, since start", registry=r)

    def set_store_connected(self, connected: bool) -> None:
        for gauge in self._store_connected:
            gauge.set(1 if connected else 0)

    def store_member_switched(self, previous: str | None, now: str) -> None:
        if previous is not None:
            self.etcd_member.labels(previous).set(0)
            self.etcd_member_switches.inc()
        self.etcd_member.labels(now).set(1)

    def watch_partitions(self, partitions: Callable[[], Mapping[tuple[str, int], Any]]) -> None:
        """Per-partition log offsets, read from ``partitions`` ({(topic, index): Partition}) when
        scraped, as Kafka's ``kafka.log:type=Log`` gauges are read: no work between scrapes,
        and a partition that is gone is gone from the answer."""
        self.registry.register(_PartitionGauges(partitions))

    def watch_quotas(self, managers: Mapping[str, Any]) -> None:
        """Kafka's per-entity quota metrics (``kafka_server_produce_byte_rate``, ...), computed
        from the quota managers' sensors when scraped (broker.quotas.collect_quota_metrics)."""
        from broker.quotas import collect_quota_metrics

        self.registry.register(_Computed(lambda: collect_quota_metrics(managers)))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Computed(Collector):
    """Families computed by ``families()`` at each scrape."""

    def __init__(self, families: Callable[[], Any]) -> None:
        self.families = families

    def describe(self):
        return []  # computed at collection; nothing to check at registration

    def collect(self):
        yield from self.families()


class _PartitionGauges(Collector):
    def __init__(self, partitions: Callable[[], Mapping[tuple[str, int], Any]]) -> None:
        self.partitions = partitions

    def describe(self):
        return []  # computed at collection; nothing to check at registration

    def collect(self):
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset", labels=["topic", "partition"])
        for (topic, index), part in list(self.partitions().items()):
            labels = [topic, str(index)]
            end.add_metric(labels, part.log.log_end_offset)
            start.add_metric(labels, part.log.log_start_offset)
        yield end
        yield start


async def serve_metrics(metrics: Metrics, host: str, port: int) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            body = metrics.render()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    log.info("metrics_listening", address=f"http://{host}:{server.sockets[0].getsockname()[1]}/metrics")
    return server
