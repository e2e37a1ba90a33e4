"""The exactly-once checker's analysis (tools/verify/checker.py) on small synthetic histories:
one per anomaly kind, each asserting the ops that show it, and correct histories that pass."""

from __future__ import annotations

import json
import time

import pytest

from tools.verify.checker import check, main
from tools.verify.history import FAIL, INFO, INVOKE, OK, HistoryWriter, Op, read_history


def send(k, offset, v):
    return ["send", k, [offset, v]]


def poll(reads):
    return ["poll", {k: [[o, v] for o, v in pairs] for k, pairs in reads.items()}]


class H:
    """A history builder: each op is invoked and completed at once unless split."""

    def __init__(self):
        self.ops: list[Op] = []

    def add(self, process, type_, f, value=None, **extra):
        op = Op(len(self.ops), float(len(self.ops)), process, type_, f, value, None, extra)
        self.ops.append(op)
        return op

    def invoke(self, process, mops, f="txn"):
        value = [["send", m[1], m[2][1]] if m[0] == "send" else ["poll", None] for m in mops]
        return self.add(process, INVOKE, f, value)

    def complete(self, process, mops, type_=OK, f="txn"):
        return self.add(process, type_, f, mops)

    def op(self, process, mops, type_=OK, f="txn"):
        self.invoke(process, mops, f)
        return self.complete(process, mops, type_, f)

    def final(self, reads):
        return self.add("checker", OK, "final-read", {k: [[o, v] for o, v in p] for k, p in reads.items()})


def indices(result, kind):
    return [sorted(o["index"] for o in a.ops) for a in result.anomalies[kind]]


# --------------------------------------------------------------------------- correct histories

def correct_history(n_txns=60, keys=("t/0", "t/1", "t/2")):
    """Three producers with interleaved transactions (some aborted, some indeterminate and
    never visible), an assigned consumer polling in order, a read-process-write txn, and a
    final read. Each commit or abort leaves a control record (an offset no one reads)."""
    h = H()
    next_offset = dict.fromkeys(keys, 0)
    committed = {k: [] for k in keys}
    value = 0
    for i in range(n_txns):
        p1, p2 = i % 3, (i + 1) % 3 + 10  # two producers overlap in time
        batches = []
        for p in (p1, p2):
            mops = []
            for k in keys[: 1 + (i + p) % len(keys)]:
                value += 1
                mops.append(send(k, next_offset[k], value))
                next_offset[k] += 1
            batches.append((p, mops))
        for p, mops in batches:
            h.invoke(p, mops)
        for j, (p, mops) in enumerate(batches):
            outcome = FAIL if i % 7 == 3 and j == 0 else INFO if i % 11 == 5 and j == 1 else OK
            if outcome == INFO:  # a crash: no offsets learnt, never committed
                mops = [["send", m[1], [None, m[2][1]]] for m in mops]
            h.complete(p, mops, outcome)
            for m in mops:
                if outcome == OK:
                    committed[m[1]].append((m[2][0], m[2][1]))
            for k in {m[1] for m in mops}:  # commit/abort marker
                next_offset[k] += 1
    # an assigned consumer polling each key in order, in three batches
    h.add(50, INVOKE, "assign", list(keys))
    h.add(50, OK, "assign", list(keys))
    for k in keys:
        vals = committed[k]
        for chunk in (vals[:5], vals[5:12], vals[12:]):
            h.op(50, [poll({k: chunk})], f="poll")
    # a read-process-write transaction: reads t/0, writes a fresh value to t/1
    value += 1
    h.op(60, [poll({keys[0]: committed[keys[0]][:2]}), send(keys[1], next_offset[keys[1]], value)])
    committed[keys[1]].append((next_offset[keys[1]], value))
    h.final(committed)
    return h


