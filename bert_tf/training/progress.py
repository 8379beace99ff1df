"""The `Trainer`'s progress reports: every `log_steps`, the mean loss and metrics of the steps
since the last report, the learning rate, examples/s and the ETA, logged (absl) and written to
TensorBoard (`output_dir`); each report is also an entry of `training_log.json`'s history
(`training_log`)."""

from __future__ import annotations

import time

import tensorflow as tf
from absl import logging


class Progress:
    """Sums the values of the steps trained since the last report; `report` turns them into one.

    Args:
        step: the step training starts (or resumes) at: the ETA counts from here.
        num_train_steps: the step training ends at.
        batch_size: the global batch size, for examples/s.
        writer: the TensorBoard summary writer (a no-op writer on a non-chief worker).
    """

    def __init__(
        self, step: int, num_train_steps: int, batch_size: int, writer: tf.summary.SummaryWriter
    ):
        self.num_train_steps = num_train_steps
        self.batch_size = batch_size
        self.writer = writer
        self._sums: dict[str, float] = {}
        self._since_log, self._start_step, self._start_time = 0, step, time.perf_counter()
        self._interval_time = self._start_time
        self.last: dict[str, float] = {}  # the mean values of the last report

    def add(self, values: dict[str, float], num_steps: int) -> None:
        """Counts `num_steps` steps whose mean values were `values`."""
        self._since_log += num_steps
        for k, v in values.items():
            self._sums[k] = self._sums.get(k, 0.0) + v * num_steps

    def report(self, step: int, learning_rate: float) -> dict[str, float]:
        """Logs and summarises the steps since the last report; returns the history entry."""
        now = time.perf_counter()
        steps_per_sec = (step - self._start_step) / (now - self._start_time)
        self.last = {k: v / self._since_log for k, v in self._sums.items()}
        entry = {
            "step": step,
            "learning_rate": learning_rate,
            **self.last,
            "examples_per_sec": self._since_log * self.batch_size / (now - self._interval_time),
        }
        with self.writer.as_default(step=step):
            for k, v in entry.items():
                if k != "step":
                    tf.summary.scalar(k, v)
        logging.info(
            "step %d/%d: %s, learning rate %.3g, %.1f examples/s, ETA %.0f s",
            step,
            self.num_train_steps,
            ", ".join(f"{k} {v:.6g}" for k, v in self.last.items()),
            entry["learning_rate"],
            entry["examples_per_sec"],
            (self.num_train_steps - step) / steps_per_sec,
        )
        self._sums, self._since_log, self._interval_time = {}, 0, now
        return entry
