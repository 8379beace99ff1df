"""ServingBaseline: the model serving now, as a `Model` artifact, for the evaluators' baseline.

The Pusher writes TF Serving's layout, `<serving_model_dir>/<model_name>/<version>/`, and TF
Serving serves the highest version. This component copies that version (the newest numeric
folder holding a complete SavedModel: Pusher copies `saved_model.pb` last, and temporary or
non-numeric folders are ignored) into its output's `Format-Serving/`, the Trainer's Model layout
that TFX's Evaluator and ours read (`path_utils.serving_model_path`). The evaluators then judge
the candidate against what serves now: a model worse than the one serving is never pushed.

It replaces TFX's `LatestBlessedModelStrategy` resolver, which open-source Kubeflow Pipelines
cannot run ("resolver executors not implemented"): a plain container step, it runs the same on
the local runner, KFP and Vertex, local paths or `gs://` alike (`tf.io.gfile`).

Nothing serving yet (first push): the output is a copy of the candidate with the int custom
property `is_candidate` = 1. Our evaluators (`blessing.baseline_model`, and the TFMA
`tfma_evaluator.Evaluator`) then skip the comparison, so only the absolute thresholds apply;
any other consumer (TFX's own Evaluator) compares the candidate with itself, which passes every
change threshold: the same outcome.

Caching: the candidate is an input, so the step runs again whenever the Trainer's model is new.
A cached run (same candidate) reuses the baseline that candidate was judged against; its
evaluator and Pusher are cached too, so nothing is pushed again.

Output custom properties: `is_candidate` (1 or 0), `baseline_version` (the served version, -1
when none), `baseline_source` (the copied folder).

Example (in a pipeline):

    baseline = ServingBaseline(
        model=trainer.outputs["model"], serving_model_dir="gs://bucket/serving/bert")
    evaluator = SquadEvaluator(..., baseline_model=baseline.outputs["baseline_model"])
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils, path_utils

IS_CANDIDATE = "is_candidate"
BASELINE_VERSION = "baseline_version"
BASELINE_SOURCE = "baseline_source"
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


class ServingBaselineSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {"serving_model_dir": ExecutionParameter(type=str)}
    INPUTS: ClassVar[dict] = {"model": ChannelParameter(type=standard_artifacts.Model)}
    OUTPUTS: ClassVar[dict] = {"baseline_model": ChannelParameter(type=standard_artifacts.Model)}


def latest_version(base_dir: str) -> tuple[int, str] | None:
    """(version, folder) of the highest numeric version under `base_dir` that holds a complete
    SavedModel, as TF Serving would serve it; None if there is none (or no `base_dir`)."""
    if not tf.io.gfile.isdir(base_dir):
        return None
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(base_dir))  # gs:// adds "/"
    versions = {int(name): name for name in names if name.isdigit()}
    for version in sorted(versions, reverse=True):
        folder = os.path.join(base_dir, versions[version])
        if any(tf.io.gfile.exists(os.path.join(folder, f)) for f in _SAVED_MODEL_FILES):
            return version, folder
        logging.info("ServingBaseline: %s holds no saved_model.pb yet, skipped", folder)
    return None


def is_candidate(model: types.Artifact) -> bool:
    """Whether a ServingBaseline output is the candidate's copy (nothing was serving)."""
    return (
        model.has_custom_property(IS_CANDIDATE) and model.get_int_custom_property(IS_CANDIDATE) == 1
    )


class Executor(base_executor.BaseExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        baseline = artifact_utils.get_single_instance(output_dict["baseline_model"])
        found = latest_version(exec_properties["serving_model_dir"])
        if found:
            version, source = found
        else:
            candidate = artifact_utils.get_single_instance(input_dict["model"])
            version = -1
            source = path_utils.serving_model_path(
                candidate.uri, path_utils.is_old_model_artifact(candidate)
            )
        destination = path_utils.serving_model_dir(baseline.uri)
        io_utils.copy_dir(source, destination)
        baseline.set_int_custom_property(IS_CANDIDATE, 0 if found else 1)
        baseline.set_int_custom_property(BASELINE_VERSION, version)
        baseline.set_string_custom_property(BASELINE_SOURCE, source)
        if found:
            logging.info("ServingBaseline: version %d serves now (%s)", version, source)
        else:
            logging.info(
                "ServingBaseline: no model serving yet under %s: the candidate stands in "
                "(is_candidate=1, no baseline comparison)",
                exec_properties["serving_model_dir"],
            )


class ServingBaseline(base_component.BaseComponent):
    """The version serving now under `serving_model_dir`, or the candidate's copy if none (see
    the module docstring).

    Args:
        model: the Trainer's model (the candidate): copied when nothing serves yet.
        serving_model_dir: the Pusher's base directory, `<serving_model_dir>/<model_name>`.
    """

    SPEC_CLASS = ServingBaselineSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, model: types.BaseChannel, serving_model_dir: str):
        spec = ServingBaselineSpec(
            model=model,
            serving_model_dir=serving_model_dir,
            baseline_model=types.Channel(type=standard_artifacts.Model),
        )
        super().__init__(spec=spec)