def test_correct_history_is_valid():
    h = correct_history()
    r = check(h.ops)
    assert r.valid, r.verdict_line()
    assert r.verdict_line().startswith("valid: true")
    assert not r.bad_error_types
    for kind in ("lost-write", "duplicate", "G1a", "precommitted-read", "inconsistent-offsets",
                 "poll-skip", "nonmonotonic-poll", "G1c"):
        assert kind not in r.counts
    assert r.stats["ops"][FAIL] > 0 and r.stats["ops"][INFO] > 0
    assert r.stats["unseen"]["count"] == 0
    assert r.stats["final-read"] is True


def test_empty_history_is_valid():
    r = check([])
    assert r.valid
    assert r.verdict_line() == "valid: true  (no anomalies)"


def test_history_round_trips_through_writer_and_cli(tmp_path, capsys):
    path = str(tmp_path / "history.jsonl")
    w = HistoryWriter(path)
    for op in correct_history(n_txns=10).ops:
        w.record(op.process, op.type, op.f, op.value)
    w.close()
    r = check(read_history(path))
    assert r.valid
    json.dumps(r.to_json())  # serialisable as is
    assert main([path]) == 0
    out = capsys.readouterr().out
    assert out.strip() == r.verdict_line()
    assert out.count("\n") == 1


# --------------------------------------------------------------------------- lost writes

def test_lost_write_below_a_later_read_value():
    h = H()
    h.op(1, [send("k/0", 0, 1)])
    lost = h.op(1, [send("k/0", 1, 2)])
    h.op(2, [send("k/0", 2, 3)])
    reader = h.op(3, [poll({"k/0": [(0, 1), (2, 3)]})], f="poll")
    r = check(h.ops)
    assert not r.valid
    assert r.counts["lost-write"] == 1
    a = r.anomalies["lost-write"][0]
    assert "value 2" in a.description and "offset 1" in a.description
    assert [o["index"] for o in a.ops] == [lost.index, reader.index]
    assert r.verdict_line().startswith("valid: false  lost-write=1")


def test_info_write_proven_by_a_read_then_lost():
    h = H()
    crashed = h.op(1, [send("k/0", 0, 1), send("k/0", 1, 2)], type_=INFO)
    h.op(2, [send("k/0", 2, 3)])
    h.op(3, [poll({"k/0": [(0, 1)]})], f="poll")  # proves the info txn committed
    h.final({"k/0": [(0, 1), (2, 3)]})
    r = check(h.ops)
    assert r.counts.get("lost-write") == 1
    assert r.anomalies["lost-write"][0].ops[0]["index"] == crashed.index


def test_read_uncommitted_polls_do_not_prove_an_info_write_committed():
    h = H()
    h.op(1, [send("k/0", 0, 1), send("k/0", 1, 2)], type_=INFO)
    h.op(2, [send("k/0", 2, 3)])
    h.op(3, [poll({"k/0": [(0, 1)]})], f="poll")
    h.final({"k/0": [(2, 3)]})  # the final, read_committed read never saw the info txn
    # 2 is lost (its transaction committed: 1 was read), and so is 1, read once, gone at the end
    assert check(h.ops).counts.get("lost-write") == 2
    assert "lost-write" not in check(h.ops, isolation="read_uncommitted").counts


def test_unproven_info_write_is_not_lost_but_an_ok_one_missing_at_the_tail_is():
    h = H()
    h.op(1, [send("k/0", 0, 1)], type_=INFO)  # never read: may never have committed
    h.op(2, [send("k/0", 1, 2)])
    h.op(2, [send("k/0", 2, 3)])  # ok, at the tail, never read: Jepsen's rule cannot see it
    h.final({"k/0": [(1, 2)]})
    r = check(h.ops)
    assert r.counts == {"lost-write": 1}
    assert "value 3 " in r.anomalies["lost-write"][0].description
    assert r.stats["unseen"]["sample"] == [["k/0", 3]]


