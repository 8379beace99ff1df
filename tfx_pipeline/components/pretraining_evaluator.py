"""PretrainingEvaluator: held-out masked-LM / next-sentence accuracy, thresholds, blessing.

TFMA computes metrics from a model's predictions on examples, but BERT's pretraining metrics need
the masked positions and weights of each example fed into the model and a weighted accuracy over the
predicted positions only, which TFMA's metric specs cannot express. This component does that on
Transform's eval split with `bert_tf.modeling.heads`' accuracies, then blesses the model (a
`ModelBlessing` with TFMA Evaluator's custom properties, so `Pusher` and
`LatestBlessedModelStrategy` accept it) when both accuracies reach their thresholds and, if a
baseline (the model serving now, `ServingBaseline`'s) is given, neither drops by more than
`max_decrease` against the baseline scored on the same examples.

Each threshold is the larger of an absolute minimum and the eval split's own constant-predictor
baseline plus a margin (`data_baselines`: always the most frequent masked token; always the
majority next-sentence class): with `min_masked_lm_gain=0.01`, a model must beat "predict the
most frequent token" by a point, so a constant or untrained model is not blessed, whatever the
corpus. The report names each constant (the token from the candidate export's vocab) beside
its score.

Both models are scored through their serving SavedModel's `pretraining_logits` signature
(`serving.export_lib.export_encoder`): the pushed model itself, so a served version needs nothing
else to be the baseline. A Trainer model exported before that signature is scored through its
Keras file (`Format-TFMA/model.keras`); a served baseline with neither is not compared (logged,
and noted in the report).

Outputs: `evaluation` (`metrics.json`; the accuracies also as float custom properties in ML
Metadata) and `blessing` (`BLESSED` or `NOT_BLESSED` file, `blessed` = 1 or 0).

Example (in a pipeline):

    evaluator = PretrainingEvaluator(
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        model=trainer.outputs["model"],
        baseline_model=baseline.outputs["baseline_model"],
        min_masked_lm_gain=0.01, min_next_sentence_gain=0.01)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from bert_tf import checkpoints
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.tasks import pretraining
from serving.export_lib import PRETRAINING_SIGNATURE, VOCAB_ASSET
from tfx_pipeline import trainer_lib
from tfx_pipeline.components import blessing, model_artifact
from tfx_pipeline.modules.pretraining import KERAS_MODEL_FILE

METRICS = ("masked_lm_accuracy", "next_sentence_accuracy")
# The blessing's margin over the data's own baseline, per metric (execution parameters).
GAINS = {
    "masked_lm_accuracy": "min_masked_lm_gain",
    "next_sentence_accuracy": "min_next_sentence_gain",
}
# next_sentence_labels 0 and 1 (google-research's convention: 1 = B is a random sentence).
NEXT_SENTENCE_CLASSES = ("B follows A", "B is random")


class PretrainingEvaluatorSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {
        "eval_split": ExecutionParameter(type=str),
        "min_masked_lm_accuracy": ExecutionParameter(type=float),
        "min_next_sentence_accuracy": ExecutionParameter(type=float),
        "min_masked_lm_gain": ExecutionParameter(type=float),
        "min_next_sentence_gain": ExecutionParameter(type=float),
        "max_decrease": ExecutionParameter(type=float),
        "batch_size": ExecutionParameter(type=int),
        "eval_steps": ExecutionParameter(type=int),
        "init_checkpoint": ExecutionParameter(type=str, optional=True),
    }
    INPUTS: ClassVar[dict] = {
        "examples": ChannelParameter(type=standard_artifacts.Examples),
        "transform_graph": ChannelParameter(type=standard_artifacts.TransformGraph),
        **blessing.MODEL_INPUTS,
    }
    OUTPUTS: ClassVar[dict] = blessing.OUTPUTS


class NotScorable(ValueError):
    """A model with neither the `pretraining_logits` signature nor the Trainer's Keras file."""


def pretraining_heads(model: types.Artifact | str) -> Callable[[dict], dict]:
    """A Model artifact's pretraining heads, batch -> {mlm_logits, nsp_logits} (see the module
    docstring for which of its files)."""
    serving_dir = model_artifact.serving_dir(model)
    if tf.io.gfile.exists(os.path.join(serving_dir, "saved_model.pb")):
        import tensorflow_text  # noqa: F401  (registers the exported tokenizer's ops)

        loaded = tf.saved_model.load(serving_dir)
        if PRETRAINING_SIGNATURE in loaded.signatures:
            signature = loaded.signatures[PRETRAINING_SIGNATURE]
            # `loaded` stays referenced: the signature's variables live as long as it does.
            return lambda batch, loaded=loaded: signature(
                **{name: batch[name] for name in pretraining.MODEL_INPUTS}
            )
    keras_file = os.path.join(model_artifact.eval_dir(model), KERAS_MODEL_FILE)
    if not tf.io.gfile.exists(keras_file):
        raise NotScorable(
            f"{serving_dir}: no {PRETRAINING_SIGNATURE} signature in its SavedModel and no "
            f"{KERAS_MODEL_FILE}"
        )
    model = keras.saving.load_model(keras_file)
    forward = tf.function(lambda batch: model(batch, training=False))
    return lambda batch: forward({name: batch[name] for name in pretraining.MODEL_INPUTS})


