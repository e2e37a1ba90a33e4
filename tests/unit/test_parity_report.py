"""The parity table from two JUnit files (no broker)."""

from tests.support import parity_report

OURS = """<testsuites><testsuite>
<testcase classname="tests.integration.test_a" name="test_one[kbroker]"/>
<testcase classname="tests.integration.test_a" name="test_two[kbroker-default]"/>
<testcase classname="tests.integration.test_b" name="test_three"/>
<testcase classname="tests.integration.test_b" name="test_four"/>
</testsuite></testsuites>"""
KAFKA = """<testsuites><testsuite>
<testcase classname="tests.integration.test_a" name="test_one[kafka]"/>
<testcase classname="tests.integration.test_a" name="test_two[kafka-default]"><failure message="assert 6 == 75&#10;more"/></testcase>
<testcase classname="tests.integration.test_b" name="test_three"><skipped message="needs a restartable broker process"/></testcase>
<testcase classname="tests.integration.test_b" name="test_four"><skipped type="pytest.xfail" message="Kafka 4.3.1 keeps one batch"/></testcase>
</testsuite></testsuites>"""


def test_tests_are_matched_across_targets_and_differences_listed(tmp_path):
    (tmp_path / "o.xml").write_text(OURS)
    (tmp_path / "k.xml").write_text(KAFKA)
    doc = tmp_path / "parity.md"
    doc.write_text(f"# head\n\n{parity_report.START}\nold\n{parity_report.END}\ntail\n")
    assert parity_report.main([str(tmp_path / "o.xml"), str(tmp_path / "k.xml"), str(doc)]) == 0
    text = doc.read_text()
    assert "old" not in text and text.startswith("# head") and text.endswith("tail\n")
    assert "| `integration.test_a` | 2 passed | 1 passed, 1 failed |" in text
    assert "| `integration.test_b` | 2 passed | 1 skipped, 1 xfailed |" in text
    assert "- `integration.test_b::test_four`: kbroker passed, Kafka xfailed (Kafka: Kafka 4.3.1 keeps one batch)" in text
    assert "- `integration.test_a::test_two[default]`: kbroker passed, Kafka failed (Kafka: assert 6 == 75)" in text
    assert "test_one" not in text.split("differs")[1]  # the same outcome on both is no difference
    assert ("In all: kbroker 4 passed, 0 failed, 0 skipped, 0 xfailed; "
            "Apache Kafka 1 passed, 1 failed, 1 skipped, 1 xfailed.") in text


def test_a_missing_run_is_one_line_and_exit_2(tmp_path, capsys):
    assert parity_report.main([str(tmp_path / "none.xml"), str(tmp_path / "none.xml"), str(tmp_path / "d.md")]) == 2
    assert "no results in" in capsys.readouterr().err