def test_a_final_read_marked_incomplete_for_a_key_proves_no_tail_loss():
    h = H()
    h.op(2, [send("k/0", 0, 1)])
    h.op(2, [send("k/0", 1, 2)])
    h.final({"k/0": [(0, 1)]})
    h.ops[-1].extra["incomplete"] = ["k/0"]
    assert "lost-write" not in check(h.ops).counts


# --------------------------------------------------------------------------- duplicates, offsets

def test_duplicate_value_at_two_offsets():
    h = H()
    w = h.op(1, [send("k/0", 0, 7)])
    h.final({"k/0": [(0, 7), (1, 7)]})
    r = check(h.ops)
    assert r.counts == {"duplicate": 1}
    a = r.anomalies["duplicate"][0]
    assert "[0, 1]" in a.description
    assert w.index in [o["index"] for o in a.ops]


def test_inconsistent_offsets():
    h = H()
    w = h.op(1, [send("k/0", 0, 1)])
    reader = h.op(2, [poll({"k/0": [(0, 2)]})], f="poll")
    r = check(h.ops)
    assert r.counts.get("inconsistent-offsets") == 1
    assert not r.valid
    assert sorted(o["index"] for o in r.anomalies["inconsistent-offsets"][0].ops) == \
        sorted([w.index, reader.index])


# --------------------------------------------------------------------------- aborted and early reads

@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_g1a_aborted_read(isolation):
    h = H()
    aborted = h.op(1, [send("k/0", 0, 1)], type_=FAIL)
    h.op(1, [send("k/0", 2, 2)])
    reader = h.op(2, [poll({"k/0": [(0, 1), (2, 2)]})], f="poll")
    r = check(h.ops, isolation=isolation)
    assert not r.valid
    assert r.counts["G1a"] == 1
    assert indices(r, "G1a") == [[aborted.index, reader.index]]


def test_value_resent_by_an_ok_txn_after_an_abort_is_not_g1a():
    h = H()
    h.op(1, [send("out/0", 0, 5)], type_=FAIL)
    h.op(2, [send("out/0", 2, 5)])
    h.final({"out/0": [(2, 5)]})
    assert check(h.ops).valid


def test_a_value_read_at_another_offset_than_its_aborted_write_is_not_g1a():
    """A killed copier's re-send of the value left no completion: the copy read at offset 9
    is not the aborted one at offset 4, which the read does not contain."""
    h = H()
    h.op(1, [send("out/0", 4, 5)], type_=FAIL)
    h.final({"out/0": [(9, 5)]})
    assert "G1a" not in check(h.ops).counts
    h.final({"out/0": [(4, 5)]})
    assert check(h.ops).counts.get("G1a") == 1


def test_an_aborted_transaction_reading_its_own_send_is_precommitted_read_not_g1a():
    h = H()
    h.op(1, [send("k/0", 0, 1), poll({"k/0": [(0, 1)]})], type_=FAIL)
    assert set(check(h.ops, isolation="read_uncommitted").counts) == {"precommitted-read"}


def test_precommitted_read_of_own_send():
    h = H()
    t = h.op(1, [send("k/0", 0, 1), poll({"k/0": [(0, 1)]})])
    r = check(h.ops)
    assert r.counts.get("precommitted-read") == 1
    assert indices(r, "precommitted-read") == [[t.index]]
    assert not r.valid


def test_read_from_the_future_is_precommitted_read_and_g1c_process():
    h = H()
    reader = h.op(1, [poll({"k/0": [(0, 9)]})])
    later = h.op(1, [send("k/0", 0, 9)])  # same process, invoked after the read completed
    r = check(h.ops)
    assert not r.valid
    assert r.counts["precommitted-read"] == 1
    assert reader.index in indices(r, "precommitted-read")[0]
    assert r.counts["G1c-process"] == 1
    assert indices(r, "G1c-process") == [[reader.index, later.index]]


# --------------------------------------------------------------------------- poll orders

