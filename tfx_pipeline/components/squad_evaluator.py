"""SquadEvaluator: the official SQuAD EM/F1 of the exported model on the dev questions, blessing.

TFMA has no SQuAD metric: EM/F1 compare answer strings after the official normalization, best
over each question's gold answers. This component asks the Trainer's exported SavedModel (the
one Pusher pushes: raw `question`/`context` in, `answer_text` out) for every question of the
eval split (`SquadExampleGen`'s raw dev questions), scores the answers with `bert_tf.tasks.squad`'s
official-equivalent metrics (v1.1: `exact_match`, `f1`; v2.0: `exact`, `f1`, `HasAns_*`,
`NoAns_*`; percent), and blesses the model when `f1` reaches its threshold and, if a baseline
(the model serving now, `ServingBaseline`'s) is given, is at most `max_f1_decrease` points
below the baseline's F1 on the same questions. The blessing is TFX Evaluator's
(`components.blessing`), so Pusher and `LatestBlessedModelStrategy` accept it.

The threshold is the larger of `min_f1` and the eval split's own baseline plus
`min_baseline_gain` points (`data_baseline`), a fixed answer policy scored by the same official
code:
- v2.0: always no answer (""), which scores the share of unanswerable questions;
- v1.1 (every question has an answer): each question's context's first k words, k the median
  length in words of the split's gold answers (rounded up): what a model answers that learned
  no more than "short answers, early in the paragraph", and roughly what an untrained span head
  picking the first positions answers.

With v2.0 data the exported model (`export_squad(version_2_with_negative=True)`) answers ""
when its null score beats the best span by more than `null_score_diff_threshold`, as
`run_squad`'s predictions.json does, so unanswerable questions can score.

Outputs: `evaluation` (`metrics.json`: candidate and baseline metrics, the candidate's answers,
the data baseline, thresholds, failures, verdict; the metrics and the data baseline also as
float custom properties in ML Metadata) and `blessing`.

Example (in a pipeline):

    evaluator = SquadEvaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=baseline.outputs["baseline_model"], min_f1=80.0, max_f1_decrease=0.5,
        min_baseline_gain=1.0)
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Any, ClassVar

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from bert_tf.tasks import squad
from bert_tf.tfrecords import check_tfrecord_files
from tfx_pipeline.components import blessing, model_artifact

_QUESTION_SPEC = {
    "id": tf.io.FixedLenFeature([], tf.string),
    "question": tf.io.FixedLenFeature([], tf.string),
    "context": tf.io.FixedLenFeature([], tf.string),
    "answers": tf.io.VarLenFeature(tf.string),
}


class SquadEvaluatorSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {
        "eval_split": ExecutionParameter(type=str),
        "min_f1": ExecutionParameter(type=float),
        "min_baseline_gain": ExecutionParameter(type=float),
        "max_f1_decrease": ExecutionParameter(type=float),
        "version_2_with_negative": ExecutionParameter(type=int),
        "batch_size": ExecutionParameter(type=int),
    }
    INPUTS: ClassVar[dict] = {
        "examples": ChannelParameter(type=standard_artifacts.Examples),
        **blessing.MODEL_INPUTS,
    }
    OUTPUTS: ClassVar[dict] = blessing.OUTPUTS


def read_questions(split_uri: str) -> list[dict]:
    """The eval split's questions: {id, question, context, answers (list of texts)}."""
    files = sorted(tf.io.gfile.glob(os.path.join(split_uri, "*")))
    if not files:
        raise FileNotFoundError(f"SquadEvaluator: no examples in {split_uri}")
    # A truncated file would otherwise score the model on part of the questions.
    check_tfrecord_files(files, "GZIP")
    questions = []
    for records in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(256):
        parsed = tf.io.parse_example(records, _QUESTION_SPEC)
        answers = tf.sparse.to_dense(parsed["answers"], default_value=b"").numpy()
        for i, qas_id in enumerate(parsed["id"].numpy()):
            questions.append(
                {
                    "id": qas_id.decode("utf-8"),
                    "question": parsed["question"][i].numpy().decode("utf-8"),
                    "context": parsed["context"][i].numpy().decode("utf-8"),
                    "answers": [a.decode("utf-8") for a in answers[i] if a],
                }
            )
    if not questions:
        raise ValueError(f"SquadEvaluator: the eval split {split_uri} holds no question")
    return questions


def answer_questions(
    model: types.Artifact | str, questions: list[dict], batch_size: int
) -> dict[str, str]:
    """{id: answer_text} from a Model artifact's exported SavedModel, raw text in."""
    import tensorflow_text  # noqa: F401  (registers the exported tokenizer's ops)

    serve = tf.saved_model.load(model_artifact.serving_dir(model)).signatures["serving_default"]
    predictions = {}
    for i in range(0, len(questions), batch_size):
        batch = questions[i : i + batch_size]
        answers = serve(
            question=tf.constant([q["question"] for q in batch]),
            context=tf.constant([q["context"] for q in batch]),
        )["answer_text"].numpy()
        predictions.update(
            {q["id"]: a.decode("utf-8") for q, a in zip(batch, answers, strict=True)}
        )
    return predictions


