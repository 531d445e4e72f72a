"""``raylog bench produce|consume|e2e`` against the session's raylog cluster, called in-process.

Small record counts: these tests check that the reports count what was sent and read and
that their figures are well formed, never how fast anything is.
"""

from __future__ import annotations

import io
import json
import sys

import pytest

from raylog import cli

RECORDS = 3_000


@pytest.fixture
def bench(cluster, capsys):
    """``bench(*argv)`` -> (exit code, stdout, stderr) of ``raylog bench ...``."""

    def invoke(*argv: str):
        code = cli.main(["bench", *argv, "--cluster-name", cluster.cluster_name])
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def _report(bench, *argv: str) -> dict:
    code, out, err = bench(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _check_throughput(figures: dict, records: int, record_size: int) -> None:
    assert figures["records"] == records
    assert figures["value_bytes"] == records * record_size
    assert figures["seconds"] > 0 and figures["records_per_s"] > 0 and figures["mb_per_s"] > 0


def _check_latency(latency: dict, samples: int | None = None) -> None:
    assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert latency["samples"] == samples if samples is not None else latency["samples"] > 0


@pytest.mark.parametrize("arrow", [False, True])
def test_produce_reports_every_record_and_removes_its_temporary_topic(bench, admin, arrow):
    """produce sends N records to a temporary topic (spread over its partitions), reports
    their throughput and acknowledgement latency, and deletes the topic afterwards."""
    before = set(admin.list_topics())
    argv = ["produce", "--num-records", str(RECORDS), "--record-size", "50", "--partitions", "2", "--acks", "1"]
    report = _report(bench, *argv, *(["--arrow", "--batch-size", "16384"] if arrow else []))
    assert (report["workload"], report["temporary_topic"], report["num_partitions"]) == ("produce", True, 2)
    assert (report["acks"], report["arrow"], report["record_size_bytes"]) == ("1", arrow, 50)
    _check_throughput(report["produce"], RECORDS, 50)
    # Arrow chunks count each record at its chunk's latency; send() keeps every record here.
    _check_latency(report["produce"]["ack_latency_ms"], samples=RECORDS)
    assert "consume" not in report and "e2e_latency_ms" not in report
    assert set(admin.list_topics()) == before


def test_produce_sync_waits_for_each_acknowledgement(bench):
    """--sync sends one record at a time: one latency sample per record."""
    report = _report(bench, "produce", "--num-records", "50", "--sync")
    assert report["sync"] is True
    _check_throughput(report["produce"], 50, 100)
    _check_latency(report["produce"]["ack_latency_ms"], samples=50)


@pytest.mark.parametrize("arrow", [False, True])
def test_consume_reads_every_record_of_a_filled_temporary_topic(bench, arrow):
    """consume fills a temporary topic (untimed), then reads all N records from the start."""
    report = _report(bench, "consume", "--num-records", str(RECORDS), "--partitions", "2", *(["--arrow"] * arrow))
    assert (report["workload"], report["arrow"]) == ("consume", arrow)
    _check_throughput(report["consume"], RECORDS, 100)
    assert "produce" not in report


def test_bench_on_a_named_topic_keeps_it_and_reads_its_records(bench, topic, admin):
    """With --topic the topic is used as it is: produce appends to it, consume reads it from
    the beginning, and it is not deleted."""
    name = topic(1)
    produced = _report(bench, "produce", "--topic", name, "--num-records", "500", "--record-size", "10")
    assert (produced["topic"], produced["temporary_topic"]) == (name, False)
    consumed = _report(bench, "consume", "--topic", name, "--num-records", "500", "--arrow")
    _check_throughput(consumed["consume"], 500, 10)
    assert name in admin.list_topics()


def test_e2e_measures_the_latency_of_every_record(bench):
    """e2e: every record produced reaches the consumer in the other process and has a latency."""
    report = _report(bench, "e2e", "--num-records", str(RECORDS), "--throughput", "20000")
    _check_throughput(report["produce"], RECORDS, 100)
    _check_throughput(report["consume"], RECORDS, 100)
    _check_latency(report["e2e_latency_ms"], samples=RECORDS)
    _check_latency(report["produce"]["ack_latency_ms"])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_output_and_progress_bar_on_a_terminal(bench, monkeypatch):
    """Without --json: one line per measurement on stdout; on a terminal stderr a progress bar is
    drawn in place during the run and erased at its end."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, out, _ = bench("e2e", "--num-records", "1000", "--arrow")
    assert code == 0
    lines = out.splitlines()
    assert "e2e on 'raylog-bench-" in lines[0] and "(temporary)" in lines[0] and "send_arrow/poll_arrow" in lines[0]
    assert lines[1].startswith("1,000 records sent in ") and "records/s" in lines[1] and "ack latency p50" in lines[1]
    assert lines[2].startswith("1,000 records consumed in ")
    assert lines[3].startswith("end-to-end latency: p50 ")
    drawn = terminal.getvalue()
    assert "\re2e [" in drawn and "/1,000 records" in drawn
    assert drawn.endswith("\r")  # erased


def test_no_progress_bar_when_stderr_is_not_a_terminal(bench):
    """Logs and pipes stay clean: nothing but errors on a stderr that is not a terminal."""
    code, _, err = bench("produce", "--num-records", "100")
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["e2e", "--record-size", "4"], 2, "e2e needs record_size_bytes >= 8"),
        (["produce", "--sync", "--arrow"], 2, "sync sends one record at a time"),
        (["consume", "--sync"], 2, "unrecognized arguments: --sync"),
        (["produce", "--num-records", "0"], 2, "must be >= 1"),
        (["produce", "--topic", "no-such-topic", "--num-records", "10"], 1, "raylog: UnknownTopicOrPartitionError"),
    ],
)
def test_bad_bench_arguments(bench, argv, code, message):
    """Options that do not go together exit 2 before touching the cluster; an unknown topic is a
    typed error (exit 1)."""
    got, _, err = bench(*argv)
    assert got == code
    assert message in err