def _two_polls(first, second, process=5, f="assign"):
    h = H()
    for i in range(6):
        h.op(1, [send("k/0", i, 100 + i)])
    h.add(process, OK, f, ["k/0"])
    a = h.op(process, [poll({"k/0": first})], f="poll")
    b = h.op(process, [poll({"k/0": second})], f="poll")
    h.final({"k/0": [(i, 100 + i) for i in range(6)]})
    return h, a, b


def test_poll_skip_for_an_assigned_consumer():
    h, a, b = _two_polls([(0, 100), (1, 101)], [(3, 103), (4, 104), (5, 105)])
    r = check(h.ops)
    assert not r.valid
    assert r.counts == {"poll-skip": 1}
    assert indices(r, "poll-skip") == [[a.index, b.index]]
    assert "102" in r.anomalies["poll-skip"][0].description


def test_nonmonotonic_poll_for_an_assigned_consumer():
    h, a, b = _two_polls([(0, 100), (1, 101), (2, 102)], [(1, 101), (2, 102)])
    r = check(h.ops)
    assert r.counts == {"nonmonotonic-poll": 1}
    assert indices(r, "nonmonotonic-poll") == [[a.index, b.index]]
    assert not r.valid


def test_subscriber_skips_are_allowed_for_its_polls_only():
    h, _, _ = _two_polls([(0, 100), (1, 101)], [(3, 103)], process=5, f="subscribe")
    r = check(h.ops, subscribe_processes={5})
    assert r.valid and r.counts == {"poll-skip": 1}
    assert r.verdict_line() == "valid: true  poll-skip=1"
    # an assigned process making the same skip in the same history is still bad
    h.add(6, OK, "assign", ["k/0"])
    h.op(6, [poll({"k/0": [(0, 100)]})], f="poll")
    h.op(6, [poll({"k/0": [(2, 102)]})], f="poll")
    r = check(h.ops, subscribe_processes={5})
    assert not r.valid and r.counts["poll-skip"] == 2 and r.bad_error_types == ["poll-skip"]


def test_assigning_away_forgets_positions():
    h = H()
    for i in range(6):
        h.op(1, [send("k/0", i, 100 + i)])
    h.add(5, OK, "assign", ["k/0"])
    h.op(5, [poll({"k/0": [(0, 100), (1, 101)]})], f="poll")
    h.add(5, OK, "assign", ["j/0"])  # k/0's position is dropped, as Jepsen does
    h.add(5, OK, "assign", ["k/0"])
    h.op(5, [poll({"k/0": [(3, 103)]})], f="poll")
    h.final({"k/0": [(i, 100 + i) for i in range(6)]})
    assert check(h.ops).valid
    h.ops = [o for o in h.ops if o.value != ["j/0"]]  # without it, the same polls skip
    assert check(h.ops).counts == {"poll-skip": 1}


def test_int_poll_skip_and_int_nonmonotonic_poll():
    h = H()
    for i in range(4):
        h.op(1, [send("k/0", i, i)])
    skip = h.op(2, [poll({"k/0": [(0, 0), (2, 2)]})], f="poll")
    back = h.op(3, [poll({"k/0": [(3, 3), (1, 1)]})], f="poll")
    h.final({"k/0": [(i, i) for i in range(4)]})
    r = check(h.ops)
    assert r.counts["int-poll-skip"] == 1 and r.counts["int-nonmonotonic-poll"] == 1
    assert indices(r, "int-poll-skip") == [[skip.index]]
    assert indices(r, "int-nonmonotonic-poll") == [[back.index]]
    assert set(r.bad_error_types) == {"int-poll-skip", "int-nonmonotonic-poll"}


# --------------------------------------------------------------------------- send orders

