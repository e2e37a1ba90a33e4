"""compat.pytest_suite: JUnit outcomes map back to the suite's pytest node ids."""

from pathlib import Path

from compat.pytest_suite import PytestRun, read_junit, skipped

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
 <testcase classname="tests.integration.producer.test_transactions" name="test_commit_transaction"
   file="tests/integration/producer/test_transactions.py" line="1" time="1.0"/>
 <testcase classname="tests.integration.admin.test_basic_operations" name="test_basic_operations"
   file="tests/integration/admin/test_basic_operations.py" line="1" time="1.0">
   <failure message="boom">trace</failure></testcase>
 <testcase classname="tests.integration.x.test_ssl.TestSSL" name="test_handshake[a-b]"
   file="tests/integration/x/test_ssl.py" line="1" time="0.1"><skipped message="no"/></testcase>
 <testcase classname="tests.integration.producer.test_transactions" name="test_abort_transaction"
   file="tests/integration/producer/test_transactions.py" line="2" time="1.0"/>
 <testcase classname="tests.integration.producer.test_transactions" name="test_abort_transaction"
   file="tests/integration/producer/test_transactions.py" line="2" time="0.0">
   <error message="teardown">trace</error></testcase>
</testsuite></testsuites>
"""


def test_junit_outcomes_use_node_ids_relative_to_the_suite_folder(tmp_path: Path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    run = PytestRun(tmp_path, "tests/integration", {})
    assert read_junit(junit, run) == {
        "producer/test_transactions.py::test_commit_transaction": "passed",
        "admin/test_basic_operations.py::test_basic_operations": "failed",
        "x/test_ssl.py::TestSSL::test_handshake[a-b]": "skipped",
        # passed, then errored in teardown: the worse outcome stands
        "producer/test_transactions.py::test_abort_transaction": "failed",
    }


def test_deselected_tests_are_skipped_and_the_rest_run():
    ids = ["schema_registry/test_a.py::t", "producer/test_p.py::t", "x.py::t[sasl_cluster0]"]
    out, rest = skipped(ids, {r"^schema_registry/": "needs SR", r"\[sasl_cluster": "SASL"})
    assert out == {"schema_registry/test_a.py::t": "skipped", "x.py::t[sasl_cluster0]": "skipped"}
    assert rest == ["producer/test_p.py::t"]
