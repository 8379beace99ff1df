"""ServingBaseline: the model serving now, as a `Model` artifact, for the evaluators' baseline.

The Pusher writes TF Serving's layout, `<serving_model_dir>/<model_name>/<version>/`, and TF
Serving serves the highest version. This component copies that version (the newest numeric
folder holding a complete SavedModel: Pusher copies `saved_model.pb` last, and temporary or
non-numeric folders are ignored) into its output's `Format-Serving/`, the Trainer's Model layout
that TFX's Evaluator and ours read (`model_artifact.serving_dir`). The evaluators then judge
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
when none), `baseline_source` (the copied folder), and when a version serves:
`candidate_digest` / `baseline_digest` (`model_digest` of each) and `same_as_serving` (1 when
they are equal).

Same model: a rerun that trains again on unchanged data (new ML Metadata, a new pipeline root,
caching off) produces the model that already serves. This module's `Pusher` (TFX's, plus the
`baseline_model` input) then pushes nothing, with `not_pushed_reason` "same model as version N"
on its output, instead of a new version identical to the serving one. The digest is over what
the model computes, not the files' bytes, which differ between two exports of one model:
`saved_model.pb` names functions, name scopes and captures by counters that depend on what the
process traced before, and the variables file lists `_all_variables` in set order.
`model_digest` hashes the variable values (sorted), the function and graph definitions with
those counters deleted (sorted lines), the signatures, and `assets/` (the vocab); not
`assets.extra/` (warmup requests), `fingerprint.pb` or the saver's object-graph constant.

Example (in a pipeline):

    baseline = ServingBaseline(
        model=trainer.outputs["model"], serving_model_dir="gs://bucket/serving/bert")
    evaluator = SquadEvaluator(..., baseline_model=baseline.outputs["baseline_model"])
    pusher = Pusher(model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
                    baseline_model=baseline.outputs["baseline_model"], push_destination=...)
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, ClassVar

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.components.util import model_utils
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import io_utils, path_utils

from tfx_pipeline.components import model_artifact, serving_check

IS_CANDIDATE = "is_candidate"
BASELINE_VERSION = "baseline_version"
BASELINE_SOURCE = "baseline_source"
CANDIDATE_DIGEST = "candidate_digest"
BASELINE_DIGEST = "baseline_digest"
SAME_AS_SERVING = "same_as_serving"
NOT_PUSHED_REASON = "not_pushed_reason"  # Pusher's output (tfx_pipeline.summary reads it)
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
# Counters in saved_model.pb's names, deleted before hashing: "__inference_serve_1234", name
# scopes uniquified as "bert_packer_1" (or not, in another export), captures named s: "7803".
_COUNTERS = re.compile(r'_\d+|(?<=s: )"\d+"')


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


def _hash_sorted(digest, texts) -> None:
    """Adds the texts' lines, counters deleted, as a sorted multiset: the order of functions, of
    nodes in a function and of some lists differs between two exports of one model."""
    lines = sorted(_COUNTERS.sub("", line) for text in texts for line in text.splitlines())
    digest.update("\n".join(lines).encode())


def model_digest(saved_model_dir: str) -> str | None:
    """sha256 of what the SavedModel computes (see the module docstring): equal for two exports
    of the same model, in any process. None when `saved_model_dir` is not a SavedModel with a
    variables checkpoint (nothing then counts as the same)."""
    from tensorflow.core.protobuf import saved_model_pb2

    try:
        with tf.io.gfile.GFile(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
            saved_model = saved_model_pb2.SavedModel.FromString(f.read())
        reader = tf.train.load_checkpoint(os.path.join(saved_model_dir, "variables", "variables"))
    except Exception as e:  # a folder that is no SavedModel: not comparable
        logging.info("ServingBaseline: no digest of %s: %s", saved_model_dir, e)
        return None
    digest = hashlib.sha256()
    values = []
    for key, dtype in sorted(reader.get_variable_to_dtype_map().items()):
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":  # object ids and ordering, not values
            continue
        value = reader.get_tensor(key)
        data = b"\0".join(value.ravel().tolist()) if value.dtype == object else value.tobytes()
        values.append(f"{dtype.name} {list(value.shape)} {hashlib.sha256(data).hexdigest()}")
    digest.update("\n".join(sorted(values)).encode())
    for meta_graph in saved_model.meta_graphs:
        # Not the saver's serialized object graph (a string constant its save op reads): its
        # ordering varies. Other constants (captured label names, ...) are the model's.
        saver_ops = {
            meta_graph.saver_def.save_tensor_name.split(":")[0],
            meta_graph.saver_def.restore_op_name.split(":")[0],
        }
        saver_inputs = {
            name.split(":")[0].lstrip("^")
            for node in meta_graph.graph_def.node
            if node.name in saver_ops
            for name in node.input
        }
        # str(): the text format, by the C++ protobuf (text_format in Python is ~20x slower).
        texts = [str(function) for function in meta_graph.graph_def.library.function]
        texts += [
            str(node)
            for node in meta_graph.graph_def.node
            if not (
                node.name in saver_inputs
                and node.op == "Const"
                and node.attr["dtype"].type == tf.string.as_datatype_enum
            )
        ]
        texts += [f"{name}\n{signature}" for name, signature in meta_graph.signature_def.items()]
        _hash_sorted(digest, texts)
    assets = os.path.join(saved_model_dir, "assets")
    if tf.io.gfile.isdir(assets):
        for folder, _, files in sorted(tf.io.gfile.walk(assets)):
            for name in sorted(files):
                path = os.path.join(folder, name)
                with tf.io.gfile.GFile(path, "rb") as f:
                    content = hashlib.sha256(f.read()).hexdigest()
                digest.update(f"{os.path.relpath(path, assets)} {content}\n".encode())
    return digest.hexdigest()


def is_candidate(model: types.Artifact) -> bool:
    """Whether a ServingBaseline output is the candidate's copy (nothing was serving)."""
    return (
        model.has_custom_property(IS_CANDIDATE) and model.get_int_custom_property(IS_CANDIDATE) == 1
    )


