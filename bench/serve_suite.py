"""Model-server throughput and latency with 1, 4, 16 concurrent gRPC clients, batching off and on.

One small exported encoder (`serving.export_lib.export_encoder`, random weights of a preset size) is
served by two `serving.server` child processes: one plain, one with `--enable_batching
--batching_parameters_file=...` (the shipped `serving/configs/batching_parameters.txt` unless
told otherwise). For each client count, both servers get the same closed-loop load, alternately:
every client is a thread with its own channel (`serving.client.ServingClient`) sending one
Wikipedia sentence per Predict request (output `pooled_output`) as soon as its previous answer
arrived, for a fixed time. Requests/s and per-request latency percentiles are reported, and
failed requests are counted (none are expected).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import grpc
import numpy as np

from bench import data, infer_suite, timing

OFF, ON = "batching off", "batching on"
DEFAULT_BATCHING_FILE = (
    Path(__file__).resolve().parents[1] / "serving/configs/batching_parameters.txt"
)


class ClosedLoopLoad:
    """`clients` threads that each send requests back to back for `duration` seconds."""

    def __init__(self, target: str, clients: int, duration: float, texts: list[np.ndarray]):
        from serving.client import ServingClient

        self.clients = [ServingClient(target) for _ in range(clients)]
        self.duration = duration
        self.texts = texts
        self.completed: list[int] = []  # per call of run()
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def _client_loop(self, index: int, end: float, latencies: list[float]) -> None:
        client = self.clients[index]
        i = index
        while time.perf_counter() < end:
            text = self.texts[i % len(self.texts)]
            i += len(self.clients)
            start = time.perf_counter()
            try:
                client.predict(
                    infer_suite.MODEL_NAME, {"text": text}, output_filter=["pooled_output"]
                )
            except grpc.RpcError as e:
                self.errors.append(f"{e.code().name}: {e.details()}")
                continue
            latencies.append(time.perf_counter() - start)

    def run(self) -> None:
        end = time.perf_counter() + self.duration
        per_client: list[list[float]] = [[] for _ in self.clients]
        threads = [
            threading.Thread(target=self._client_loop, args=(i, end, per_client[i]))
            for i in range(len(self.clients))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.completed.append(sum(map(len, per_client)))
        self.latencies.extend(x for values in per_client for x in values)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def run(
    preset: str,
    seq_length: int,
    client_counts: list[int],
    duration: float,
    rounds: int,
    batching_parameters_file: str | None = None,
) -> dict:
    """The serve suite (see the module docstring and bench.run's flags)."""
    from serving.process import ServerProcess

    batching_file = str(batching_parameters_file or DEFAULT_BATCHING_FILE)
    texts = [np.array([s], dtype=object) for s in data.sentences(512)]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        base = os.path.join(tmp, infer_suite.MODEL_NAME)
        infer_suite.export_ours(preset, seq_length, base)
        common = [
            "--embedded",
            f"--model_name={infer_suite.MODEL_NAME}",
            f"--model_base_path={base}",
        ]
        servers = {
            OFF: ServerProcess(common, log_path=Path(tmp) / "off.log"),
            ON: ServerProcess(
                [*common, "--enable_batching", f"--batching_parameters_file={batching_file}"],
                log_path=Path(tmp) / "on.log",
            ),
        }
        try:
            for server in servers.values():
                server.wait_available(
                    infer_suite.MODEL_NAME, timeout=infer_suite.SERVER_START_TIMEOUT
                )
            for count in client_counts:
                loads = {
                    name: ClosedLoopLoad(server.target, count, duration, texts)
                    for name, server in servers.items()
                }
                try:
                    samples = timing.alternate(
                        {name: load.run for name, load in loads.items()},
                        rounds=rounds,
                        warmup=1,
                        label=f"serve {count} clients",
                    )
                    results[str(count)] = {
                        name: _summary(load, samples[name].seconds) for name, load in loads.items()
                    }
                finally:
                    for load in loads.values():
                        load.close()
                results[str(count)]["ratio"] = (
                    results[str(count)][ON]["requests_per_s"]["median"]
                    / results[str(count)][OFF]["requests_per_s"]["median"]
                )
        finally:
            for server in servers.values():
                server.stop()
    return {
        "preset": preset,
        "seq_length": seq_length,
        "duration_s": duration,
        "batching_parameters_file": batching_file,
        "batching_parameters": Path(batching_file).read_text(),
        "clients": results,
    }


def _summary(load: ClosedLoopLoad, seconds: list[float]) -> dict:
    # The warm-up round is the first entry of `completed`; its latencies come first too.
    warm = load.completed[0]
    return {
        "requests_per_s": timing.summarize(
            [n / s for n, s in zip(load.completed[1:], seconds, strict=True)]
        ),
        "latency": timing.percentiles(load.latencies[warm:]),
        "failed_requests": len(load.errors),
        "errors": sorted(set(load.errors))[:3],
    }
