"""Encoder inference from raw strings: our SavedModel against keras-nlp's, and through the server.

Ours is `serving.export_lib.export_encoder` (the TF Serving export: `BertPreprocessor` + `BertEncoder`
in one `serving_default` signature, text -> pooled/sequence outputs). The reference is what a
keras-nlp user exports for the same job: `keras_nlp.models.BertPreprocessor` (its `BertTokenizer`
on the same vocab) + `BertBackbone` of the same size, in a `keras.export.ExportArchive` with the
same signature. Both SavedModels are loaded back (`tf.saved_model.load`) and called in this
process with batches of real Wikipedia sentences; ours is also served by the local model server
(`serving.server` in a child process) and called over gRPC (`serving.client.ServingClient`,
requesting `pooled_output`), which gives the server's overhead over the in-process call, and
asked for the model's status (`GetModelStatus`, no model run), which gives the part of that
overhead that is the gRPC round trip itself (client, transport, server framework). The server's
own time per request is read from its metrics, as TF Serving names them: request latency (the
handler: decoding, checks, model, encoding) minus runtime latency (the model run alone). The
server gets this process's TensorFlow thread pools (`--tensorflow_intra_op_parallelism`,
`--tensorflow_inter_op_parallelism`), and HF's worker as many torch threads as intra-op ones
(at batch 1 also all cores, when that is more: HF's default, its fastest there). With the
reference environment (`make reference-env`), HF transformers on PyTorch answers the same
strings too (`bench.hf_reference`: its fast tokenizer on the same vocab, padding to the batch's
longest, + `BertModel` of the same size in `torch.inference_mode`, timed by the worker itself).
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import keras
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exports' tokenizer ops)
from absl import logging

from bench import data, reference, timing
from bench.hf_reference import HFWorker
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.text.tokenization import BertPreprocessor

OURS, REFERENCE, SERVER, HF = "ours", "keras_nlp", "ours via gRPC server", "hf_transformers"
# HF on every core, beside HF on ours' intra-op thread count when that is smaller (batch 1).
HF_ALL_CORES = f"{HF}, {os.cpu_count()} threads"
# A gRPC call the server answers without running a model: the floor of SERVER's overhead.
ROUND_TRIP = "gRPC round trip, no model"
METRICS_PATH = "/monitoring/prometheus/metrics"
MODEL_NAME = "bench_encoder"
_STRINGS = tf.TensorSpec([None], tf.string)
# Importing TensorFlow and loading a model can take minutes on a loaded 2-core machine.
SERVER_START_TIMEOUT = 900


def export_ours(preset: str, seq_length: int, export_dir: str) -> str:
    """Our encoder of `preset` size (random weights) as a TF Serving version folder."""
    from serving.export_lib import export_encoder

    encoder = build_encoder(BertConfig.from_preset(preset))
    preprocessor = BertPreprocessor(data.vocab_file(), seq_length=seq_length)
    return export_encoder(encoder, preprocessor, export_dir, version=1)


def export_reference(preset: str, seq_length: int, path: str) -> str:
    """keras-nlp's BertPreprocessor + BertBackbone of `preset` size, same signature as ours."""
    import keras_nlp

    config = BertConfig.from_preset(preset)
    tokenizer = keras_nlp.models.BertTokenizer(vocabulary=str(data.vocab_file()), lowercase=True)
    preprocessor = keras_nlp.models.BertPreprocessor(tokenizer, sequence_length=seq_length)
    backbone = reference.keras_nlp_backbone(config)

    def serve(text):
        features = preprocessor(text)
        outputs = backbone(features, training=False)
        return {
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "input_mask": features["padding_mask"],
        }

    preprocessor(tf.constant(["built by a first call"]))  # ExportArchive tracks built layers only
    archive = keras.export.ExportArchive()
    archive.track(backbone)
    archive.track(preprocessor)
    archive.add_endpoint("serving_default", serve, input_signature=[_STRINGS])
    archive.write_out(path, verbose=False)
    return path


def load(path: str) -> Callable[[tf.Tensor], dict]:
    """The `serving_default` signature of a SavedModel, called with a string tensor."""
    signature = tf.saved_model.load(path).signatures["serving_default"]
    return lambda texts: signature(text=texts)


def ours_inprocess(preset: str, seq_length: int) -> Callable[[tf.Tensor], dict]:
    """Exports ours into a temporary folder and loads it back (used by `bench.profile`)."""
    path = export_ours(preset, seq_length, os.path.join(tempfile.mkdtemp(), MODEL_NAME))
    return load(path)