def official_metrics(
    questions: list[dict], predictions: dict[str, str], version_2_with_negative: bool
) -> dict[str, float]:
    """`bert_tf.tasks.squad`'s official-equivalent EM/F1 of `predictions` on `questions`."""
    # The official scripts read only each question's id and gold answer texts.
    dataset = [
        {
            "paragraphs": [
                {"qas": [{"id": q["id"], "answers": [{"text": a} for a in q["answers"]]}]}
                for q in questions
            ]
        }
    ]
    if version_2_with_negative:
        return squad.squad_v2_metrics(dataset, predictions)
    return squad.squad_v1_metrics(dataset, predictions)


def data_baseline(questions: list[dict], version_2_with_negative: bool) -> tuple[dict, str]:
    """(official metrics, description) of the eval split's fixed answer policy (see the module
    docstring): no answer for v2.0, each context's first k words for v1.1."""
    if version_2_with_negative:
        predictions = {q["id"]: "" for q in questions}
        description = 'always "" (no answer)'
    else:
        lengths = [len(a.split()) for q in questions for a in q["answers"]]
        k = max(1, math.ceil(statistics.median(lengths))) if lengths else 1
        predictions = {q["id"]: " ".join(q["context"].split()[:k]) for q in questions}
        words = "word" if k == 1 else f"{k} words"
        description = f"the context's first {words} (the median answer length)"
    return official_metrics(questions, predictions, version_2_with_negative), description


class Executor(blessing.EvaluatorExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        questions = read_questions(
            artifact_utils.get_split_uri([examples], exec_properties["eval_split"])
        )
        v2 = bool(exec_properties["version_2_with_negative"])
        batch_size = exec_properties["batch_size"]

        model = artifact_utils.get_single_instance(input_dict["model"])
        predictions = answer_questions(model, questions, batch_size)
        candidate = official_metrics(questions, predictions, v2)
        baseline_model = blessing.baseline_model(input_dict)
        baseline = None
        if baseline_model:
            baseline_predictions = answer_questions(baseline_model, questions, batch_size)
            baseline = official_metrics(questions, baseline_predictions, v2)
        data, predictor = data_baseline(questions, v2)
        gain = exec_properties["min_baseline_gain"]
        minimums = {"f1": max(exec_properties["min_f1"], data["f1"] + gain)}
        failures = blessing.validate(
            candidate, baseline, minimums, exec_properties["max_f1_decrease"], digits=2
        )
        logging.info(
            "SQuAD dev (%d questions): candidate %s, baseline %s, %s %s: %s",
            len(questions),
            candidate,
            baseline,
            predictor,
            data,
            blessing.verdict(failures),
        )
        report = {
            "candidate": candidate,
            "baseline": baseline,
            "baseline_model": blessing.describe_baseline(input_dict),
            "predictions": predictions,
            "thresholds": minimums,
            "data_baselines": {"f1": data["f1"]},
            "baseline_predictors": {"f1": predictor},
            "min_f1": exec_properties["min_f1"],
            "min_baseline_gain": gain,
            "max_f1_decrease": exec_properties["max_f1_decrease"],
            "failures": failures,
            "blessed": not failures,
        }
        blessing.write_outputs(
            output_dict, report, candidate, model, baseline_model, {"f1": data["f1"]}
        )


class SquadEvaluator(base_component.BaseComponent):
    """Scores a SQuAD model's exported SavedModel on the dev questions and blesses it (see the
    module docstring).

    Args:
        examples: `SquadExampleGen`'s examples (its eval split: the raw dev questions).
        model: the Trainer's model.
        baseline_model: optional, the model serving now (`ServingBaseline`'s output).
        eval_split: split of `examples` to score.
        min_f1: official F1 (percent) needed for blessing.
        min_baseline_gain: F1 points needed over the eval split's data baseline (see the
            module docstring), also for blessing.
        max_f1_decrease: largest allowed F1 drop (points) below the baseline's.
        version_2_with_negative: score as SQuAD v2.0 (unanswerable questions).
        batch_size: questions per call of the exported model.
    """

    SPEC_CLASS = SquadEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        model: types.BaseChannel,
        baseline_model: types.BaseChannel | None = None,
        eval_split: str = "eval",
        min_f1: float = 0.0,
        min_baseline_gain: float = 1.0,
        max_f1_decrease: float = 0.0,
        version_2_with_negative: bool = False,
        batch_size: int = 32,
    ):
        spec = SquadEvaluatorSpec(
            examples=examples,
            model=model,
            baseline_model=baseline_model,
            eval_split=eval_split,
            min_f1=min_f1,
            min_baseline_gain=min_baseline_gain,
            max_f1_decrease=max_f1_decrease,
            version_2_with_negative=int(version_2_with_negative),
            batch_size=batch_size,
            **blessing.output_channels(),
        )
        super().__init__(spec=spec)