def test_int_send_skip_is_allowed_and_int_nonmonotonic_send_is_not():
    h = H()
    t1 = h.op(1, [send("k/0", 0, 1), send("k/0", 2, 3)])
    h.op(2, [send("k/0", 1, 2)])
    h.final({"k/0": [(0, 1), (1, 2), (2, 3)]})
    r = check(h.ops)
    assert r.valid and r.counts.get("int-send-skip") == 1
    assert indices(r, "int-send-skip") == [[t1.index]]
    assert "int-send-skip=1" in r.verdict_line()

    h = H()
    t = h.op(1, [send("k/0", 1, 1), send("k/0", 0, 2)])
    h.final({"k/0": [(0, 2), (1, 1)]})
    r = check(h.ops)
    assert not r.valid and indices(r, "int-nonmonotonic-send") == [[t.index]]


def test_nonmonotonic_send_across_ops_of_a_process():
    h = H()
    a = h.op(1, [send("k/0", 5, 1)], f="send")
    b = h.op(1, [send("k/0", 2, 2)], f="send")
    h.final({"k/0": [(2, 2), (5, 1)]})
    r = check(h.ops)
    assert r.counts["nonmonotonic-send"] == 1 and r.bad_error_types == ["nonmonotonic-send"]
    assert indices(r, "nonmonotonic-send") == [[a.index, b.index]]


# --------------------------------------------------------------------------- cycles

def test_g1c_circular_information_flow():
    h = H()
    h.invoke(1, [send("a/0", 0, 1), poll({})])
    h.invoke(2, [send("b/0", 0, 2), poll({})])
    t1 = h.complete(1, [send("a/0", 0, 1), poll({"b/0": [(0, 2)]})])
    t2 = h.complete(2, [send("b/0", 0, 2), poll({"a/0": [(0, 1)]})])
    h.final({"a/0": [(0, 1)], "b/0": [(0, 2)]})
    r = check(h.ops)
    assert not r.valid
    assert r.counts["G1c"] == 1 and r.bad_error_types == ["G1c"]
    assert indices(r, "G1c") == [[t1.index, t2.index]]
    assert "-wr->" in r.anomalies["G1c"][0].description


def test_g1c_through_a_ww_edge_is_allowed():
    h = H()
    h.invoke(1, [send("k/0", 0, 1), poll({})])
    h.invoke(2, [send("k/0", 1, 2), send("j/0", 0, 3)])
    t2 = h.complete(2, [send("k/0", 1, 2), send("j/0", 0, 3)])
    t1 = h.complete(1, [send("k/0", 0, 1), poll({"j/0": [(0, 3)]})])
    h.final({"k/0": [(0, 1), (1, 2)], "j/0": [(0, 3)]})
    r = check(h.ops)
    assert r.valid, r.verdict_line()
    assert r.counts.get("G1c") == 1 and r.anomalies["G1c"][0].allowed
    assert indices(r, "G1c") == [sorted([t1.index, t2.index])]


def test_g0_is_allowed_and_listed():
    h = H()
    h.invoke(1, [send("a/0", 0, 1), send("b/0", 1, 2)])
    h.invoke(2, [send("a/0", 1, 3), send("b/0", 0, 4)])
    t1 = h.complete(1, [send("a/0", 0, 1), send("b/0", 1, 2)])
    t2 = h.complete(2, [send("a/0", 1, 3), send("b/0", 0, 4)])
    h.final({"a/0": [(0, 1), (1, 3)], "b/0": [(0, 4), (1, 2)]})
    r = check(h.ops)
    assert r.valid
    assert r.counts == {"G0": 1}
    assert indices(r, "G0") == [[t1.index, t2.index]]
    assert r.verdict_line() == "valid: true  G0=1"
    r = check(h.ops, allowed=set())
    assert not r.valid and r.verdict_line() == "valid: false  G0=1"