def _latency_runner(fn: Callable[[object], object], inputs: list, latencies: list[float]):
    """A candidate that calls `fn` once per input and records each call's latency."""

    def run() -> None:
        for x in inputs:
            start = time.perf_counter()
            fn(x)
            latencies.append(time.perf_counter() - start)

    return run


def _sync(outputs: dict) -> None:
    outputs["pooled_output"].numpy()


def _server_seconds(metrics_url: str) -> dict[str, float]:
    """Total seconds of the server's predict requests and of their model runs so far, and how
    many requests (`count`)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=60) as response:
        text = response.read().decode()
    totals = {}
    for family in text_string_to_metric_families(text):
        kind = family.name.rsplit(":", 1)[-1]  # request_latency / runtime_latency
        for sample in family.samples:
            labels = sample.labels
            if (
                kind in ("request_latency", "runtime_latency")
                and labels.get("model_name") == MODEL_NAME
                and labels.get("API") == "predict"
            ):
                if sample.name.endswith("_sum"):
                    totals[kind] = totals.get(kind, 0.0) + sample.value / 1e6
                elif sample.name.endswith("_count") and kind == "request_latency":
                    totals["count"] = totals.get("count", 0.0) + sample.value
    missing = {"request_latency", "runtime_latency"} - set(totals)
    if missing:
        raise ValueError(f"{metrics_url}: no {sorted(missing)} samples of model {MODEL_NAME}")
    return totals


def run(
    preset: str,
    seq_length: int,
    batch_size: int,
    latency_calls: int,
    latency_rounds: int,
    throughput_calls: int,
    throughput_rounds: int,
    with_server: bool = True,
    reference_python: str | None = None,
) -> dict:
    """The infer suite (see the module docstring and bench.run's flags); HF's side too with
    `reference_python` (the reference environment's interpreter)."""
    from serving.client import ServingClient
    from serving.process import ServerProcess

    with tempfile.TemporaryDirectory(prefix="bench-infer-") as tmp:
        base = os.path.join(tmp, MODEL_NAME)
        paths = {OURS: export_ours(preset, seq_length, base)}
        server = client = worker = None
        intra_op = tf.config.threading.get_intra_op_parallelism_threads()
        inter_op = tf.config.threading.get_inter_op_parallelism_threads()
        if with_server:  # starts loading while the reference is exported
            monitoring = Path(tmp) / "monitoring.config"
            monitoring.write_text(f'prometheus_config {{ enable: true path: "{METRICS_PATH}" }}')
            server = ServerProcess(
                [
                    "--embedded",
                    f"--model_name={MODEL_NAME}",
                    f"--model_base_path={base}",
                    f"--monitoring_config_file={monitoring}",
                    f"--tensorflow_intra_op_parallelism={intra_op}",
                    f"--tensorflow_inter_op_parallelism={inter_op}",
                ],
                log_path=Path(tmp) / "server.log",
            )
        try:
            paths[REFERENCE] = export_reference(preset, seq_length, os.path.join(tmp, "reference"))
            models = {name: load(path) for name, path in paths.items()}
            if reference_python:
                worker = HFWorker(reference_python, Path(tmp) / "hf_worker.log")
                hf_threads = intra_op or os.cpu_count()  # as many threads per op as ours
                worker.request("threads", threads=hf_threads)
                worker.request(
                    "encoder",
                    config=BertConfig.from_preset(preset).to_hf_config(),
                    vocab_file=str(data.vocab_file()),
                    seq_length=seq_length,
                )
            if server:
                server.wait_available(MODEL_NAME, timeout=SERVER_START_TIMEOUT)
                client = ServingClient(server.target)
            one = [tf.constant([s]) for s in data.sentences(latency_calls)]
            latencies: dict[str, list[float]] = {name: [] for name in models}
            candidates = {
                name: _latency_runner(lambda x, m=model: _sync(m(x)), one, latencies[name])
                for name, model in models.items()
            }
            scrapes: list[dict[str, float]] = []  # the server's seconds, timed rounds only
            if client:
                latencies[SERVER] = []
                served = _latency_runner(
                    lambda x: client.predict(
                        MODEL_NAME, {"text": x.numpy()}, output_filter=["pooled_output"]
                    ),
                    one,
                    latencies[SERVER],
                )
                served_rounds = itertools.count()

                def served_round() -> None:
                    if next(served_rounds) == 1:  # after the warm-up round (outside the timers)
                        scrapes.append(_server_seconds(server.rest + METRICS_PATH))
                    served()

                candidates[SERVER] = served_round
                latencies[ROUND_TRIP] = []
                candidates[ROUND_TRIP] = _latency_runner(
                    lambda x: client.status(MODEL_NAME), one, latencies[ROUND_TRIP]
                )
            if worker:
                singles = [[s] for s in data.sentences(latency_calls)]

                def hf_round(threads: int, out: list[float]) -> None:
                    worker.request("threads", threads=threads)
                    out.extend(worker.request("encode", batches=singles)["seconds"])

                latencies[HF] = []
                candidates[HF] = lambda: hf_round(hf_threads, latencies[HF])
                if hf_threads != os.cpu_count():  # and HF at its own default: every core
                    latencies[HF_ALL_CORES] = []
                    candidates[HF_ALL_CORES] = lambda: hf_round(
                        os.cpu_count(), latencies[HF_ALL_CORES]
                    )
            # The warm-up round's latencies are dropped below (first `latency_calls` of each).
            timing.alternate(candidates, rounds=latency_rounds, warmup=1, label="infer batch 1")
            if server:
                scrapes.append(_server_seconds(server.rest + METRICS_PATH))
            latency = {
                name: timing.percentiles(values[latency_calls:])
                for name, values in latencies.items()
            }
            batches = [
                tf.constant(data.sentences(batch_size * (i + 1))[batch_size * i :])
                for i in range(throughput_calls)
            ]
            throughput_candidates = {
                name: (lambda m=model: [_sync(m(b)) for b in batches])
                for name, model in models.items()
            }
            hf_rounds: list[float] = []  # the worker's own seconds per round (no pipe)
            if worker:
                worker.request("threads", threads=hf_threads)  # the last latency round's may differ
                texts = [[s.decode() for s in b.numpy()] for b in batches]
                throughput_candidates[HF] = lambda: hf_rounds.append(
                    sum(worker.request("encode", batches=texts)["seconds"])
                )
            throughput_samples = timing.alternate(
                throughput_candidates,
                rounds=throughput_rounds,
                warmup=1,
                label=f"infer batch {batch_size}",
            )
        finally:
            if worker:
                worker.close()
            if client:
                client.close()
            if server:
                code = server.stop()
                if code:
                    logging.warning("server exited with %d:\n%s", code, server.log()[-3000:])
    throughput = {}
    for name, samples in throughput_samples.items():
        seconds = hf_rounds[1:] if name == HF else samples.seconds  # warm-up round dropped
        per_second = [batch_size * throughput_calls / s for s in seconds]
        throughput[name] = {"sequences_per_s": timing.summarize(per_second)}
    result = {
        "preset": preset,
        "seq_length": seq_length,
        "batch_size": batch_size,
        # 0: TensorFlow's default (all cores); HF's worker ran intra_op (or all cores) threads.
        "threads": {"tensorflow_intra_op": intra_op, "tensorflow_inter_op": inter_op},
        "latency_batch_1": latency,
        "throughput": throughput,
        "ratio_throughput": throughput[OURS]["sequences_per_s"]["median"]
        / throughput[REFERENCE]["sequences_per_s"]["median"],
        "ratio_latency_p50": latency[REFERENCE]["p50_ms"] / latency[OURS]["p50_ms"],
    }
    if HF in latency:
        result["ratio_throughput_vs_hf"] = (
            throughput[OURS]["sequences_per_s"]["median"]
            / throughput[HF]["sequences_per_s"]["median"]
        )
        result["ratio_latency_p50_vs_hf"] = latency[HF]["p50_ms"] / latency[OURS]["p50_ms"]
    if HF_ALL_CORES in latency:
        result["ratio_latency_p50_vs_hf_all_cores"] = (
            latency[HF_ALL_CORES]["p50_ms"] / latency[OURS]["p50_ms"]
        )
    if SERVER in latency:
        result["server_overhead"] = latency[SERVER]["p50_ms"] / latency[OURS]["p50_ms"] - 1.0
        result["round_trip_overhead"] = latency[ROUND_TRIP]["p50_ms"] / latency[OURS]["p50_ms"]
        before, after = scrapes
        request, runtime, count = (
            after[k] - before[k] for k in ("request_latency", "runtime_latency", "count")
        )
        # Means over the timed rounds' served requests, from the server's own metrics.
        result["server_request_ms"] = 1e3 * request / count
        result["server_runtime_ms"] = 1e3 * runtime / count
        # The server's own time per request (decoding, checks, encoding, metrics) over the model's.
        result["server_handler_overhead"] = request / runtime - 1.0
    return result
