"""The librdkafka suite runner's own logic (no build, no Ray): which tests it runs, reading
each test's outcome from the test-runner's summary, the table it makes, and where the table
goes in docs/kafka.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylog.benchmarks import librdkafka_suite as suite

TEST_C = """
struct test tests[] = {
    {.name = "<MAIN>", .flags = TEST_F_LOCAL},
    _TEST(0000_unittests,
          TEST_F_LOCAL,
          _THRES(.ucpu = 100.0, .scpu = 20.0, .rss = 900.0)),
    _TEST(0001_multiobj, 0),
    _TEST(0028_long_topicnames, TEST_F_KNOWN_ISSUE, TEST_BRKVER(0, 9, 0, 0)),
    _TEST(0049_consume_conn_close, TEST_F_SOCKEM, TEST_BRKVER(0, 9, 0, 0)),
    _TEST(0045_subscribe_update_topic_remove,
          0,
          TEST_BRKVER(0, 9, 0, 0),
          .scenario = "noautocreate"),
    _TEST(0082_fetch_max_bytes, 0, TEST_BRKVER(0, 10, 1, 0)),
    _TEST(8000_idle, TEST_F_MANUAL),
    /* Manual tests */
};
"""

#: What the runner prints for each number (it runs every test of the number TESTS names).
OUTPUT = {
    "0001": "[0001_multiobj / 1.2s] some progress line\n"
    "|\x1b[32m 0001_multiobj                            |     PASSED |   1.234s \x1b[0m|\n",
    "0045": "|\x1b[32m 0045_subscribe_update                    |     PASSED |   9.000s \x1b[0m|\n"
    '### Test "0045_subscribe_update_topic_remove (do_test_topic_remove:224)" failed at 0045-subscribe_update.c:'
    "230:do_test_topic_remove() at Sun Nov 29 06:31:58 2026: ###\n"
    "Test assertion failed: 'partitions == 4'\n",
    "0082": "|\x1b[31m 0082_fetch_max_bytes                     |     FAILED |  12.001s \x1b[0m|"
    "\x1b[31m Invalid response size | too large\x1b[0m\n",
    "0028": "[0028_long_topicnames / 0.0s] Segmentation fault\n",
}


def test_the_broker_tests_are_read_from_the_suites_table_with_their_scenarios(tmp_path):
    (tmp_path / "test.c").write_text(TEST_C)
    assert suite.broker_tests(tmp_path) == {
        "0001_multiobj": "default",
        "0028_long_topicnames": "default",
        "0045_subscribe_update_topic_remove": "noautocreate",
        "0082_fetch_max_bytes": "default",
    }


def test_each_tests_outcome_and_why_come_from_its_summary(tmp_path, monkeypatch):
    def run(args, env, stdout, **kwargs):
        assert args[-2:] == ["-s", "default"] and env["BROKERS"] == "127.0.0.1:9092"
        assert (Path(env["KAFKA_PATH"]) / "bin" / "kafka-topics.sh").exists()
        header = f"[<MAIN>   /  0.000s] Tests to run     : {env['TESTS']}\n[<MAIN>  /  0.000s] Test scenario: default\n"
        stdout.write(header + OUTPUT[env["TESTS"]])

    monkeypatch.setattr(suite.subprocess, "run", run)
    monkeypatch.setitem(suite.NOT_APPLICABLE, "0044", "a reason")
    cleared = []
    tests = [
        "0001_multiobj",
        "0028_long_topicnames",
        "0044_partition_cnt",
        "0045_subscribe_update",
        "0045_subscribe_update_topic_remove",
        "0082_fetch_max_bytes",
    ]
    log = tmp_path / "log"
    outcomes = suite.run_suite(
        tmp_path / "tests" / "test-runner", "127.0.0.1:9092", tests, "default", tmp_path, log, lambda: cleared.append(1)
    )
    assert [(o.test, o.state) for o in outcomes] == [
        ("0001_multiobj", "PASSED"),
        ("0028_long_topicnames", "FAILED"),
        ("0044_partition_cnt", "NOT APPLICABLE"),
        ("0045_subscribe_update", "PASSED"),
        ("0045_subscribe_update_topic_remove", "FAILED"),
        ("0082_fetch_max_bytes", "FAILED"),
    ]
    assert outcomes[1].note == "the test-runner printed no outcome (it crashed)"
    assert (
        outcomes[4].note == "0045-subscribe_update.c:230:do_test_topic_remove: Test assertion failed: 'partitions == 4'"
    )
    assert outcomes[5].note == "Invalid response size | too large"
    assert len(cleared) == 4  # after each number run
    numbers = ["0001", "0028", "0045", "0082"]
    assert log.read_text().count("Tests to run") == len(numbers)
    assert all(OUTPUT[n] in log.read_text() for n in numbers)
    # --from-log reads the same again (the scenario each number ran in is in its header).
    assert suite.outcomes_from_log(log, dict.fromkeys(tests, "default")) == outcomes
    # As librdkafka's own harness writes it for a Kafka cluster (its timeouts doubled).
    assert (tmp_path / "test.conf").read_text() == (
        "bootstrap.servers=127.0.0.1:9092\nbroker.address.family=v4\ntest.timeout.multiplier=2\n"
    )
    text = suite.table(outcomes, "v2.12.0")
    assert "**2 of 5 applicable tests pass**" in text and "Invalid response size / too large" in text


def test_the_table_replaces_the_one_between_the_markers(tmp_path):
    docs = tmp_path / "kafka.md"
    docs.write_text("# Kafka\n\nintro\n")
    suite.write_docs("first", docs)
    suite.write_docs("second", docs)
    text = docs.read_text()
    assert text.count(suite.BEGIN) == 1 and "second" in text and "first" not in text and text.startswith("# Kafka")


def test_kafka_topics_stand_in_makes_the_tools_requests(monkeypatch):
    """The tests' calls of Kafka's kafka-topics.sh become CreateTopics (with configs),
    CreatePartitions and DeleteTopics requests; a refused one exits 1, as the tool does."""
    from confluent_kafka import admin

    asked = []

    class Done:
        def __init__(self, error=None):
            self.error = error

        def result(self, timeout):
            if self.error:
                raise RuntimeError(self.error)

    class FakeAdmin:
        def __init__(self, conf):
            asked.append(("conf", conf["bootstrap.servers"]))

        def create_topics(self, topics):
            asked.append(("create", [(t.topic, t.num_partitions, t.replication_factor, t.config) for t in topics]))
            return {t.topic: Done() for t in topics}

        def create_partitions(self, parts):
            asked.append(("partitions", [(p.topic, p.new_total_count) for p in parts]))
            return {p.topic: Done() for p in parts}

        def delete_topics(self, names):
            asked.append(("delete", names))
            return {n: Done("UNKNOWN_TOPIC_OR_PART") for n in names}

    monkeypatch.setattr(admin, "AdminClient", FakeAdmin)
    server = ["--bootstrap-server", "b:1"]
    create = ["--create", "--topic", "t", "--partitions", "2", "--replication-factor", "1"]
    configs = ["--config", "cleanup.policy=compact", "--config", "segment.ms=10000"]
    assert suite.main(["kafka-topics", *server, *create, *configs]) == 0
    assert suite.main(["kafka-topics", *server, "--alter", "--topic", "t", "--partitions", "4"]) == 0
    assert suite.main(["kafka-topics", *server, "--delete", "--topic", "t"]) == 1
    assert asked == [
        ("conf", "b:1"),
        ("create", [("t", 2, 1, {"cleanup.policy": "compact", "segment.ms": "10000"})]),
        ("conf", "b:1"),
        ("partitions", [("t", 4)]),
        ("conf", "b:1"),
        ("delete", ["t"]),
    ]
    with pytest.raises(SystemExit):
        suite.main(["kafka-topics", *server, "--topic", "t"])  # no action
