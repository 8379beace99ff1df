"""Prometheus metrics under TF Serving's names (`:tensorflow:serving:request_count`, ...).

Served at the `--monitoring_config_file`'s path (TF Serving: `/monitoring/prometheus/metrics`) on
the REST port. Counters are exposed without prometheus_client's `_total` suffix, as TF Serving
does, so dashboards built for the real server work on this one. One gauge is ours, not TF
Serving's: `bert_tfx_requests_in_flight` (requests being answered now, by model and API), what a
drain or an autoscaler waits on.

Example:

>>> metrics = Metrics()
>>> metrics.count_request("bert", "predict", "OK")
>>> b'API="predict",model_name="bert",status="OK"} 1.0' in metrics.exposition()
True
"""

import collections
import threading

import prometheus_client
from prometheus_client.core import Metric

_LATENCY_BUCKETS = tuple(10.0 * 1.8**i for i in range(33))  # microseconds, 10 us .. ~1.5e9 us


class _Counters:
    """Labelled counters exposed as plain `name{labels} value` samples."""

    def __init__(self):
        self._lock = threading.Lock()
        self._values = collections.defaultdict(float)
        self._specs: dict[str, tuple[str, tuple[str, ...]]] = {}

    def define(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._specs[name] = (documentation, labels)

    def inc(self, name: str, *label_values: str) -> None:
        with self._lock:
            self._values[(name, label_values)] += 1

    def collect(self):
        with self._lock:
            values = dict(self._values)
        for name, (documentation, labels) in self._specs.items():
            metric = Metric(name, documentation, "counter")
            for (sample_name, label_values), value in sorted(values.items()):
                if sample_name == name:
                    metric.add_sample(name, dict(zip(labels, label_values, strict=True)), value)
            yield metric


class Metrics:
    """The server's metrics, in a registry of their own."""

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry()
        self._counters = _Counters()
        self._counters.define(
            ":tensorflow:serving:request_count",
            "The total number of requests.",
            ("model_name", "API", "status"),
        )
        self._counters.define(
            ":tensorflow:cc:saved_model:load_attempt_count",
            "The number of times a SavedModel was successfully loaded.",
            ("model_path", "status"),
        )
        self._counters.define(
            ":tensorflow:serving:model_warmup_request_count",
            "The number of warmup requests replayed.",
            ("model_name",),
        )
        self.registry.register(self._counters)
        self._latency = prometheus_client.Histogram(
            ":tensorflow:serving:request_latency",
            "Distribution of wall time (in microseconds) for TF Serving requests.",
            ("model_name", "API", "entrypoint"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._runtime_latency = prometheus_client.Histogram(
            ":tensorflow:serving:runtime_latency",
            "Distribution of wall time (in microseconds) for Tensorflow runtime.",
            ("model_name", "API", "runtime"),
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._in_flight = prometheus_client.Gauge(
            "bert_tfx_requests_in_flight",
            "Requests being answered now (not a TF Serving metric).",
            ("model_name", "API"),
            registry=self.registry,
        )
        self._batch_size = prometheus_client.Histogram(
            ":tensorflow:serving:batching_session:processed_batch_size",
            "Distribution of the (padded) sizes of the batches run.",
            ("model_name", "signature_name"),
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
            registry=self.registry,
        )

    def count_request(self, model_name: str, api: str, status: str) -> None:
        self._counters.inc(":tensorflow:serving:request_count", model_name, api, status)

    def in_flight(self, model_name: str, api: str) -> prometheus_client.Gauge:
        """One model and API's in-flight gauge (`with ....track_inprogress(): answer()`)."""
        return self._in_flight.labels(model_name, api)

    def requests_in_flight(self) -> int:
        """Requests being answered now, all models and APIs."""
        samples = self._in_flight.collect()[0].samples
        return int(sum(sample.value for sample in samples))

    def observe_latency(self, model_name: str, api: str, entrypoint: str, micros: float) -> None:
        self._latency.labels(model_name, api, entrypoint).observe(micros)

    def observe_runtime_latency(self, model_name: str, api: str, micros: float) -> None:
        """The model run alone (TF Serving: around Session::Run, runtime "TF1"); the request's
        latency minus this is the server's own time."""
        self._runtime_latency.labels(model_name, api, "TF1").observe(micros)

    def count_load(self, model_path: str, status: str) -> None:
        self._counters.inc(":tensorflow:cc:saved_model:load_attempt_count", model_path, status)

    def count_warmup(self, model_name: str) -> None:
        self._counters.inc(":tensorflow:serving:model_warmup_request_count", model_name)

    def observe_batch(self, model_name: str, signature_name: str, size: int) -> None:
        self._batch_size.labels(model_name, signature_name).observe(size)

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
