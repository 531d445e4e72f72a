"""txn_bench's copier, quick form (20,000 records of 100 B, 3 partitions, 1,000 records a
transaction): exactly once with transactions against the same loop at least once (flush
and commit every 1,000), per record (``poll()`` + ``send()``) and with Arrow
(``poll_arrow()`` + ``send_arrow()``)."""

from __future__ import annotations

from . import MILLION, SAMPLES, TIMEOUT_S, Samples, add, embedded_cluster, figure


def measure() -> Samples:
    from raylog.benchmarks import txn_bench

    scale = txn_bench.QUICK
    samples: Samples = {}
    with embedded_cluster("raylog-history-txn-") as (cluster, _):
        runner = txn_bench.Runner(cluster, scale)
        try:
            runner.fill()
            runner.warm_up()
            for _ in range(SAMPLES):
                for kind, label in txn_bench.KINDS:
                    runner.rows = []
                    runner.copier(kind, label)
                    base, txn = runner.rows
                    add(samples, f"copier_{kind}_at_least_once_s_per_1m", MILLION / base.records_per_s)
                    add(samples, f"copier_{kind}_txn_s_per_1m", MILLION / txn.records_per_s)
                    add(samples, f"copier_{kind}_txn_vs_at_least_once", base.records_per_s / txn.records_per_s)
                if runner.plain_log is not None:  # kept by the per-record copier for txn_bench's reads
                    runner.delete_topic(runner.plain_log)
                    runner.plain_log = None
        finally:
            runner.delete_all()
    return samples


class Txn:
    """Seconds per million records copied, and the transactional copier's time over the
    at-least-once one's (``_txn_vs_at_least_once``)."""

    timeout = TIMEOUT_S

    def setup_cache(self) -> Samples:
        return measure()

    setup_cache.timeout = TIMEOUT_S

    track_copier_records_txn_s_per_1m = figure("copier_records_txn_s_per_1m")
    track_copier_records_txn_vs_at_least_once = figure("copier_records_txn_vs_at_least_once", "ratio")
    track_copier_arrow_txn_s_per_1m = figure("copier_arrow_txn_s_per_1m")
    track_copier_arrow_txn_vs_at_least_once = figure("copier_arrow_txn_vs_at_least_once", "ratio")
    track_floor_copier_records_at_least_once_s_per_1m = figure("copier_records_at_least_once_s_per_1m")
    track_floor_copier_arrow_at_least_once_s_per_1m = figure("copier_arrow_at_least_once_s_per_1m")