def same_as_serving(model: types.Artifact) -> bool:
    """Whether a ServingBaseline output found the candidate identical to the serving version."""
    return (
        model.has_custom_property(SAME_AS_SERVING)
        and model.get_int_custom_property(SAME_AS_SERVING) == 1
    )


class Executor(base_executor.BaseExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        baseline = artifact_utils.get_single_instance(output_dict["baseline_model"])
        candidate = artifact_utils.get_single_instance(input_dict["model"])
        candidate_path = model_artifact.serving_dir(candidate)
        found = latest_version(exec_properties["serving_model_dir"])
        if found:
            version, source = found
        else:
            version, source = -1, candidate_path
        destination = path_utils.serving_model_dir(baseline.uri)
        io_utils.copy_dir(source, destination)
        baseline.set_int_custom_property(IS_CANDIDATE, 0 if found else 1)
        baseline.set_int_custom_property(BASELINE_VERSION, version)
        baseline.set_string_custom_property(BASELINE_SOURCE, source)
        if found:
            logging.info("ServingBaseline: version %d serves now (%s)", version, source)
            digests = {CANDIDATE_DIGEST: model_digest(candidate_path)}
            digests[BASELINE_DIGEST] = model_digest(destination)
            for name, digest in digests.items():
                if digest:
                    baseline.set_string_custom_property(name, digest)
            same = digests[CANDIDATE_DIGEST] is not None and len(set(digests.values())) == 1
            baseline.set_int_custom_property(SAME_AS_SERVING, int(same))
            if same:
                logging.info(
                    "ServingBaseline: the candidate is the same model as version %d (digest %s)",
                    version,
                    digests[CANDIDATE_DIGEST],
                )
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


# --- Pusher: TFX's, skipping a model identical to the serving one --------------------------------


class PusherSpec(ComponentSpec):
    """TFX's PusherSpec plus the optional `baseline_model` (ServingBaseline's output)."""

    PARAMETERS: ClassVar[dict] = standard_component_specs.PusherSpec.PARAMETERS
    INPUTS: ClassVar[dict] = {
        **standard_component_specs.PusherSpec.INPUTS,
        "baseline_model": ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS: ClassVar[dict] = standard_component_specs.PusherSpec.OUTPUTS
    TYPE_ANNOTATION = standard_component_specs.PusherSpec.TYPE_ANNOTATION


def push_decision(input_dict: dict[str, list[types.Artifact]]) -> str | None:
    """Why the Pusher must not push (None: push if blessed): ServingBaseline found the candidate
    identical to the serving version."""
    baseline = (input_dict.get("baseline_model") or [None])[0]
    if baseline is None or is_candidate(baseline) or not same_as_serving(baseline):
        return None
    return f"same model as version {baseline.get_int_custom_property(BASELINE_VERSION)}"


def _not_blessed_reason(input_dict: dict[str, list[types.Artifact]]) -> str:
    """Why TFX's `CheckBlessing` refused: the evaluator's blessing (checked first, as there), or
    the infra blessing (with ServingCheck's reason)."""
    model_blessing = (input_dict.get("model_blessing") or [None])[0]
    infra = (input_dict.get("infra_blessing") or [None])[0]
    if infra is None or (model_blessing and not model_utils.is_model_blessed(model_blessing)):
        return "the model was not blessed"
    reason = "the serving check failed"
    if infra.has_custom_property(serving_check.NOT_BLESSED_REASON):
        reason += ": " + infra.get_string_custom_property(serving_check.NOT_BLESSED_REASON)
    return reason


class PusherExecutor(pusher_executor.Executor):
    """TFX's Pusher executor (the model blessing and, when given, the infra blessing gate it);
    records why nothing was pushed (`NOT_PUSHED_REASON`) and pushes nothing when the candidate is
    the serving model (`push_decision`)."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        model_push = artifact_utils.get_single_instance(output_dict["pushed_model"])
        inputs = {k: v for k, v in input_dict.items() if k != "baseline_model"}
        if not self.CheckBlessing(inputs):
            self._MarkNotPushed(model_push)
            model_push.set_string_custom_property(NOT_PUSHED_REASON, _not_blessed_reason(inputs))
            return
        reason = push_decision(input_dict)
        if reason:
            logging.info("Pusher: not pushed: %s", reason)
            self._MarkNotPushed(model_push)
            model_push.set_string_custom_property(NOT_PUSHED_REASON, reason)
            return
        super().Do(inputs, output_dict, exec_properties)


class Pusher(base_component.BaseComponent):
    """`tfx.components.Pusher` (model, model_blessing, infra_blessing, push_destination) that
    also takes ServingBaseline's `baseline_model` and pushes nothing when the candidate is the
    model serving now (see the module docstring). Its id stays "Pusher"."""

    SPEC_CLASS = PusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(PusherExecutor)

    def __init__(
        self,
        model: types.BaseChannel,
        model_blessing: types.BaseChannel,
        push_destination,
        baseline_model: types.BaseChannel | None = None,
        infra_blessing: types.BaseChannel | None = None,
    ):
        spec = PusherSpec(
            model=model,
            model_blessing=model_blessing,
            infra_blessing=infra_blessing,
            baseline_model=baseline_model,
            push_destination=push_destination,
            pushed_model=types.Channel(type=standard_artifacts.PushedModel),
        )
        super().__init__(spec=spec)
