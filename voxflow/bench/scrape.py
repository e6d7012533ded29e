"""One sample of a server's ``GET /metrics``, read by prometheus_client's parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def sample_value(metrics_text: str, name: str, **labels: str) -> float:
    """The first sample named `name` (a sample's own name: a counter's ends in ``_total``)
    whose labels include `labels`, in a Prometheus text exposition; 0.0 when there is none
    (a labelled counter not yet incremented is absent).

    Raises:
        ValueError: `metrics_text` is not a text exposition.
    """
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v
                                           for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def metric(url: str, name: str, **labels: str) -> float:
    """`sample_value` of ``GET {url}/metrics`` (10 s timeout).

    Raises:
        httpx.HTTPError: the server did not answer.
    """
    return sample_value(httpx.get(f"{url}/metrics", timeout=10).text, name, **labels)
