"""A small asyncio Kafka client for broker-to-broker requests (transaction markers).

One connection per destination, requests sent one at a time per connection and answered in
order; a broken connection is dropped and re-opened by the next request. Requests are kio
entities built from dicts; responses come back as kio entities.
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from protocol.api import request_class, request_header_version, response_class, response_header_version
from protocol.codec import build

_SIZE = struct.Struct(">i")


class _Connection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.lock = asyncio.Lock()
        self.correlation_id = 0

    async def request(self, client_id: str, api_key: int, version: int, body: Any, timeout: float) -> Any:
        async with self.lock:
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port), timeout)
                return await asyncio.wait_for(self._roundtrip(client_id, api_key, version, body), timeout)
            except BaseException:
                self.close()
                raise

    async def _roundtrip(self, client_id: str, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        cls = request_class(api_key, version)
        entity = body if isinstance(body, cls) else build(cls, body)
        out = io.BytesIO()
        entity_writer(cls)(out, entity)
        cid = client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.correlation_id, len(cid)) + cid
        if request_header_version(api_key, version) >= 2:
            header += b"\x00"
        payload = header + out.getvalue()
        self.writer.write(_SIZE.pack(len(payload)) + payload)
        await self.writer.drain()
        (size,) = _SIZE.unpack(await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        if correlation_id != self.correlation_id:
            raise ConnectionError(f"correlation id {correlation_id} != {self.correlation_id}")
        pos = 4 + (1 if response_header_version(api_key, version) >= 1 else 0)
        response, _ = entity_reader(response_class(api_key, version))(frame, pos)
        return response

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class NetworkClient:
    def __init__(self, client_id: str, timeout: float = 30.0) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.connections: dict[tuple[str, int], _Connection] = {}

    async def send(self, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        conn = self.connections.get((host, port))
        if conn is None:
            conn = self.connections[(host, port)] = _Connection(host, port)
        return await conn.request(self.client_id, api_key, version, body, self.timeout)

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()