def test_g_single_with_an_rw_edge_is_reported_and_allowed():
    h = H()
    h.op(0, [send("a/0", 0, 1)])
    h.invoke(1, [poll({}), poll({})])
    t2 = h.op(2, [send("a/0", 1, 2), send("b/0", 0, 3)])
    # t1 read a/0 only up to offset 0 (missed t2's a/0 value) but read t2's b/0 value
    t1 = h.complete(1, [poll({"a/0": [(0, 1)]}), poll({"b/0": [(0, 3)]})])
    h.final({"a/0": [(0, 1), (1, 2)], "b/0": [(0, 3)]})
    r = check(h.ops)
    assert r.valid
    assert r.counts.get("G-single") == 1
    assert indices(r, "G-single") == [[t2.index, t1.index]]
    assert "-rw->" in r.anomalies["G-single"][0].description


# --------------------------------------------------------------------------- copier

def copier_history(gap=range(100, 200), n=300, committed=300, failed_gap=True):
    """A copier group copies in/0 -> out/0 in batches of 50: poll, send, commit offsets.
    The batches over `gap` abort (fail) yet the group's offsets pass them."""
    h = H()
    for i in range(n):
        h.op(1, [send("in/0", i, 1000 + i)], f="send")
    h.add(2, OK, "subscribe", ["in/0"])
    out_offset = 0
    out = []
    for start in range(0, n, 50):
        batch = [(i, 1000 + i) for i in range(start, min(n, start + 50))]
        lost = failed_gap and start in gap
        sends = [send("out/0", out_offset + j, v) for j, (_, v) in enumerate(batch)]
        h.op(2, [poll({"in/0": batch}), *sends], type_=FAIL if lost else OK)
        out_offset += len(batch) + 1  # plus the control record
        if not lost:
            out += [(m[2][0], m[2][1]) for m in sends]
    h.add("checker", OK, "copy", {"group": "g", "pairs": {"in/0": "out/0"}})
    h.add("checker", OK, "committed-offsets", {"group": "g", "offsets": {"in/0": committed}})
    return h, out


def test_copier_correct_run_is_valid():
    h, out = copier_history(failed_gap=False)
    h.final({"in/0": [(i, 1000 + i) for i in range(300)], "out/0": out})
    r = check(h.ops)
    assert r.valid, r.verdict_line()
    assert r.stats["copier"]["checked-values"] == 300


def test_copier_lost_batch_whose_offsets_were_committed():
    """The real bug's shape: input 100..199 of one partition absent from the output while the
    group's committed offset passes them."""
    h, out = copier_history()
    final = h.final({"in/0": [(i, 1000 + i) for i in range(300)], "out/0": out})
    r = check(h.ops)
    assert not r.valid
    assert r.counts["lost-write"] == 100
    assert r.bad_error_types == ["lost-write"]
    assert r.counts.get("poll-skip") == 2  # the copier polled on past its aborted batches
    descs = [a.description for a in r.anomalies["lost-write"]]
    assert descs[0].startswith("copied input in/0 offset 100 value 1100")
    assert all("committed" in d and "out/0" in d for d in descs)
    first = r.anomalies["lost-write"][0]
    assert first.ops[0]["index"] == final.index
    assert first.ops[0]["value"]["in/0"][:3] == [[98, 1098], [99, 1099], [100, 1100]]
    assert [1098, 1099] == [v for _, v in first.ops[0]["value"]["out/0"]][1:3]  # trimmed to where
    # the value belonged: the last input value copied before it
    assert any(o["type"] == FAIL for o in first.ops)  # the aborted copier txn that polled it


def test_copier_output_the_final_read_could_not_finish_is_not_checked():
    h, out = copier_history()
    final = h.final({"in/0": [(i, 1000 + i) for i in range(300)], "out/0": out})
    final.extra["incomplete"] = ["out/0"]
    r = check(h.ops)
    assert r.valid and r.stats["copier"]["unchecked-pairs"] == [["in/0", "out/0"]]
    assert r.stats["final-read-incomplete"] == ["out/0"]


def test_copier_values_beyond_the_committed_offset_are_not_required():
    h, out = copier_history(gap=range(250, 300))
    h.final({"in/0": [(i, 1000 + i) for i in range(300)], "out/0": out})
    h.ops[-2] = Op(h.ops[-2].index, 0.0, "checker", OK, "committed-offsets",
                   {"group": "g", "offsets": {"in/0": 250}})
    assert check(h.ops).valid