def evaluate_pretrainer(model: types.Artifact | str, dataset: tf.data.Dataset) -> dict[str, float]:
    """Weighted masked-LM accuracy and NSP accuracy of a pipeline model over `dataset`."""
    forward = pretraining_heads(model)
    try:  # the metrics run_pretraining reports, computed the same way
        result = pretraining.evaluate(
            lambda inputs, training=False: forward(inputs), dataset, with_count=True
        )
    except ValueError:
        raise ValueError("PretrainingEvaluator: the eval split holds no example") from None
    keys = ("masked_lm_accuracy", "next_sentence_accuracy", "num_examples")
    return {key: result[key] for key in keys}


def evaluate_starting_checkpoint(
    init_checkpoint: str, dataset: tf.data.Dataset
) -> dict[str, float]:
    """The Trainer's starting point scored like the candidate: `init_checkpoint`'s weights with
    the pre-training heads it lacks freshly initialised (seeded), as the Trainer starts them;
    so the report shows what continued pretraining added."""
    config = checkpoints.read_checkpoint(init_checkpoint).config
    if config is None:
        raise ValueError(f"init_checkpoint={init_checkpoint}: no config beside it")
    keras.utils.set_random_seed(0)
    model = BertPretrainer(build_encoder(config))
    checkpoints.load_pretrained(model, init_checkpoint, fresh_heads=True)
    forward = tf.function(lambda batch: model(batch, training=False))
    result = pretraining.evaluate(
        lambda inputs, training=False: forward(inputs), dataset, with_count=True
    )
    return {key: result[key] for key in (*METRICS, "num_examples")}


def data_baselines(dataset: tf.data.Dataset) -> tuple[dict[str, float], dict[str, int]]:
    """What a constant predictor scores on `dataset`: the masked-LM accuracy of always
    predicting its most frequent masked token (weighted as the model's accuracy is), the
    next-sentence accuracy of always predicting its majority class; and those constants (the
    token id, the class)."""
    token_weights = np.zeros(0)  # per token id, the summed weights of its masked positions
    labels = np.zeros(2)
    for batch in dataset.as_numpy_iterator():
        counted = np.bincount(
            batch["masked_lm_ids"].ravel(),
            weights=batch["masked_lm_weights"].ravel().astype(np.float64),
            minlength=len(token_weights),
        )
        token_weights = np.pad(token_weights, (0, len(counted) - len(token_weights))) + counted
        labels += np.bincount(batch["next_sentence_labels"].ravel(), minlength=2)[:2]
    if not token_weights.sum() or not labels.sum():
        raise ValueError("PretrainingEvaluator: the eval split holds no example")
    scores = {
        "masked_lm_accuracy": float(token_weights.max() / token_weights.sum()),
        "next_sentence_accuracy": float(labels.max() / labels.sum()),
    }
    return scores, {
        "masked_lm_accuracy": int(token_weights.argmax()),
        "next_sentence_accuracy": int(labels.argmax()),
    }


def describe_constants(constants: Mapping[str, int], model: types.Artifact | str) -> dict[str, str]:
    """`data_baselines`' constants in words: the token as the candidate export's vocab spells
    it, the next-sentence class by its meaning."""
    token_id = constants["masked_lm_accuracy"]
    vocab_file = os.path.join(model_artifact.serving_dir(model), VOCAB_ASSET)
    token = f"token id {token_id}"
    if tf.io.gfile.exists(vocab_file):
        with tf.io.gfile.GFile(vocab_file) as f:
            vocab = f.read().splitlines()
        if token_id < len(vocab):
            token = f'"{vocab[token_id]}"'
    nsp = NEXT_SENTENCE_CLASSES[constants["next_sentence_accuracy"]]
    return {
        "masked_lm_accuracy": f"always {token} (the most frequent masked token)",
        "next_sentence_accuracy": f'always "{nsp}" (the majority class)',
    }


def thresholds(data: Mapping[str, float], exec_properties: Mapping[str, Any]) -> dict[str, float]:
    """Per metric, the larger of its absolute minimum and the data's baseline plus its gain."""
    return {
        name: max(exec_properties[f"min_{name}"], data[name] + exec_properties[GAINS[name]])
        for name in METRICS
    }


