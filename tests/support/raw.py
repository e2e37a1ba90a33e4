"""A raw Kafka wire client for tests: hand-built frames over a plain socket."""

from __future__ import annotations

import io
import socket
import struct
from dataclasses import dataclass

from kio.serial import entity_reader, entity_writer

from protocol import records as rb
from protocol.api import request_class, request_header_version, response_class, response_header_version
from protocol.fast import skip_tagged_fields


class RawClient:
    client_id = "raw-test"  # the request header's client id (quotas are per client id)

    def __init__(self, bootstrap: str, timeout: float = 10.0, security=None, source: str | None = None) -> None:
        """``source``: the local address to connect from (e.g. another loopback address, which a
        broker counts as another client address). ``security`` (optional): how to reach a secure listener, an object with compat's
        ``ClientSecurity`` fields (``protocol`` SSL or SASL_SSL, ``ca``, ``cert``/``key`` for a
        client certificate, ``mechanism``/``username``/``password`` for SCRAM): TLS, then the
        SCRAM login (SaslHandshake v1, SaslAuthenticate v2) before the first request."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.correlation_id = 0
        if security is not None:
            self._secure(host, security)

    def _secure(self, host: str, security) -> None:
        import ssl

        ctx = ssl.create_default_context(cafile=str(security.ca))
        if getattr(security, "cert", None):
            ctx.load_cert_chain(str(security.cert), str(security.key))
        self.sock = ctx.wrap_socket(self.sock, server_hostname=host)
        if getattr(security, "mechanism", None):
            from scramp import ScramClient

            hs = self.call(17, 1, {"mechanism": security.mechanism})
            assert hs.error_code == 0, hs
            client = ScramClient([security.mechanism], security.username, security.password)
            first = self.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
            assert first.error_code == 0, first
            client.set_server_first(bytes(first.auth_bytes).decode())
            final = self.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
            assert final.error_code == 0, final
            client.set_server_final(bytes(final.auth_bytes).decode())

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """A whole response frame without its size prefix, or None if the broker closed."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    @staticmethod
    def header(api_key: int, version: int, correlation_id: int, client_id: str = "raw-test",
               header_version: int | None = None) -> bytes:
        hv = request_header_version(api_key, version) if header_version is None else header_version
        cid = client_id.encode()
        out = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
        return out + (b"\x00" if hv >= 2 else b"")

    def call(self, api_key: int, version: int, fields: dict) -> object:
        """Like :meth:`request`, with the request given as a dict of kio field names."""
        self.send_call(api_key, version, fields)
        return self.receive(api_key, version)

    def send_call(self, api_key: int, version: int, fields: dict) -> None:
        """Like :meth:`send`, with the request given as a dict of kio field names."""
        from protocol.codec import build

        self.send(api_key, version, build(request_class(api_key, version), fields))

    def send(self, api_key: int, version: int, body) -> None:
        """Send a kio request entity without reading the answer."""
        self.correlation_id += 1
        out = io.BytesIO()
        entity_writer(request_class(api_key, version))(out, body)
        self.send_frame(self.header(api_key, version, self.correlation_id, self.client_id) + out.getvalue())

    def request(self, api_key: int, version: int, body) -> object:
        """Send a kio request entity and decode the kio response entity."""
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def receive(self, api_key: int, version: int) -> object:
        """Read and decode the answer to the last request sent."""
        frame = self.recv_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        (cid,) = struct.unpack_from(">i", frame, 0)
        assert cid == self.correlation_id
        pos = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
        resp, _ = entity_reader(response_class(api_key, version))(frame, pos)
        return resp


def produce_request(topic: str, records: bytes, acks: int = -1, partition: int = 0):
    """A Produce v9 request entity carrying ``records`` for one partition."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

    return ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name=topic, partition_data=(
                              PartitionProduceData(index=partition, records=records),)),))


def good_batch(n: int = 3) -> bytearray:
    return rb.build_batch([(b"k%d" % i, b"v%d" % i) for i in range(n)], timestamp=1_700_000_000_000)


@dataclass(frozen=True)
class TxnDescription:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]


def _compact_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    from protocol.codec import read_uvarint

    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    return buf[pos : pos + n - 1].decode(), pos + n - 1


def describe_transaction(c: RawClient, transactional_id: str) -> TxnDescription:
    """DescribeTransactions v0 for one id, decoded by hand: kio's reader refuses the start
    time -1 that Kafka sends for a transaction that has not started."""
    from protocol.codec import build, read_uvarint

    cls = request_class(65, 0)
    out = io.BytesIO()
    entity_writer(cls)(out, build(cls, {"transactional_ids": [transactional_id]}))
    c.correlation_id += 1
    c.send_frame(c.header(65, 0, c.correlation_id) + out.getvalue())
    frame = c.recv_frame()
    if frame is None:
        raise ConnectionError("broker closed the connection")
    (cid,) = struct.unpack_from(">i", frame, 0)
    assert cid == c.correlation_id
    pos = skip_tagged_fields(frame, 4) + 4  # response header tags, throttle_time_ms
    n, pos = read_uvarint(frame, pos)
    assert n == 2, f"DescribeTransactions answered {n - 1} entries for one id"
    (error,) = struct.unpack_from(">h", frame, pos)
    txn_id, pos = _compact_string(frame, pos + 2)
    state, pos = _compact_string(frame, pos)
    timeout, start, pid, epoch = struct.unpack_from(">iqqh", frame, pos)
    pos += 22
    partitions = []
    n_topics, pos = read_uvarint(frame, pos)
    for _ in range(max(n_topics - 1, 0)):
        topic, pos = _compact_string(frame, pos)
        n_parts, pos = read_uvarint(frame, pos)
        for _ in range(max(n_parts - 1, 0)):
            partitions.append((topic, struct.unpack_from(">i", frame, pos)[0]))
            pos += 4
        pos = skip_tagged_fields(frame, pos)
    return TxnDescription(error, txn_id, state, timeout, start, pid, epoch, partitions)


def finalize_feature(bootstrap: str, feature: str, level: int) -> None:
    """Set a feature's finalized level (UpdateFeatures v1: an upgrade, else a safe downgrade),
    as ``kafka-features upgrade|downgrade`` does; raises if both are refused."""
    for upgrade_type in (1, 2):
        with RawClient(bootstrap) as c:
            r = c.call(57, 1, {"timeout": 60000, "validate_only": False, "feature_updates": [
                {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}]})
        if r.error_code == 0:
            return
    raise RuntimeError(f"{feature}={level} refused: {r.error_message}")
