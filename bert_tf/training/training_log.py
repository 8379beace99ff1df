"""The bookkeeping of a training run in its `output_dir`: `training_log.json` and
`training_curve.png`.

- `training_log.json` holds the logged history (one entry every `log_steps`: step, learning rate,
  loss, metrics, examples/s), the run's `settings` (`Trainer`'s `run_settings`: the seed, the
  optimizer), its global batch size, `num_train_steps` and `gradient_accumulation_steps`;
- `training_curve.png` plots that history, one panel per value;
- both are rewritten on each checkpoint and at the end (atomically, through `bert_tf.fileio`,
  with the permissions a plain `open()` gives, like the checkpoints);
- a resume must be the same run: `check_same_run` refuses other `run_settings` or another global
  batch size (another seed would continue the checkpoint with another data order; a finished
  run would train nothing and report its old results under the new flags), and `read_history`
  drops the entries a killed run logged past its last checkpoint.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, BinaryIO

import numpy as np

from bert_tf import fileio

LOG_FILE = "training_log.json"
CURVE_FILE = "training_curve.png"


def check_same_run(output_dir: str, run_settings: dict[str, Any], batch_size: int) -> None:
    """Raises ValueError if the run being resumed had other `run_settings` or batch size."""
    path = os.path.join(output_dir, LOG_FILE)
    if not fileio.exists(path):
        return
    log = json.loads(fileio.read_text(path))
    saved = log.get("settings", {})  # absent in logs written before it was kept
    changed = [
        (f"--{k}={saved[k]}", f"--{k}={v}")
        for k, v in run_settings.items()
        if v is not None and saved.get(k) is not None and saved[k] != v
    ]
    if log.get("global_batch_size", batch_size) != batch_size:
        changed.append((f"global batch {log['global_batch_size']}", f"global batch {batch_size}"))
    if changed:
        raise ValueError(
            f"{output_dir} holds a training run with "
            f"{', '.join(old for old, _ in changed)}, not {', '.join(new for _, new in changed)}:"
            " resuming it would continue (or, finished, only re-report) that run; use the "
            "same flags or a new output folder"
        )


def read_history(output_dir: str, step: int) -> list[dict]:
    """The log so far, minus entries past `step` (a killed run logged them, then lost them)."""
    path = os.path.join(output_dir, LOG_FILE)
    if not step or not fileio.exists(path):
        return []
    return [e for e in json.loads(fileio.read_text(path))["history"] if e["step"] <= step]


def write_log(
    output_dir: str,
    history: list[dict],
    *,
    num_train_steps: int,
    batch_size: int,
    run_settings: dict[str, Any],
    gradient_accumulation_steps: int,
) -> None:
    """Writes `training_log.json` and, once there is a history, `training_curve.png`."""
    log = {
        "num_train_steps": num_train_steps,
        "global_batch_size": batch_size,
        "settings": run_settings,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "history": history,
    }
    # Atomic, with default permissions (0666 minus the umask) like the checkpoints.
    fileio.atomic_write_text(os.path.join(output_dir, LOG_FILE), json.dumps(log, indent=1) + "\n")
    if history:
        png = io.BytesIO()
        plot_history(history, png)
        fileio.atomic_write_bytes(os.path.join(output_dir, CURVE_FILE), png.getvalue())


def plot_history(history: list[dict], path: str | os.PathLike | BinaryIO) -> None:
    """One panel per logged value (loss first) against the step, saved as a PNG (a path or a
    binary file object)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    keys = [k for k in history[0] if k != "step"]
    keys.sort(key=lambda k: (k != "loss", k))
    steps = [e["step"] for e in history]
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.2 * len(keys)), sharex=True)
    for ax, key in zip(np.atleast_1d(axes), keys, strict=True):
        ax.plot(steps, [e.get(key, np.nan) for e in history], marker=".")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=80)
    plt.close(fig)
