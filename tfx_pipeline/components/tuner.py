"""Tuner: TFX's, running a module's `tuner_fn` (`tfx_pipeline.tuning`'s grid), plus a plot.

TFX's executor runs the search and writes `best_hyperparameters.txt` (the Trainer's
`hyperparameters` input) and `tuner_results.json` (every completed trial's values and score).
Ours adds `tuner_results.png` beside the latter: each trial's dev score, best marked, so a run's
search can be looked at as well as read.

Example (in a pipeline):

    tuner = Tuner(
        tuner_fn="tfx_pipeline.modules.classification.tuner_fn",
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        base_model=pretrained.outputs["result"],
        custom_config=config,
    )
    trainer = Trainer(..., hyperparameters=tuner.outputs["best_hyperparameters"])
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import tensorflow as tf
import tensorflow_text  # noqa: F401  (the trials export models with the tokenizer's ops)
from tfx import types
from tfx.components.tuner import component as tuner_component
from tfx.components.tuner import executor as tuner_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs

from bert_tf import fileio

RESULTS_FILE = "tuner_results.json"  # TFX's executor's name for it
PLOT_FILE = "tuner_results.png"


def plot_results(results: list[dict], objective: str) -> bytes:
    """PNG bytes: one bar per trial (labelled with its values), the best one highlighted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(results, key=lambda r: r["trial_id"])
    labels = [
        "\n".join(f"{k}={v:g}" for k, v in r.items() if k not in ("trial_id", "score"))
        for r in rows
    ]
    scores = [r["score"] for r in rows]
    best = max(range(len(rows)), key=scores.__getitem__)
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(rows)), 4))
    colors = ["tab:orange" if i == best else "tab:blue" for i in range(len(rows))]
    ax.bar(range(len(rows)), scores, color=colors)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel(objective)
    ax.set_title(f"Tuner: {len(rows)} trials, best {objective} {scores[best]:.4f}")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=80)
    plt.close(fig)
    return png.getvalue()


class Executor(tuner_executor.Executor):
    """TFX's Tuner executor, then the plot of its results."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        # TFX's Do, keeping the tuner for its objective's name.
        if tuner_executor.get_tune_args(exec_properties):
            raise ValueError("Tuner: tune_args (parallel tuning) is not supported")
        tuner = tuner_executor.search(input_dict, exec_properties, self._get_tmp_dir())
        tuner_executor.write_best_hyperparameters(tuner, output_dict)
        uri = artifact_utils.get_single_uri(output_dict[standard_component_specs.TUNER_RESULTS_KEY])
        with tf.io.gfile.GFile(os.path.join(uri, RESULTS_FILE)) as f:
            results = json.load(f)
        objective = tuner.oracle.objective.name
        fileio.atomic_write_bytes(os.path.join(uri, PLOT_FILE), plot_results(results, objective))


class Tuner(tuner_component.Tuner):
    """TFX's Tuner whose executor also plots the trials (module docstring)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
