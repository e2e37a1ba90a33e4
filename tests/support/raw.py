"""A raw Kafka wire client for tests: hand-built frames over a plain socket."""

from __future__ import annotations

import io
import socket
import struct

from kio.serial import entity_reader, entity_writer

from protocol import records as rb
from protocol.api import request_class, request_header_version, response_class, response_header_version


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

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
        from protocol.codec import build

        return self.request(api_key, version, build(request_class(api_key, version), fields))

    def request(self, api_key: int, version: int, body) -> object:
        """Send a kio request entity and decode the kio response entity."""
        self.correlation_id += 1
        out = io.BytesIO()
        entity_writer(request_class(api_key, version))(out, body)
        self.send_frame(self.header(api_key, version, self.correlation_id) + out.getvalue())
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
