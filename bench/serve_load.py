"""Bounded load on the local model server: N concurrent gRPC clients and a hot swap mid-run.

Exports a tiny BERT encoder (the `tiny` preset, random weights, a small vocabulary) as version 1
into a temporary base path and version 2 beside it, starts `python -m serving.server --embedded`
on the base path (`serving.process.ServerProcess`, loopback), and runs `--clients` threads, each
with its own gRPC channel, sending `Predict` requests to `serving_default`. Once a
`--swap_after` fraction of the planned requests is done, version 2 is renamed into the base path
(as a deployment would) and the server swaps to it while the clients keep sending. Each client
stops after `--requests` requests once version 2 has answered one (or at `--duration`).

Reports requests sent/failed (by gRPC code), p50/p99 latency, versions served, and the server's
RSS after warm-up (start), at the swap (middle), after the load (end) and every 10% of the
requests (memory must stay flat, not grow with requests served), then stops the server
with SIGTERM (it must drain and exit 0). Exits non-zero if any request failed, version 2 was
never served, or the server did not exit cleanly.

    python -m bench.serve_load --clients=32 --requests=100 --duration=300 \\
        --output_json=/tmp/serve_load.json
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from absl import flags, logging

from bench.report import write_json
from bert_tf import flags_util

FLAGS = flags.FLAGS

_WORDS = (  # noqa: SIM905  (a sentence reads better than a 31-line list)
    "the a man is eating food dog runs fast paris capital of france who wrote book by music "
    "river city night day small large red blue green model server request answer"
).split()
_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", *_WORDS, "##s"]
MODEL_NAME = "bert_encoder"


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default)."""
    flags.DEFINE_integer("clients", 32, "Concurrent gRPC clients.", flag_values=flag_values)
    flags.DEFINE_integer(
        "requests", 100, "Requests per client (at least).", lower_bound=1, flag_values=flag_values
    )
    flags.DEFINE_float(
        "duration", 300, "Stop all clients after this many seconds.", flag_values=flag_values
    )
    flags.DEFINE_float(
        "swap_after",
        0.5,
        "Install version 2 when this fraction of the planned requests is done; 0: no swap.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "texts_per_request", 4, "Sentences per request.", lower_bound=1, flag_values=flag_values
    )
    flags.DEFINE_integer(
        "max_seq_length", 32, "Export's sequence length.", lower_bound=3, flag_values=flag_values
    )
    flags.DEFINE_bool(
        "enable_batching",
        False,
        "Start the server with --enable_batching.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_json",
        "",
        "Write the report here (temp file, then rename).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "work_dir",
        "",
        "Models and server log go here (default: a temp dir).",
        flag_values=flag_values,
    )


def export_tiny_encoder(export_dir: Path, version: int, seed: int, max_seq_length: int) -> str:
    """A `tiny`-preset encoder with random weights (seeded) as `<export_dir>/<version>`."""
    import keras

    from bert_tf.modeling.configs import BertConfig
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_encoder

    keras.utils.set_random_seed(seed)
    config = BertConfig.from_preset("tiny", vocab_size=len(_VOCAB))
    preprocessor = BertPreprocessor(_VOCAB, seq_length=max_seq_length)
    return export_encoder(build_encoder(config), preprocessor, export_dir, version)


def _rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def _percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(values, q)) if values else float("nan")


class _Load:
    """Shared state of the client threads."""

    def __init__(self, planned: int):
        self.lock = threading.Lock()
        self.planned = planned
        self.done = 0
        self.latencies_ms: list[float] = []
        self.failures: collections.Counter[str] = collections.Counter()
        self.versions: collections.Counter[int] = collections.Counter()
        self.new_version_served = threading.Event()
        self.stop = threading.Event()

    def record(self, latency_ms: float, version: int | None, code: str | None) -> None:
        with self.lock:
            self.done += 1
            self.latencies_ms.append(latency_ms)
            if code is None:
                self.versions[version] += 1
            else:
                self.failures[code] += 1


def _client(
    target: str, index: int, load: _Load, requests: int, texts_per_request: int, swap: bool
) -> None:
    """Sends `requests` Predicts (and on until version 2 answers one, when `swap`)."""
    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    rng = np.random.default_rng(index)
    with grpc.insecure_channel(target) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        sent = 0
        while not load.stop.is_set():
            if sent >= requests and (not swap or load.new_version_served.is_set()):
                return
            texts = [" ".join(rng.choice(_WORDS, size=8)) for _ in range(texts_per_request)]
            request = predict_pb2.PredictRequest()
            request.model_spec.name = MODEL_NAME
            request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts))
            start = time.perf_counter()
            version, code = None, None
            try:
                response = stub.Predict(request, timeout=60)
                version = response.model_spec.version.value
                if response.outputs["pooled_output"].tensor_shape.dim[0].size != len(texts):
                    code = "WRONG_OUTPUT"
            except grpc.RpcError as e:
                code = e.code().name
                logging.warning("client %d: %s: %s", index, code, e.details())
            load.record((time.perf_counter() - start) * 1e3, version, code)
            if version == 2:
                load.new_version_served.set()
            sent += 1


