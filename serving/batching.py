"""Server-side batching: merges concurrent calls of one signature along dimension 0.

Follows TF Serving's batching session (`--enable_batching`, `--batching_parameters_file`):
tasks join the open batch until it holds `max_batch_size` rows or its oldest task has waited
`batch_timeout_micros`; at most `max_enqueued_batches` batches wait (then UNAVAILABLE, as TF
Serving); a batch is padded up to the next `allowed_batch_sizes` entry by repeating its first
row, run once, and the outputs are split back. Written by hand: TF's batch scheduler is a C++
library with no Python API outside graph ops.

Example:

>>> scheduler = BatchScheduler(signature.run, max_batch_size=8, batch_timeout_micros=2000)
>>> scheduler.submit({"x": np.ones([3, 2], np.float32)})["y"].shape
(3, 2)
"""

import collections
import os
import threading
import time
from collections.abc import Callable, Sequence

import grpc
import numpy as np

from serving.servable import ServingError

Arrays = dict[str, np.ndarray]


class _Task:
    def __init__(self, inputs: Arrays, size: int):
        self.inputs = inputs
        self.size = size
        self.done = threading.Event()
        self.outputs: Arrays | None = None
        self.error: ServingError | None = None


class _Batch:
    def __init__(self, key):
        self.key = key
        self.tasks: list[_Task] = []
        self.size = 0
        self.sealed = False  # no task may join any more
        self.opened = time.monotonic()


def _batch_size(inputs: Arrays) -> int:
    sizes = {v.shape[0] if v.ndim else None for v in inputs.values()}
    if len(sizes) != 1 or None in sizes:
        raise ServingError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "Batching session Run() input tensors must have equal 0th-dimension size",
        )
    return sizes.pop()


class BatchScheduler:
    """Batches calls of `run` (a function of a dict of arrays) across threads.

    Args:
        run: runs one merged batch; outputs must keep dimension 0.
        max_batch_size: most rows per batch; larger requests get INVALID_ARGUMENT.
        batch_timeout_micros: how long an unfilled batch waits for more tasks.
        max_enqueued_batches: bound on waiting batches; beyond it requests get UNAVAILABLE.
        num_batch_threads: batches run in parallel (default: CPU count).
        allowed_batch_sizes: increasing sizes to pad to; the last must equal max_batch_size.
        on_batch: called with each padded batch size (metrics).
    """

    def __init__(
        self,
        run: Callable[[Arrays], Arrays],
        max_batch_size: int = 1000,
        batch_timeout_micros: int = 0,
        max_enqueued_batches: int = 10,
        num_batch_threads: int | None = None,
        allowed_batch_sizes: Sequence[int] = (),
        on_batch: Callable[[int], None] | None = None,
    ):
        allowed = list(allowed_batch_sizes)
        if allowed and (allowed != sorted(allowed) or allowed[-1] != max_batch_size):
            raise ValueError(
                f"allowed_batch_sizes {allowed} must be increasing and end with "
                f"max_batch_size {max_batch_size}"
            )
        if max_batch_size < 1 or max_enqueued_batches < 1:
            raise ValueError("max_batch_size and max_enqueued_batches must be >= 1")
        self._run = run
        self.max_batch_size = max_batch_size
        self._timeout = batch_timeout_micros / 1e6
        self._max_enqueued = max_enqueued_batches
        self._allowed = allowed
        self._on_batch = on_batch
        self._queue: collections.deque[_Batch] = collections.deque()
        self._cv = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name="batch")
            for _ in range(num_batch_threads or os.cpu_count() or 1)
        ]
        for thread in self._threads:
            thread.start()

    @classmethod
    def from_proto(cls, run, params, on_batch=None) -> "BatchScheduler":
        """Builds from a `BatchingParameters` message; unset fields keep TF Serving's defaults."""
        kwargs = {
            name: getattr(params, name).value
            for name in (
                "max_batch_size",
                "batch_timeout_micros",
                "max_enqueued_batches",
                "num_batch_threads",
            )
            if params.HasField(name)
        }
        return cls(run, allowed_batch_sizes=params.allowed_batch_sizes, on_batch=on_batch, **kwargs)

    def submit(self, inputs: Arrays, deadline: float | None = None) -> Arrays:
        """Runs `inputs` as part of a batch; blocks until done or `deadline` (monotonic)."""
        size = _batch_size(inputs)
        if size > self.max_batch_size:
            raise ServingError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Task size {size} is larger than maximum input batch size {self.max_batch_size}",
            )
        # Only tasks with equal names, dtypes and inner shapes can be concatenated.
        key = tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in inputs.items()))
        task = _Task(inputs, size)
        with self._cv:
            if self._closed:  # the version was unloaded while this request held it
                return self._run(inputs)
            batch = next((b for b in reversed(self._queue) if b.key == key), None)
            if batch is None or batch.sealed or batch.size + size > self.max_batch_size:
                if batch is not None:
                    batch.sealed = True
                if len(self._queue) >= self._max_enqueued:
                    raise ServingError(
                        grpc.StatusCode.UNAVAILABLE,
                        "The batch scheduling queue to which this task was submitted is full",
                    )
                batch = _Batch(key)
                self._queue.append(batch)
            batch.tasks.append(task)
            batch.size += size
            batch.sealed = batch.size == self.max_batch_size
            self._cv.notify()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not task.done.wait(timeout):
            raise ServingError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline exceeded in batch queue"
            )
        if task.error is not None:
            raise task.error
        return task.outputs

    def close(self) -> None:
        """Runs the batches already queued, then stops the threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for thread in self._threads:
            thread.join()

    def _next_batch(self) -> _Batch | None:
        with self._cv:
            while True:
                now = time.monotonic()
                for batch in self._queue:
                    if batch.sealed or self._closed or now - batch.opened >= self._timeout:
                        self._queue.remove(batch)
                        return batch
                if self._closed:
                    return None
                wait = (
                    min(b.opened + self._timeout for b in self._queue) - now
                    if self._queue
                    else None
                )
                self._cv.wait(wait)

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._process(batch)

    def _process(self, batch: _Batch) -> None:
        padded = next((s for s in self._allowed if s >= batch.size), batch.size)
        inputs = {}
        for name in batch.tasks[0].inputs:
            parts = [task.inputs[name] for task in batch.tasks]
            if padded > batch.size:
                parts.append(np.repeat(parts[0][:1], padded - batch.size, axis=0))
            inputs[name] = np.concatenate(parts)
        try:
            outputs = self._run(inputs)
            for name, value in outputs.items():
                if value.ndim == 0 or value.shape[0] != padded:
                    raise ServingError(
                        grpc.StatusCode.INTERNAL,
                        f"Batched output {name!r} has shape {list(value.shape)}; its 0th "
                        f"dimension must equal the batch size {padded}",
                    )
        except ServingError as e:
            for task in batch.tasks:
                task.error = e
                task.done.set()
            return
        if self._on_batch is not None:
            self._on_batch(padded)
        start = 0
        for task in batch.tasks:
            task.outputs = {k: v[start : start + task.size] for k, v in outputs.items()}
            start += task.size
            task.done.set()
