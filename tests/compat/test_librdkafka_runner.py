"""The librdkafka runner's parsing: test-runner's summary table and test.c's test table."""

from compat.librdkafka import runner

SUMMARY = (
    "TEST 20261124080635 (bare, scenario default) SUMMARY\n"
    "#==================================================================#\n"
    "|\x1b[32m <MAIN>                                   |     PASSED |   0.401s \x1b[0m|\n"
    "|\x1b[32m 0045_subscribe_update                    |     PASSED |   0.000s \x1b[0m|\n"
    "|\x1b[36m 0045_subscribe_update_topic_remove       |    SKIPPED |   0.000s \x1b[0m|\n"
    "|\x1b[31m 0045_resubscribe_with_regex              |     FAILED |   3.000s \x1b[0m|\n"
    "#==================================================================#\n"
)


def test_outcomes_come_from_the_summary_table_and_unreported_tests_fail():
    names = ["0045_subscribe_update", "0045_subscribe_update_topic_remove",
             "0045_resubscribe_with_regex", "0045_subscribe_many_updates"]
    assert runner.outcomes(SUMMARY, names) == {
        "0045-subscribe_update": "passed",
        "0045-subscribe_update_topic_remove": "skipped",   # another scenario's test
        "0045-resubscribe_with_regex": "failed",
        "0045-subscribe_many_updates": "failed",           # never reported: crash or timeout
    }


def test_local_manual_and_mock_tests_are_left_out():
    table = """struct test tests[] = {
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0004_conf, TEST_F_LOCAL),
    _TEST(0011_produce_batch,
          0,
          _THRES(.ucpu = 40.0, .scpu = 8.0)),
    _TEST(0045_subscribe_update, 0, TEST_BRKVER(0, 9, 0, 0)),
    _TEST(0045_subscribe_update_mock, TEST_F_LOCAL),
    _TEST(0139_offset_validation_mock, 0),
    _TEST(8000_idle, TEST_F_MANUAL),
};"""
    assert runner.parse_test_table(table) == {"0011": ["0011_produce_batch"], "0045": ["0045_subscribe_update"]}
