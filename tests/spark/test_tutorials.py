"""docs/tutorials/spark-pipeline.md runs as written (see tests/tutorials.py), on the suite's
shared raylog cluster and Spark session: its ``raylog.connect(...)`` returns that cluster, and
its ``raylog_spark.init_spark(...)`` that session, with the SQL settings the tutorial gives
set on it for the run."""

from __future__ import annotations

import raylog
import raylog_spark
from tests import tutorials

#: The topics the tutorial creates (and deletes at its end).
TOPICS = ("page-views", "page-stats")


def test_the_spark_pipeline_tutorial_runs_and_prints_what_it_shows(cluster, admin, spark, capsys, monkeypatch):
    before: dict[str, str | None] = {}

    def shared_session(app_name: str = "", configs: dict[str, str] | None = None, **_ignored):
        for key, value in (configs or {}).items():
            before.setdefault(key, spark.conf.get(key, None))
            spark.conf.set(key, value)
        return spark

    monkeypatch.setattr(raylog_spark, "init_spark", shared_session)
    try:
        tutorials.run("spark-pipeline.md", capsys, monkeypatch, handles=[(raylog, "connect", cluster)])
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        left = set(TOPICS) & set(admin.list_topics())
        if left:
            admin.delete_topics(sorted(left))
