"""docs/tutorials/training-stream.md runs as written (see tests/tutorials.py), on the suite's
shared raylog cluster: its ``raylog.connect(...)`` returns that cluster."""

from __future__ import annotations

import raylog
from tests import tutorials

#: The topic the tutorial creates (and deletes at its end).
TOPICS = ("examples",)


def test_the_training_stream_tutorial_runs_and_prints_what_it_shows(cluster, admin, capsys, monkeypatch):
    try:
        tutorials.run("training-stream.md", capsys, monkeypatch, handles=[(raylog, "connect", cluster)])
    finally:
        left = set(TOPICS) & set(admin.list_topics())
        if left:
            admin.delete_topics(sorted(left))
