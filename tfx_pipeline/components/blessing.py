"""A custom evaluator's model inputs (candidate, optional baseline) and the outputs it writes in
TFX Evaluator's layout: the `ModelEvaluation` (a JSON report and the metrics as ML Metadata
properties) and the `ModelBlessing`.

`Pusher` reads the `blessed` property (and the BLESSED / NOT_BLESSED file), and
`LatestBlessedModelStrategy` finds the blessed model through `current_model_id`, so a blessing
written this way gates pushing and feeds the next run's baseline like TFX's own Evaluator's.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfx import types
from tfx.components.evaluator import constants
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.utils import io_utils


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
# baseline, the latest blessed model a Resolver finds (`baseline_model` reads it).
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


def output_channels() -> dict[str, types.Channel]:
    """The `evaluation` and `blessing` channels to pass to a custom evaluator's spec."""
    return {name: types.Channel(type=param.type) for name, param in OUTPUTS.items()}


def baseline_model(input_dict: dict[str, list[types.Artifact]]) -> types.Artifact | None:
    """The optional `baseline_model` input (a Resolver's latest blessed model), if resolved."""
    return (input_dict.get("baseline_model") or [None])[0]


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
) -> None:
    """Writes `report` as the evaluation's METRICS_FILE, `metrics` as its float custom
    properties (ML Metadata), and the blessing (`report["blessed"]`) of `model`."""
    evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
    io_utils.write_string_file(
        os.path.join(evaluation.uri, METRICS_FILE), json.dumps(report, indent=1)
    )
    for name, value in metrics.items():
        evaluation.set_float_custom_property(name, value)
    write_blessing(
        artifact_utils.get_single_instance(output_dict["blessing"]),
        model,
        baseline,
        report["blessed"],
    )
