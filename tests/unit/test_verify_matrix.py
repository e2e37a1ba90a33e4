"""The verification matrix's table in the docs (no cluster): a narrowed run rewrites its cells only."""

from tools.verify import matrix

TABLE = """# doc

<!-- verify-matrix:start -->
| workload | faults | kbroker (devcluster) | Apache Kafka 4.3.1 (KRaft) |
|---|---|---|---|
| txn | `none` | **valid**: 10 committed in 10 s (1/s) | **valid**: 20 committed in 10 s (2/s) |
| copier | `kill9` | **valid**: 5 loaded, 5 copied in 60 s (1/s) | not run |

Last run: 2026-11-27 23:54 UTC. Runs and reports: `verify-runs/matrix/`.
<!-- verify-matrix:end -->

after
"""


def run(workload: str, faults: str, valid: bool) -> dict:
    return {"target": "devcluster", "workload": workload, "faults": faults, "valid": valid,
            "counts": {"lost-write": 3} if not valid else {}, "bad": ["lost-write"], "records": 7,
            "txn_records": 7, "seconds": 7, "when": "2026-12-01 22:00"}


def test_a_narrowed_run_on_a_fresh_clone_keeps_the_other_cells(tmp_path, monkeypatch):
    doc = tmp_path / "verify.md"
    doc.write_text(TABLE)
    monkeypatch.setattr(matrix, "DOC", doc)
    matrix.write_doc({matrix.cell_key("devcluster", "copier", "kill9"): [run("copier", "kill9", False)]})
    text = doc.read_text()
    assert "| txn | `none` | **valid**: 10 committed in 10 s (1/s) | **valid**: 20 committed in 10 s (2/s) |" in text
    copier = next(line for line in text.splitlines() if line.startswith("| copier"))
    assert copier.startswith("| copier | `kill9` | **INVALID** lost-write=3"), copier
    assert copier.endswith("| not run |"), copier
    assert "Last run: 2026-12-01 22:00 UTC" in text and text.endswith("after\n")


def test_rendering_only_reproduces_the_table(tmp_path, monkeypatch):
    doc = tmp_path / "verify.md"
    doc.write_text(TABLE)
    monkeypatch.setattr(matrix, "DOC", doc)
    matrix.write_doc({})
    assert doc.read_text() == TABLE
