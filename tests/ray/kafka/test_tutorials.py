"""docs/tutorials/kafka-clients.md runs as written (see tests/tutorials.py), on this folder's
cluster with Kafka listeners: its ``raylog.connect(...)`` returns that cluster, whose
listeners are on free ports rather than the page's 9092."""

from __future__ import annotations

import raylog
from tests import tutorials

#: The topic the tutorial creates (and deletes at its end).
TOPICS = ("greetings",)


def test_the_kafka_clients_tutorial_runs_and_prints_what_it_shows(
    kafka_cluster, bootstrap, kafka_admin, capsys, monkeypatch
):
    try:
        tutorials.run(
            "kafka-clients.md",
            capsys,
            monkeypatch,
            handles=[(raylog, "connect", kafka_cluster)],
            shown={"127.0.0.1:9092": bootstrap},
        )
    finally:
        left = set(TOPICS) & set(kafka_admin.list_topics())
        if left:
            kafka_admin.delete_topics(sorted(left))
