"""The inter-broker client the marker channel uses: pipelining, ordering, reconnects."""

from __future__ import annotations

import asyncio
import io
import struct

import pytest
from kio.serial import entity_writer

from broker.network_client import NetworkClient
from protocol.api import response_class
from protocol.codec import build

MARKERS = {"markers": [{"producer_id": 7, "producer_epoch": 1, "transaction_result": True,
                        "topics": [{"name": "t", "partition_indexes": [0]}], "coordinator_epoch": 3}]}


def markers_response(producer_id: int) -> bytes:
    out = io.BytesIO()
    entity_writer(response_class(27, 1))(out, build(response_class(27, 1), {"markers": [
        {"producer_id": producer_id, "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                             "error_code": 0}]}]}]}))
    return out.getvalue()


class FakePeer:
    """Answers WriteTxnMarkers in order, each after ``delay``, echoing a request counter."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.connections = 0
        self.received = 0
        self.max_queued = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.drop_next = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        queue: asyncio.Queue = asyncio.Queue()

        async def answer() -> None:
            while True:
                correlation_id, n = await queue.get()
                await asyncio.sleep(self.delay)
                body = struct.pack(">i", correlation_id) + b"\x00" + markers_response(n)
                writer.write(struct.pack(">i", len(body)) + body)

        task = asyncio.get_running_loop().create_task(answer())
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                if self.drop_next:
                    self.drop_next = False
                    writer.close()
                    return
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                assert (api_key, version) == (27, 1)
                self.received += 1
                await queue.put((correlation_id, self.received))
                self.max_queued = max(self.max_queued, queue.qsize())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            task.cancel()


@pytest.fixture
async def peer():
    fake = FakePeer(delay=0.02)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    yield fake
    server.close()


async def test_requests_are_pipelined_on_one_connection_and_answered_in_order(peer):
    client = NetworkClient("test", lambda node: ("127.0.0.1", peer.port) if node == 2 else None)
    try:
        responses = await asyncio.gather(*(client.send_request(2, 27, 1, MARKERS) for _ in range(5)))
        assert [r.markers[0].producer_id for r in responses] == [1, 2, 3, 4, 5]
        assert peer.connections == 1 and peer.max_queued >= 2  # sent before the first answer
    finally:
        client.close()


async def test_unknown_node_and_refused_connection_raise_connection_error(peer):
    client = NetworkClient("test", lambda node: ("127.0.0.1", 1) if node == 3 else None)
    with pytest.raises(ConnectionError):
        await client.send_request(9, 27, 1, MARKERS)
    with pytest.raises(ConnectionError):
        await client.send_request(3, 27, 1, MARKERS)
    client.close()


async def test_a_broken_connection_fails_in_flight_requests_and_the_next_reconnects(peer):
    client = NetworkClient("test", lambda node: ("127.0.0.1", peer.port))
    try:
        assert (await client.send_request(2, 27, 1, MARKERS)).markers[0].producer_id == 1
        peer.drop_next = True
        with pytest.raises(ConnectionError):
            await client.send_request(2, 27, 1, MARKERS)
        assert (await client.send_request(2, 27, 1, MARKERS)).markers[0].producer_id == 2
        assert peer.connections == 2
    finally:
        client.close()


async def test_a_timed_out_request_drops_the_connection(peer):
    peer.delay = 0.5
    client = NetworkClient("test", lambda node: ("127.0.0.1", peer.port), timeout=0.1)
    try:
        with pytest.raises(TimeoutError):
            await client.send_request(2, 27, 1, MARKERS)
        peer.delay = 0
        assert (await client.send_request(2, 27, 1, MARKERS)).markers[0].producer_id == 2
        assert peer.connections == 2
    finally:
        client.close()