def run_load(work_dir: Path) -> dict:
    """Exports, serves, loads, swaps, stops; returns the report."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from serving.process import ServerProcess

    base, staging = work_dir / "models" / MODEL_NAME, work_dir / "staging"
    logging.info("Exporting tiny encoder versions 1 and 2 under %s", work_dir)
    export_tiny_encoder(base, 1, seed=1, max_seq_length=FLAGS.max_seq_length)
    swap = FLAGS.swap_after > 0
    if swap:
        export_tiny_encoder(staging, 2, seed=2, max_seq_length=FLAGS.max_seq_length)
    args = [
        "--embedded",
        f"--model_name={MODEL_NAME}",
        f"--model_base_path={base}",
        "--file_system_poll_wait_seconds=0.5",
    ]
    if FLAGS.enable_batching:
        args.append("--enable_batching")
    server = ServerProcess(args, work_dir / "server.log")
    report: dict = {"clients": FLAGS.clients, "requests_planned": FLAGS.clients * FLAGS.requests}
    try:
        server.wait_available(MODEL_NAME)
        # Warm-up (outside the figures): the first calls allocate TF's and gRPC's buffers.
        stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = MODEL_NAME
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(["warm up"] * FLAGS.texts_per_request))
        for _ in range(20):
            stub.Predict(request, timeout=60)
        rss = {"start": _rss_mb(server.process.pid)}
        load = _Load(report["requests_planned"])
        threads = [
            threading.Thread(
                target=_client,
                args=(server.target, i, load, FLAGS.requests, FLAGS.texts_per_request, swap),
                name=f"client-{i}",
            )
            for i in range(FLAGS.clients)
        ]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        swap_at, next_progress, rss_max = None, 0.1, rss["start"]
        timeline = [(0, rss["start"])]  # (requests done, server RSS MB) every 10%
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            rss_max = max(rss_max, _rss_mb(server.process.pid))
            if time.monotonic() - start > FLAGS.duration and not load.stop.is_set():
                logging.warning("--duration=%s s reached: stopping the clients", FLAGS.duration)
                load.stop.set()
            if swap and swap_at is None and load.done >= FLAGS.swap_after * load.planned:
                swap_at = load.done
                rss["middle"] = _rss_mb(server.process.pid)
                os.rename(staging / "2", base / "2")  # atomic: the poller sees all or nothing
                logging.info("Installed version 2 after %d requests", swap_at)
            if load.done >= next_progress * load.planned:
                timeline.append((load.done, _rss_mb(server.process.pid)))
                logging.info(
                    "%d/%d requests, %d failed, server RSS %.0f MB",
                    load.done,
                    load.planned,
                    sum(load.failures.values()),
                    timeline[-1][1],
                )
                next_progress += 0.1
        for thread in threads:
            thread.join()
        wall = time.monotonic() - start
        rss["end"] = _rss_mb(server.process.pid)
        rss["max"] = max(rss_max, rss["end"])
        rss.setdefault("middle", rss["end"])
    finally:
        exit_code = server.stop()
    latencies = load.latencies_ms
    report.update(
        requests_sent=load.done,
        requests_failed=sum(load.failures.values()),
        failures_by_code=dict(load.failures),
        versions_served={str(v): n for v, n in sorted(load.versions.items())},
        swap_after_requests=swap_at,
        new_version_served=load.new_version_served.is_set(),
        latency_ms={
            "p50": _percentile(latencies, 50),
            "p99": _percentile(latencies, 99),
            "max": max(latencies, default=float("nan")),
        },
        throughput_rps=load.done / wall if wall else float("nan"),
        wall_s=wall,
        server_rss_mb=rss,
        server_rss_growth_mb=rss["end"] - rss["start"],
        server_rss_timeline=timeline,
        server_exit_code=exit_code,
        stopped_by_duration=load.stop.is_set(),
    )
    return report


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    if FLAGS.clients < 1:
        sys.exit(f"error: --clients must be >= 1, got {FLAGS.clients}")
    if not 0 <= FLAGS.swap_after < 1:
        sys.exit(f"error: --swap_after must be in [0, 1), got {FLAGS.swap_after}")
    if FLAGS.duration <= 0:
        sys.exit(f"error: --duration must be > 0 seconds, got {FLAGS.duration}")
    if FLAGS.work_dir:
        os.makedirs(FLAGS.work_dir, exist_ok=True)
        report = run_load(Path(FLAGS.work_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="serve_load-") as work_dir:
            report = run_load(Path(work_dir))
    print(json.dumps(report, indent=2))
    if FLAGS.output_json:
        write_json(Path(FLAGS.output_json), report)
    problems = []
    if report["requests_failed"]:
        problems.append(
            f"{report['requests_failed']} requests failed: {report['failures_by_code']}"
        )
    if FLAGS.swap_after and not report["new_version_served"]:
        problems.append("version 2 was never served")
    if report["server_exit_code"] != 0:
        problems.append(f"the server exited with {report['server_exit_code']} on SIGTERM")
    if problems:
        sys.exit("error: " + "; ".join(problems))


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
