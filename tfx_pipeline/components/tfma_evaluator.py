"""Evaluator: TFX's TFMA Evaluator, gated against the eval data's own constant predictor, reading
`ServingBaseline`'s "nothing serving yet" mark.

**Data baselines.** A threshold written when the pipeline is built cannot know what "predict the
same answer for every example" scores on this run's eval split: that is known once ExampleGen
has written it. So before TFMA runs, this executor reads the labels of the evaluated splits and
raises the lower bound of every value-thresholded metric of the EvalConfig (the task's main
metric: `tfma_config.classification_eval_config`) to max(its bound, baseline +
`min_baseline_gain`), the baseline being the best constant predictor's score on those labels:

- accuracy (`SparseCategoricalAccuracy`): always the majority class, its share of the examples;
- F1 of class c (`F1Score` in a MetricsSpec binarized on c): always c, 2p/(1+p) with p the share
  of class c (always another class scores 0; e.g. MRPC's dev set: 0.81);
- MCC (`MatthewsCorrelationCoefficient`): 0, any constant's;
- Pearson / Spearman correlation: 0 (a constant's is undefined: it carries no information).

A regression model (the `regress` signature, STS-B) must also beat the mean predictor: a
`MeanSquaredError` metric is added with upper bound (1 - gain) × the labels' variance (the mean
predictor's mean squared error), i.e. R² ≥ gain. The baselines, the predictors they stand for
(the classes by the names the candidate's `classify` signature answers with), and the thresholds
TFMA applied go to `data_baselines.json` in the evaluation's folder, the baselines also to its
float custom properties `data_baseline_<metric>`.

**Serving baseline.** The change thresholds (the main metric at most `max_decrease` below the
model serving now) stay TFMA's. Given ServingBaseline's copy of the candidate (`is_candidate` =
1: no model serves yet), it evaluates without a baseline, as TFX's Evaluator does when no
baseline model is given: TFMA "rubber-stamps" the change thresholds and checks only the value
thresholds. The plain Evaluator would score the candidate twice and compare it with itself (the
same verdict, twice the work).

Everything else is TFX's Evaluator, its node id too ("Evaluator").
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_specs
from tfx import types
from tfx.components.evaluator import component as evaluator_component
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import io_utils, json_utils, proto_utils

from bert_tf.tfrecords import check_tfrecord_files
from serving.signatures import CLASS_NAMES_ASSET
from tfx_pipeline.components import blessing, model_artifact

DATA_BASELINES_FILE = "data_baselines.json"  # tfx_pipeline.metadata reads it too
# The evaluation's float custom property of each metric's data baseline.
DATA_BASELINE_PROPERTY = blessing.DATA_BASELINE_PROPERTY
REGRESS_SIGNATURE = "regress"
_MEAN_SQUARED_ERROR = "MeanSquaredError"


def read_labels(split_uris: list[str], regression: bool) -> np.ndarray:
    """The `label` of every example in the splits' gzipped TFRecord files (int64 class ids, or
    float scores for regression)."""
    files = sorted(f for uri in split_uris for f in tf.io.gfile.glob(os.path.join(uri, "*")))
    if not files:
        raise FileNotFoundError(f"Evaluator: no examples in {', '.join(split_uris)}")
    # A truncated file would otherwise give the baseline of part of the split.
    check_tfrecord_files(files, "GZIP")
    kind = "float" if regression else "int64"
    spec = {"label": tf.io.FixedLenFeature([], tf.float32 if regression else tf.int64)}
    try:
        labels = [
            tf.io.parse_example(records, spec)["label"].numpy()
            for records in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1024)
        ]
    except tf.errors.InvalidArgumentError:
        raise ValueError(
            f"Evaluator: every example in {', '.join(split_uris)} needs one {kind} 'label'"
        ) from None
    if not labels:
        raise ValueError(f"Evaluator: the eval split {', '.join(split_uris)} holds no example")
    return np.concatenate(labels)


def class_names(model: types.Artifact | str) -> list[str]:
    """The class names the exported model's `classify` signature answers with (its `classes`):
    from the export's `CLASS_NAMES_ASSET`, else (an export without one) from the signature."""
    import tensorflow_text  # noqa: F401  (registers the exported tokenizer's ops)

    path = model_artifact.serving_dir(model)
    asset = os.path.join(path, CLASS_NAMES_ASSET)
    if tf.io.gfile.exists(asset):  # loading the model only for them takes seconds
        with tf.io.gfile.GFile(asset) as f:
            try:
                names = json.load(f)
            except json.JSONDecodeError:
                names = None
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ValueError(f"Evaluator: {asset}: expected a JSON list of class names")
        return names
    signatures = tf.saved_model.load(path).signatures
    if "classify" not in signatures:
        raise ValueError(f"Evaluator: {path} has no classify signature")
    example = tf.train.Example(
        features=tf.train.Features(
            feature={"text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b""]))}
        )
    )
    classes = signatures["classify"](inputs=tf.constant([example.SerializeToString()]))
    return [name.decode("utf-8") for name in classes["classes"].numpy()[0]]


def label_name(class_id: int, names: list[str]) -> str:
    """A class as the summary shows it: its name, quoted ("class N" if the model has none)."""
    return f'"{names[class_id]}"' if class_id < len(names) else f"class {class_id}"


def constant_predictor(
    class_name: str, labels: np.ndarray, class_id: int | None, names: list[str]
) -> tuple[float, str]:
    """(score, which constant) of the best constant predictor of metric `class_name` on
    `labels` (see the module docstring); `class_id`: a binarized metric's class."""
    if class_name == "SparseCategoricalAccuracy":
        counts = np.bincount(labels)
        majority = int(counts.argmax())
        share = float(counts[majority] / len(labels))
        return share, f"always {label_name(majority, names)} (the majority class)"
    if class_name == "F1Score":
        share = float(np.mean(labels == class_id))
        return 2 * share / (1 + share), f"always {label_name(class_id, names)}"
    if class_name == "MatthewsCorrelationCoefficient":
        return 0.0, "any constant"
    if class_name in ("PearsonCorrelation", "SpearmanCorrelation"):
        return 0.0, "any constant (no correlation)"
    raise ValueError(f"Evaluator: no constant-predictor baseline for the metric {class_name}")


def data_gate(
    eval_config: tfma.EvalConfig, labels: np.ndarray, names: list[str], min_baseline_gain: float
) -> list[dict[str, Any]]:
    """Raises `eval_config`'s value thresholds to the data's baselines plus `min_baseline_gain`
    and, for a regression model, adds the mean predictor's MeanSquaredError bound (in place;
    see the module docstring). Returns one entry per gated metric: its name (TFMA's key), class
    id and name if binarized, baseline, predictor, and the bound set."""
    gates = []
    for spec in eval_config.metrics_specs:
        class_ids = list(spec.binarize.class_ids.values)
        for config in spec.metrics:
            if not config.threshold.HasField("value_threshold"):
                continue
            if len(class_ids) > 1:
                raise ValueError(
                    f"Evaluator: {config.class_name} has a threshold for {len(class_ids)} "
                    "classes: one data baseline per metric"
                )
            class_id = class_ids[0] if class_ids else None
            baseline, predictor = constant_predictor(config.class_name, labels, class_id, names)
            bound = config.threshold.value_threshold
            lowest = baseline + min_baseline_gain
            if bound.HasField("lower_bound"):
                lowest = max(bound.lower_bound.value, lowest)
            bound.lower_bound.value = lowest
            gate = {"metric": metric_specs.metric_instance(config).name}
            if class_id is not None:
                gate.update(class_id=class_id, class_name=label_name(class_id, names))
            gates.append(
                {**gate, "baseline": baseline, "predictor": predictor, "lower_bound": lowest}
            )
    if any(s.signature_name == REGRESS_SIGNATURE for s in eval_config.model_specs):
        mean, variance = float(np.mean(labels)), float(np.var(labels))
        config = tfma.MetricConfig(class_name=_MEAN_SQUARED_ERROR)
        config.threshold.value_threshold.upper_bound.value = (1 - min_baseline_gain) * variance
        eval_config.metrics_specs[0].metrics.append(config)
        gates.append(
            {
                "metric": metric_specs.metric_instance(config).name,
                "baseline": variance,
                "predictor": f"always {mean:.4g} (the mean label)",
                "upper_bound": (1 - min_baseline_gain) * variance,
            }
        )
    if not gates:
        raise ValueError("Evaluator: the eval_config has no value threshold to gate")
    return gates


class Executor(evaluator_executor.Executor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        if input_dict.get("baseline_model") and blessing.baseline_model(input_dict) is None:
            input_dict = {k: v for k, v in input_dict.items() if k != "baseline_model"}
        eval_config = tfma.EvalConfig()
        proto_utils.json_to_proto(exec_properties["eval_config"], eval_config)
        splits = json_utils.loads(exec_properties.get("example_splits") or "null") or ["eval"]
        regression = any(s.signature_name == REGRESS_SIGNATURE for s in eval_config.model_specs)
        labels = read_labels(
            [u for s in splits for u in artifact_utils.get_split_uris(input_dict["examples"], s)],
            regression,
        )
        model = artifact_utils.get_single_instance(input_dict["model"])
        names = [] if regression else class_names(model)
        gain = exec_properties["min_baseline_gain"]
        gates = data_gate(eval_config, labels, names, gain)
        gated = {**exec_properties, "eval_config": proto_utils.proto_to_json(eval_config)}
        super().Do(input_dict, output_dict, gated)

        evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
        report = {
            "gates": gates,
            "min_baseline_gain": gain,
            "num_examples": len(labels),
            "label_names": names,
        }
        io_utils.write_string_file(
            os.path.join(evaluation.uri, DATA_BASELINES_FILE), json.dumps(report, indent=1)
        )
        for gate in gates:
            name = gate["metric"] + (f"_{gate['class_id']}" if "class_id" in gate else "")
            evaluation.set_float_custom_property(DATA_BASELINE_PROPERTY + name, gate["baseline"])


class EvaluatorSpec(standard_component_specs.EvaluatorSpec):
    PARAMETERS: ClassVar[dict] = {
        **standard_component_specs.EvaluatorSpec.PARAMETERS,
        "min_baseline_gain": ExecutionParameter(type=float),
    }


class Evaluator(evaluator_component.Evaluator):
    """`tfx.components.Evaluator` with the executor above and its data-baseline margin.

    Args:
        examples: ExampleGen's examples (the raw eval split TFMA feeds the model).
        model: the Trainer's model.
        eval_config: the TFMA EvalConfig (thresholds on the main metric).
        min_baseline_gain: margin over the eval split's constant-predictor baseline.
        baseline_model: optional, the model serving now (`ServingBaseline`'s output).
        example_splits: splits to evaluate (default: eval).
    """

    SPEC_CLASS = EvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        model: types.BaseChannel,
        eval_config: tfma.EvalConfig,
        min_baseline_gain: float = 0.01,
        baseline_model: types.BaseChannel | None = None,
        example_splits: list[str] | None = None,
    ):
        spec = EvaluatorSpec(
            examples=examples,
            model=model,
            baseline_model=baseline_model,
            eval_config=eval_config,
            example_splits=json_utils.dumps(example_splits),
            fairness_indicator_thresholds=json_utils.dumps(None),
            min_baseline_gain=min_baseline_gain,
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing),
        )
        # Not tfx.components.Evaluator.__init__: it builds the narrower standard spec.
        base_beam_component.BaseBeamComponent.__init__(self, spec=spec)
