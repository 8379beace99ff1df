"""A custom evaluator's model inputs (candidate, optional baseline), its executor's base class,
and the outputs it writes in TFX Evaluator's layout: the `ModelEvaluation` (a JSON report and the
metrics as ML Metadata properties) and the `ModelBlessing`.

The baseline is `ServingBaseline`'s model serving now; its copy of the candidate (nothing serving
yet) counts as no baseline. `Pusher` reads the blessing's `blessed` property (and the BLESSED /
NOT_BLESSED file); `current_model_id` / `baseline_model_id` are written as TFX's Evaluator
writes them (int ML Metadata ids, converted to resource names on Kubeflow V2: see
`EvaluatorExecutor`), so `LatestBlessedModelStrategy` and other MLMD lookups find the blessed
model on every runner.
"""

from __future__ import annotations

import json
import os
from typing import Any

from absl import logging
from tfx import types
from tfx.components.evaluator import constants
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.utils import io_utils

from tfx_pipeline.components import serving_baseline

NO_BASELINE = "no model serving yet: baseline comparison skipped"


class EvaluatorExecutor(evaluator_executor.Executor):
    """Base of the custom evaluators' executors (their `Do` is their own; nothing of TFX's
    Evaluator runs).

    Subclassing TFX's Evaluator executor is what makes TFX's Kubeflow V2 container entrypoint
    (`kubeflow_v2_run_executor`) rewrite the blessing's `current_model_id` / `baseline_model_id`
    from the hashed int ids it hands executors to the models' ML Metadata resource names: it
    does so only for `issubclass(executor, evaluator.executor.Executor)`. On `BaseExecutor` the
    id reaches Vertex as a float (8.0e+16) and its model resolver never finds the model.
    """

    def __init__(self, context: base_executor.BaseExecutor.Context | None = None):
        # BaseExecutor's init, not BaseBeamExecutor's: no Beam here, so no Beam-context check
        # (ExecutorClassSpec hands a plain context) and no TFX sdist built for Beam workers.
        base_executor.BaseExecutor.__init__(self, context)
        self._beam_pipeline_args = []
        self._make_beam_pipeline_fn = None


def write_blessing(
    blessing: types.Artifact,
    model: types.Artifact,
    baseline_model: types.Artifact | None,
    blessed: bool,
) -> None:
    """Marks `blessing` as (not) blessing `model`, compared with `baseline_model` if any."""
    blessing.set_string_custom_property(
        constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, model.uri
    )
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, model.id)
    if baseline_model:
        blessing.set_string_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baseline_model.uri
        )
        blessing.set_int_custom_property(
            constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline_model.id
        )
    file_name = constants.BLESSED_FILE_NAME if blessed else constants.NOT_BLESSED_FILE_NAME
    io_utils.write_string_file(os.path.join(blessing.uri, file_name), "")
    blessing.set_int_custom_property(
        constants.ARTIFACT_PROPERTY_BLESSED_KEY,
        constants.BLESSED_VALUE if blessed else constants.NOT_BLESSED_VALUE,
    )


# A custom evaluator's model inputs (in its spec's INPUTS): the candidate and the optional
# baseline, ServingBaseline's model serving now (`baseline_model` reads it).
MODEL_INPUTS = {
    "model": ChannelParameter(type=standard_artifacts.Model),
    "baseline_model": ChannelParameter(type=standard_artifacts.Model, optional=True),
}
# A custom evaluator's outputs (the spec's OUTPUTS): TFX Evaluator's two artifacts.
OUTPUTS = {
    "evaluation": ChannelParameter(type=standard_artifacts.ModelEvaluation),
    "blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
}
METRICS_FILE = "metrics.json"
# Prefix of the evaluation's float custom property holding a metric's data baseline (what the
# eval split's best constant predictor scores), beside the metric's own property.
DATA_BASELINE_PROPERTY = "data_baseline_"


def output_channels() -> dict[str, types.Channel]:
    """The `evaluation` and `blessing` channels to pass to a custom evaluator's spec."""
    return {name: types.Channel(type=param.type) for name, param in OUTPUTS.items()}


def baseline_model(input_dict: dict[str, list[types.Artifact]]) -> types.Artifact | None:
    """The `baseline_model` input to compare with: None if absent or if it is ServingBaseline's
    copy of the candidate (nothing serving yet: comparing a model with itself tells nothing)."""
    baseline = (input_dict.get("baseline_model") or [None])[0]
    if baseline is not None and serving_baseline.is_candidate(baseline):
        logging.info(NO_BASELINE)
        return None
    return baseline


def describe_baseline(input_dict: dict[str, list[types.Artifact]]) -> dict[str, Any] | str | None:
    """For the report: the served version compared with and its folder, NO_BASELINE when
    nothing served yet, None without a baseline input."""
    baseline = (input_dict.get("baseline_model") or [None])[0]
    if baseline is None:
        return None
    if serving_baseline.is_candidate(baseline):
        return NO_BASELINE
    properties = (serving_baseline.BASELINE_VERSION, serving_baseline.BASELINE_SOURCE)
    if not all(baseline.has_custom_property(p) for p in properties):
        return {"uri": baseline.uri}  # a baseline from elsewhere (e.g. a resolver)
    return {
        "version": baseline.get_int_custom_property(serving_baseline.BASELINE_VERSION),
        "source": baseline.get_string_custom_property(serving_baseline.BASELINE_SOURCE),
    }


def validate(
    candidate: dict[str, float],
    baseline: dict[str, float] | None,
    minimums: dict[str, float],
    max_decrease: float,
    digits: int = 4,
) -> list[str]:
    """The failed checks of the metrics named in `minimums`, as readable lines (empty: blessed):
    each must reach its minimum and, given a baseline's metrics, be at most `max_decrease`
    below the baseline's."""
    failures = [
        f"{name} {candidate[name]:.{digits}f} < threshold {minimum:.{digits}f}"
        for name, minimum in minimums.items()
        if candidate[name] < minimum
    ]
    if baseline is not None:
        failures += [
            f"{name} {candidate[name]:.{digits}f} is more than {max_decrease} below the "
            f"baseline's {baseline[name]:.{digits}f}"
            for name in minimums
            if candidate[name] < baseline[name] - max_decrease
        ]
    return failures


def verdict(failures: list[str]) -> str:
    return "blessed" if not failures else "not blessed: " + "; ".join(failures)


def write_outputs(
    output_dict: dict[str, list[types.Artifact]],
    report: dict[str, Any],
    metrics: dict[str, float],
    model: types.Artifact,
    baseline: types.Artifact | None,
    data_baselines: dict[str, float] | None = None,
) -> None:
    """Writes `report` as the evaluation's METRICS_FILE, `metrics` and `data_baselines` (as
    DATA_BASELINE_PROPERTY + name) as its float custom properties (ML Metadata), and the
    blessing (`report["blessed"]`) of `model`."""
    evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
    io_utils.write_string_file(
        os.path.join(evaluation.uri, METRICS_FILE), json.dumps(report, indent=1)
    )
    for name, value in metrics.items():
        evaluation.set_float_custom_property(name, value)
    for name, value in (data_baselines or {}).items():
        evaluation.set_float_custom_property(DATA_BASELINE_PROPERTY + name, value)
    write_blessing(
        artifact_utils.get_single_instance(output_dict["blessing"]),
        model,
        baseline,
        report["blessed"],
    )
