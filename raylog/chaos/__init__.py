"""Jepsen-style fault runs against raylog: a history recorder and its checker (plain
Python, no Ray), the workloads that record histories, the nemesis that injects faults,
and the soak runner shared by ``tests/faults`` and ``raylog bench soak``.

- :mod:`raylog.chaos.history`: the operations clients attempted, with their outcomes.
- :mod:`raylog.chaos.checker`: Jepsen's anomaly classes for Kafka-like logs, counted.
- :mod:`raylog.chaos.faulty`: a cluster handle whose actor calls can be delayed/reordered.
- :mod:`raylog.chaos.workload`: producers and consumers that record what they did.
- :mod:`raylog.chaos.nemesis`: seeded faults, bounded in time and count, each healed.
- :mod:`raylog.chaos.soak`: one Ray cluster, many seeded runs, a summary line per run.
"""