def test_copier_duplicate_g1a_and_order():
    h = H()
    for i in range(4):
        h.op(1, [send("in/0", i, 10 + i)], f="send")
    h.op(2, [poll({"in/0": [(0, 10), (1, 11)]}), send("out/0", 0, 11), send("out/0", 1, 10)])
    failed = h.op(2, [poll({"in/0": [(2, 12)]}), send("out/0", 2, 12)], type_=FAIL)
    h.op(2, [poll({"in/0": [(3, 13)]}), send("out/0", 3, 13), send("out/0", 4, 13)])
    h.add("checker", OK, "copy", {"group": "g", "pairs": {"in/0": "out/0"}})
    h.add("checker", OK, "committed-offsets", {"group": "g", "offsets": {"in/0": 4}})
    h.final({"in/0": [(i, 10 + i) for i in range(4)],
             "out/0": [(0, 11), (1, 10), (2, 12), (3, 13), (4, 13)]})
    r = check(h.ops)
    assert not r.valid
    assert r.counts["duplicate"] == 1  # 13 twice (found once, by the version order)
    assert r.counts["G1a"] == 1 and failed.index in indices(r, "G1a")[0]
    assert r.counts["nonmonotonic-send"] == 1
    assert "11" in r.anomalies["nonmonotonic-send"][0].description


# --------------------------------------------------------------------------- reporting

def test_allowed_override_and_json():
    h = H()
    h.op(1, [send("k/0", 0, 1)])
    h.op(1, [send("k/0", 1, 2)])
    h.final({"k/0": [(1, 2)]})
    assert not check(h.ops).valid
    r = check(h.ops, allowed={"lost-write"})
    assert r.valid and r.verdict_line() == "valid: true  lost-write=1"
    j = json.loads(json.dumps(r.to_json()))
    assert j["valid"] is True and j["counts"] == {"lost-write": 1}
    assert j["anomalies"]["lost-write"][0]["ops"][0]["f"] == "txn"


def test_examples_are_capped_but_counts_are_not():
    h = H()
    for i in range(60):
        h.op(1, [send("k/0", i, i)], type_=FAIL)
    h.op(2, [poll({"k/0": [(i, i) for i in range(60)]})], f="poll")
    r = check(h.ops)
    assert r.counts["G1a"] == 60
    assert len(r.anomalies["G1a"]) == 20
    big = r.anomalies["G1a"][0].ops[1]
    assert big["extra"].get("trimmed") and len(big["value"][0][1]["k/0"]) <= 5


def test_large_history_is_fast():
    """~60k values through ~12k transactions, 8 keys, 6 producers and an assigned consumer."""
    keys = [f"t/{i}" for i in range(8)]
    h = H()
    off = dict.fromkeys(keys, 0)
    committed = {k: [] for k in keys}
    v = 0
    for i in range(12_000):
        p = i % 6
        mops = []
        for j in range(5):
            k = keys[(i + j * 3) % 8]
            v += 1
            mops.append(send(k, off[k], v))
            off[k] += 1
        h.invoke(p, mops)
        h.complete(p, mops, FAIL if i % 10 == 0 else OK)
        if i % 10:
            for m in mops:
                committed[m[1]].append((m[2][0], m[2][1]))
        for k in {m[1] for m in mops}:
            off[k] += 1
    h.add(50, OK, "assign", keys)
    for k in keys:
        vals = committed[k]
        for s in range(0, len(vals), 500):
            h.op(50, [poll({k: vals[s:s + 500]})], f="poll")
    h.final(committed)
    started = time.monotonic()
    r = check(h.ops)
    elapsed = time.monotonic() - started
    assert r.valid, r.verdict_line()
    assert r.stats["values-written"][OK] == 54_000
    assert elapsed < 20, elapsed
