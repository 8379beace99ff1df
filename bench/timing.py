"""Measuring tools shared by the suites: alternating timers, statistics, peak memory, matmul peak.

Every comparison runs its candidates alternately in one process (A B A B ...) so that a load
change on a shared machine hits all of them alike; warm-up rounds (tracing, XLA compilation,
caches) are discarded and the rest summarised by the median and the min..max spread.

Example:

    from bench import timing

    samples = timing.alternate({"ours": run_ours, "ref": run_ref}, rounds=5, warmup=1)
    timing.summarize(samples["ours"])  # {"median": ..., "min": ..., "max": ..., "n": 5, ...}
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf
from absl import logging

from bench import rss


@dataclass
class Samples:
    """Wall times (s) of the timed calls of one candidate, and peak memory seen during them."""

    seconds: list[float] = field(default_factory=list)
    # Per-call peak memory above the level just before the call (MB), and the absolute peak.
    step_memory_mb: list[float] = field(default_factory=list)
    peak_memory_mb: list[float] = field(default_factory=list)


def summarize(values: list[float]) -> dict[str, float]:
    """median, min, max, n and the spread (max - min) as % of the median."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("summarize: no samples")
    median = float(np.median(values))
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "spread_pct": 100.0 * (max(values) - min(values)) / median if median else 0.0,
    }


def percentiles(latencies_s: list[float]) -> dict[str, float]:
    """p50/p90/p99 and the mean in milliseconds (over every request, all rounds pooled)."""
    ms = np.asarray(latencies_s, dtype=np.float64) * 1e3
    if not ms.size:
        raise ValueError("percentiles: no latencies")
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "n": int(ms.size),
    }


def alternate(
    candidates: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    measure_memory: bool = False,
    label: str = "",
) -> dict[str, Samples]:
    """Calls each candidate once per round, in turn; returns the timed rounds' samples.

    A candidate must block until its work is done (fetch a result to the host). With
    `measure_memory`, each candidate runs once more after the timed rounds under `PeakMemory`
    (`peak_memory_of`): resetting the high-water mark before a timed call would time its page
    faults too (on CPU the reset also trims malloc's free memory, ~10% of a MiniLM step).
    """
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be >= 1 and warmup >= 0, got {rounds}, {warmup}")
    samples = {name: Samples() for name in candidates}
    for r in range(warmup + rounds):
        timed = r >= warmup
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            if timed:
                samples[name].seconds.append(seconds)
            logging.info(
                "%s%s round %d/%d%s: %.4f s",
                f"{label} " if label else "",
                name,
                r + 1,
                warmup + rounds,
                "" if timed else " (warm-up)",
                seconds,
            )
    if measure_memory:
        for name, fn in candidates.items():
            step, peak = peak_memory_of(fn)
            samples[name].step_memory_mb.append(step)
            samples[name].peak_memory_mb.append(peak)
    return samples


def peak_memory_of(fn: Callable[[], object]) -> tuple[float, float]:
    """One untimed call of `fn` under `PeakMemory`: (peak above the level before it, absolute
    peak), in MB."""
    memory = PeakMemory()
    memory.start()
    fn()
    return memory.stop()


# --- Memory ------------------------------------------------------------------------------------


def _gpu() -> str | None:
    return "GPU:0" if tf.config.list_physical_devices("GPU") else None


class PeakMemory:
    """Peak memory of one call: accelerator memory on a GPU, else the process RSS high-water.

    On CPU `bench.rss` resets the kernel's high-water mark first, so the peak belongs to this
    call and not to an earlier one in the same process. `stop()` returns
    (peak above the level at `start()`, absolute peak), both in MB.
    """

    def __init__(self):
        self.gpu = _gpu()
        self.before = 0.0

    def start(self) -> None:
        if self.gpu:
            tf.config.experimental.reset_memory_stats(self.gpu)
            self.before = tf.config.experimental.get_memory_info(self.gpu)["current"] / 2**20
            return
        self.before = rss.reset_peak()

    def stop(self) -> tuple[float, float]:
        if self.gpu:
            peak = tf.config.experimental.get_memory_info(self.gpu)["peak"] / 2**20
        else:
            peak = rss.peak_mb()
        return peak - self.before, peak


def memory_kind() -> str:
    return f"{_gpu()} allocator peak" if _gpu() else "process RSS high-water (VmHWM)"


# --- Machine peak ------------------------------------------------------------------------------


def matmul_peak_flops(dtype: str, size: int | None = None, repeats: int = 5) -> float:
    """The best FLOP/s of a large square `tf.matmul` in `dtype` on this machine.

    `size` defaults to 2048 on CPU (about 17 GFLOP, long enough to reach the BLAS peak) and 8192
    on a GPU.
    """
    size = size or (8192 if _gpu() else 2048)
    a = tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal([size, size], seed=[3, 4]), dtype)

    @tf.function
    def matmul(a, b):
        # One element back to the host: forces completion without copying the product.
        return tf.matmul(a, b)[0, 0]

    matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


# The vector extensions that decide which oneDNN / BLAS kernels run (fp32 and bfloat16 alike).
_CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_vp2intersect", "amx_bf16")


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict[str, object]:
    """The CPU's name, family/model and vector extensions from `cpuinfo` (first processor).

    The name alone is not enough: cloud VMs of different generations all read "AMD EPYC", and
    the same benchmark ran ~1.8x faster on one (family 26, Zen 5) than on another that day.
    """
    if not os.path.exists(cpuinfo):
        return {"cpu": "unknown"}
    with open(cpuinfo) as f:
        first = f.read().split("\n\n", 1)[0]
    fields = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in first.splitlines())
    )
    flags = set(fields.get("flags", "").split())
    return {
        "cpu": fields.get("model name", "unknown"),
        "cpu_family": fields.get("cpu family"),
        "cpu_model": fields.get("model"),
        "cpu_flags": [flag for flag in _CPU_FLAGS if flag in flags],
    }


def machine() -> dict[str, object]:
    """What the numbers were measured on."""
    import keras
    import keras_nlp

    cpu = cpu_info()
    gpus = tf.config.list_physical_devices("GPU")
    return {
        **cpu,
        "cpu_cores": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "gpu": [
            tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus
        ],
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "keras_nlp": keras_nlp.__version__,
    }