class Executor(blessing.EvaluatorExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        import tensorflow_transform as tft

        examples = artifact_utils.get_single_instance(input_dict["examples"])
        split_uri = artifact_utils.get_split_uri([examples], exec_properties["eval_split"])
        feature_spec = tft.TFTransformOutput(
            artifact_utils.get_single_uri(input_dict["transform_graph"])
        ).transformed_feature_spec()
        dataset = trainer_lib.transformed_dataset(
            [os.path.join(split_uri, "*")],
            feature_spec,
            exec_properties["batch_size"],
            training=False,
        )
        if exec_properties["eval_steps"] > 0:
            dataset = dataset.take(exec_properties["eval_steps"])

        model = artifact_utils.get_single_instance(input_dict["model"])
        candidate = evaluate_pretrainer(model, dataset)
        baseline_model = blessing.baseline_model(input_dict)
        baseline_note = blessing.describe_baseline(input_dict)
        baseline = None
        if baseline_model:
            try:
                baseline = evaluate_pretrainer(baseline_model, dataset)
            except NotScorable as e:  # a version pushed before the signature existed
                logging.warning("baseline comparison skipped: %s", e)
                baseline_model, baseline_note = None, f"not comparable: {e}"
        data, constants = data_baselines(dataset)
        starting = None
        if init_checkpoint := exec_properties.get("init_checkpoint"):
            starting = evaluate_starting_checkpoint(init_checkpoint, dataset)
            logging.info("starting checkpoint %s (fresh heads): %s", init_checkpoint, starting)
        minimums = thresholds(data, exec_properties)
        failures = blessing.validate(candidate, baseline, minimums, exec_properties["max_decrease"])
        logging.info(
            "candidate %s, baseline %s: %s", candidate, baseline, blessing.verdict(failures)
        )
        report = {
            "candidate": candidate,
            "baseline": baseline,
            "baseline_model": baseline_note,
            "thresholds": minimums,
            "data_baselines": data,
            "baseline_predictors": describe_constants(constants, model),
            "starting_checkpoint": starting,
            "init_checkpoint": init_checkpoint or None,
            "gains": {name: exec_properties[GAINS[name]] for name in METRICS},
            "max_decrease": exec_properties["max_decrease"],
            "failures": failures,
            "blessed": not failures,
        }
        metrics = {name: candidate[name] for name in METRICS}
        blessing.write_outputs(output_dict, report, metrics, model, baseline_model, data)


class PretrainingEvaluator(base_component.BaseComponent):
    """Scores a pretraining model on the eval split and blesses it (see the module docstring).

    Args:
        examples: Transform's transformed examples.
        transform_graph: Transform's graph (its transformed feature spec parses the examples).
        model: the Trainer's model.
        baseline_model: optional, the model serving now (`ServingBaseline`'s output).
        eval_split: split of `examples` to score.
        min_masked_lm_accuracy, min_next_sentence_accuracy: absolute minimums for blessing.
        min_masked_lm_gain, min_next_sentence_gain: margins over the eval split's own
            constant-predictor baselines (`data_baselines`), also needed for blessing.
        max_decrease: largest allowed drop of either accuracy below the baseline's.
        batch_size: evaluation batch size.
        eval_steps: batches to score; 0 scores the whole split.
        init_checkpoint: the checkpoint the Trainer started from, if any: scored too (with
            fresh heads where it has none), for the report only.
    """

    SPEC_CLASS = PretrainingEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        transform_graph: types.BaseChannel,
        model: types.BaseChannel,
        baseline_model: types.BaseChannel | None = None,
        eval_split: str = "eval",
        min_masked_lm_accuracy: float = 0.0,
        min_next_sentence_accuracy: float = 0.0,
        min_masked_lm_gain: float = 0.01,
        min_next_sentence_gain: float = 0.01,
        max_decrease: float = 0.0,
        batch_size: int = 32,
        eval_steps: int = 0,
        init_checkpoint: str = "",
    ):
        spec = PretrainingEvaluatorSpec(
            examples=examples,
            transform_graph=transform_graph,
            model=model,
            baseline_model=baseline_model,
            eval_split=eval_split,
            min_masked_lm_accuracy=min_masked_lm_accuracy,
            min_next_sentence_accuracy=min_next_sentence_accuracy,
            min_masked_lm_gain=min_masked_lm_gain,
            min_next_sentence_gain=min_next_sentence_gain,
            max_decrease=max_decrease,
            batch_size=batch_size,
            eval_steps=eval_steps,
            init_checkpoint=init_checkpoint,
            **blessing.output_channels(),
        )
        super().__init__(spec=spec)
