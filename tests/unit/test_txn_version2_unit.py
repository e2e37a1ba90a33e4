"""Transaction version 2 in the coordinator (in-memory broker): the epoch bump at every end,
its retries, the move to a new producer id when the epoch is exhausted, fencing, and a
PrepareCommit completed by the next coordinator at the bumped epoch."""

from __future__ import annotations

from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.state import MAX_PRODUCER_EPOCH, TxnState
from protocol.errors import ErrorCode as E
from tests.support.loop import settle
from tests.unit.test_txn_coordinator_unit import TXN, FakeBroker, restarted, wait_state
from tests.unit.test_txn_coordinator_unit import env as env  # noqa: F401  (the fixture)

S = TxnState
TV2 = 2


async def begin_v2(c: TransactionCoordinator, pid: int, epoch: int, partitions=(("data", 0),)) -> None:
    """The first produce of a TV2 transaction: its leader adds the partition."""
    assert await c.add_partitions(TXN, pid, epoch, set(partitions), transaction_version=TV2) == 0


def meta(c: TransactionCoordinator):
    return c.state.get_transaction_state(TXN)[1].meta


async def test_every_end_bumps_the_epoch_and_the_markers_carry_it(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    await begin_v2(c, pid, epoch)
    assert await c.end_transaction(TXN, pid, epoch, True, TV2) == (0, pid, epoch + 1)
    await wait_state(c, S.COMPLETE_COMMIT)
    assert broker.markers == [(("data", 0), pid, epoch + 1, True, 0)] and broker.marker_versions == [TV2]
    assert broker.txn_log()[-2:] == [(S.PREPARE_COMMIT, epoch + 1, {("data", 0)}),
                                     (S.COMPLETE_COMMIT, epoch + 1, set())]
    m = meta(c)
    assert (m.producer_epoch, m.last_producer_epoch, m.client_transaction_version) == (epoch + 1, epoch, TV2)
    # The old epoch can neither add nor end anything now; the retry of its end is answered.
    assert await c.add_partitions(TXN, pid, epoch, {("data", 1)}, transaction_version=TV2) == E.producer_fenced
    assert await c.end_transaction(TXN, pid, epoch, True, TV2) == (0, pid, epoch + 1)
    assert await c.end_transaction(TXN, pid, epoch, False, TV2) == (E.invalid_txn_state, -1, -1)


async def test_an_exhausted_epoch_moves_to_a_new_producer_id_with_no_gap_in_fencing(env):
    broker, c = env
    _, pid, _ = await c.init_producer_id(TXN, 60000)
    meta(c).producer_epoch = epoch = MAX_PRODUCER_EPOCH - 2
    await begin_v2(c, pid, epoch)
    assert await c.end_transaction(TXN, pid, epoch, True, TV2) == (0, pid, epoch + 1)  # Short.MAX - 1
    await wait_state(c, S.COMPLETE_COMMIT)
    await begin_v2(c, pid, epoch + 1)
    code, new_pid, new_epoch = await c.end_transaction(TXN, pid, epoch + 1, True, TV2)
    assert (code, new_epoch) == (0, 0) and new_pid not in (pid, -1)
    await wait_state(c, S.COMPLETE_COMMIT)
    # The markers end the old producer id at Short.MAX_VALUE: nothing of it lands after them.
    assert broker.markers[-1] == (("data", 0), pid, MAX_PRODUCER_EPOCH, True, 0)
    m = meta(c)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (new_pid, 0, pid)
    assert await c.end_transaction(TXN, pid, epoch + 1, True, TV2) == (0, new_pid, 0)  # a retry
    assert await c.add_partitions(TXN, pid, epoch + 1, {("data", 1)}, TV2) == E.invalid_producer_id_mapping
    await begin_v2(c, new_pid, 0)
    assert await c.end_transaction(TXN, new_pid, 0, False, TV2) == (0, new_pid, 1)


async def test_a_new_incarnation_fences_a_tv2_transaction_at_the_next_epoch(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    await begin_v2(c, pid, epoch)
    assert (await c.init_producer_id(TXN, 60000))[0] == E.concurrent_transactions  # aborting
    await wait_state(c, S.COMPLETE_ABORT)
    assert broker.markers == [(("data", 0), pid, epoch + 1, False, 0)]
    assert await c.init_producer_id(TXN, 60000) == (0, pid, epoch + 2)
    assert await c.end_transaction(TXN, pid, epoch, False, TV2) == (E.producer_fenced, -1, -1)


async def test_an_empty_abort_bumps_and_commit_without_a_transaction_is_refused(env):
    broker, c = env
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    assert await c.end_transaction(TXN, pid, epoch, True, TV2) == (E.invalid_txn_state, -1, -1)
    assert await c.end_transaction(TXN, pid, epoch, False, TV2) == (0, pid, epoch + 1)
    await wait_state(c, S.COMPLETE_ABORT)
    assert broker.markers == []  # nothing to mark
    assert await c.end_transaction(TXN, pid, epoch + 1, False, TV2) == (0, pid, epoch + 2)


async def test_a_tv2_prepare_commit_is_completed_by_the_next_coordinator_at_the_bumped_epoch():
    broker = FakeBroker(**{"test.fault.points": "txn.markers.pause"})
    c = TransactionCoordinator(broker, broker.timer)
    await c.start()
    c.coordinator_error(TXN)
    _, pid, epoch = await c.init_producer_id(TXN, 60000)
    await begin_v2(c, pid, epoch)
    assert await c.end_transaction(TXN, pid, epoch, True, TV2) == (0, pid, epoch + 1)
    await settle()
    assert broker.markers == [] and broker.txn_log()[-1][0] is S.PREPARE_COMMIT
    await c.stop()  # the coordinator dies between PrepareCommit and its markers
    c2 = await restarted(broker)
    try:
        await wait_state(c2, S.COMPLETE_COMMIT)
        assert broker.markers == [(("data", 0), pid, epoch + 1, True, 1)] and broker.marker_versions == [TV2]
        assert broker.txn_log()[-1] == (S.COMPLETE_COMMIT, epoch + 1, set())
        # The producer carries on at the epoch its EndTxn was answered.
        assert await c2.add_partitions(TXN, pid, epoch + 1, {("data", 1)}, transaction_version=TV2) == 0
        assert await c2.end_transaction(TXN, pid, epoch + 1, True, TV2) == (0, pid, epoch + 2)
    finally:
        await c2.stop()


async def test_the_cluster_level_chooses_how_a_timed_out_transaction_is_aborted(env):
    broker, c = env
    broker.tv = 1
    _, pid, epoch = await c.init_producer_id(TXN, 1000)
    assert await c.add_partitions(TXN, pid, epoch, {("data", 0)}) == 0
    broker.clock += 5000
    assert c.abort_timed_out_transactions() == 1
    await wait_state(c, S.COMPLETE_ABORT)
    assert broker.markers == [(("data", 0), pid, epoch + 1, False, 0)] and broker.marker_versions == [0]
