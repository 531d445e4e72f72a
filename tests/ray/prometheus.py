"""Reading what Ray's metrics endpoints export (what Prometheus scrapes), for the metrics and
dashboard tests."""

from __future__ import annotations

import re
import urllib.request

import ray

#: A sample line of the Prometheus text format: its metric name, then labels or the value.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", re.MULTILINE)


def scrape() -> str:
    """Every live node's exported metrics (Prometheus text format), from Ray's metrics export port."""
    texts = []
    for node in ray.nodes():
        if node["Alive"] and node.get("MetricsExportPort"):
            url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                texts.append(response.read().decode())
    return "\n".join(texts)


def value(text: str, name: str, **tags: str) -> float | None:
    """The first sample of ``ray_<name>`` carrying ``tags``, or None."""
    for line in text.splitlines():
        if line.startswith(f"ray_{name}{{") and all(f'{k}="{v}"' in line for k, v in tags.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def metric_types(text: str) -> dict[str, str]:
    """Metric name -> type (counter, gauge, histogram) from the ``# TYPE`` lines of ``text``."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def sample_names(text: str) -> set[str]:
    """The metric names of every sample in ``text`` (histograms as ``_bucket``/``_sum``/``_count``)."""
    return set(_SAMPLE.findall(text))
