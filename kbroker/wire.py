"""Just enough of the Kafka protocol to ask a broker who is in its cluster (standard library only).

Readiness checks of :mod:`kbroker.embedded` and the cluster launcher use it: a broker is ready
when it answers Metadata, which is what a client needs before anything else.
"""

from __future__ import annotations

import socket
import struct

METADATA = 3
METADATA_VERSION = 1


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _request(correlation_id: int, client_id: str) -> bytes:
    header = struct.pack(">hhi", METADATA, METADATA_VERSION, correlation_id) + _string(client_id)
    body = struct.pack(">i", 0)  # no topics: brokers and controller only
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _parse_brokers(frame: bytes) -> list[int]:
    pos = 4  # correlation id
    (count,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    ids = []
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", frame, pos)
        pos += 6 + host_len + 4  # host, port
        (rack_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(rack_len, 0)
        ids.append(node_id)
    return sorted(ids)


def metadata_broker_ids(host: str, port: int, timeout: float = 2.0, client_id: str = "kbroker-probe") -> list[int]:
    """The broker ids a Metadata request lists; OSError when the broker does not answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(_request(1, client_id))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        try:
            return _parse_brokers(_recv_exactly(sock, size))
        except struct.error as exc:
            raise OSError(f"malformed Metadata answer from {host}:{port}") from exc
