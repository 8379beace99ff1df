"""The evaluators' baseline is the model serving now (`ServingBaseline`), with no MLMD resolver;
the custom evaluators' blessings name the models as TFX's Evaluator does, on Kubeflow V2 too.

No pipeline run here: executors are called directly (and through TFX's Kubeflow V2 container
entrypoint), and the three pipelines are only compiled.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils, standard_artifacts

from tfx_pipeline import configs, metadata, pipeline, tfma_config
from tfx_pipeline.components import (
    blessing,
    pretraining_evaluator,
    serving_baseline,
    squad_evaluator,
    tfma_evaluator,
)

# --- ServingBaseline's executor -------------------------------------------------------------------


def _model(uri: Path, files=("saved_model.pb", "variables/variables.index")):
    """A Model artifact at uri whose Format-Serving holds `files` (their names as contents)."""
    model = standard_artifacts.Model()
    model.uri = str(uri)
    for name in files:
        path = uri / "Format-Serving" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return model


def _version(base: Path, name: str, files=("saved_model.pb", "variables/variables.index")):
    for file in files:
        path = base / name / file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{name}/{file}")


def _run_serving_baseline(tmp_path: Path, base_dir: Path):
    candidate = _model(tmp_path / "trainer_model")
    output = standard_artifacts.Model()
    output.uri = str(tmp_path / "baseline_model")
    serving_baseline.Executor().Do(
        {"model": [candidate]},
        {"baseline_model": [output]},
        {"serving_model_dir": str(base_dir)},
    )
    return candidate, output


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("base_exists", [False, True])
def test_nothing_serving_yet_emits_the_candidate(tmp_path, base_exists):
    base_dir = tmp_path / "serving" / "bert"
    if base_exists:
        base_dir.mkdir(parents=True)
        _version(base_dir, "7", files=("variables/variables.index",))  # still being pushed
    candidate, output = _run_serving_baseline(tmp_path, base_dir)
    copied = Path(output.uri) / "Format-Serving"
    assert _files(copied) == _files(Path(candidate.uri) / "Format-Serving")
    assert output.get_int_custom_property(serving_baseline.IS_CANDIDATE) == 1
    assert serving_baseline.is_candidate(output)
    assert output.get_int_custom_property(serving_baseline.BASELINE_VERSION) == -1
    assert output.get_string_custom_property(serving_baseline.BASELINE_SOURCE) == str(
        Path(candidate.uri) / "Format-Serving"
    )
    # Every evaluator reads it as "no baseline".
    assert blessing.baseline_model({"baseline_model": [output]}) is None
    assert blessing.describe_baseline({"baseline_model": [output]}) == blessing.NO_BASELINE


def test_the_highest_complete_numeric_version_is_the_baseline(tmp_path):
    base_dir = tmp_path / "serving" / "bert"
    _version(base_dir, "1")
    _version(base_dir, "2")
    _version(base_dir, ".tmp-export-3-x")  # serving.export's temporary folder
    _version(base_dir, "4", files=("variables/variables.index",))  # Pusher copies .pb last
    _version(base_dir, "latest")
    (base_dir / "5").write_text("a file, not a version folder")
    _, output = _run_serving_baseline(tmp_path, base_dir)
    assert _files(Path(output.uri) / "Format-Serving") == {
        "saved_model.pb": "2/saved_model.pb",
        "variables/variables.index": "2/variables/variables.index",
    }
    assert not serving_baseline.is_candidate(output)
    assert output.get_int_custom_property(serving_baseline.IS_CANDIDATE) == 0
    assert output.get_int_custom_property(serving_baseline.BASELINE_VERSION) == 2
    assert output.get_string_custom_property(serving_baseline.BASELINE_SOURCE) == str(
        base_dir / "2"
    )
    # TFX's Evaluator and ours find the model where the Trainer's would be.
    from tfx.utils import path_utils

    assert path_utils.serving_model_path(output.uri) == str(Path(output.uri) / "Format-Serving")
    assert blessing.baseline_model({"baseline_model": [output]}) is output
    assert blessing.describe_baseline({"baseline_model": [output]}) == {
        "version": 2,
        "source": str(base_dir / "2"),
    }


# --- compiled for Kubeflow: no resolver ---------------------------------------------------------


def _pipelines():
    common = {
        "pipeline_root": "gs://bucket/root",
        "vocab_file": "gs://bucket/vocab.txt",
        "serving_model_dir": "gs://bucket/serving",
        "model_name": "bert",
    }
    return {
        "pretrain": pipeline.create_pretraining_pipeline(
            data_root="gs://bucket/corpus", options=configs.PretrainingOptions(), **common
        ),
        "classify": pipeline.create_classification_pipeline(
            data_root="gs://bucket/glue/SST-2",
            init_checkpoint="gs://bucket/bert",
            options=configs.ClassificationOptions(),
            **common,
        ),
        "squad": pipeline.create_squad_pipeline(
            data_root="gs://bucket/squad",
            init_checkpoint="gs://bucket/bert",
            options=configs.SquadOptions(),
            **common,
        ),
    }


EVALUATORS = {
    "pretrain": "PretrainingEvaluator",
    "classify": "Evaluator",
    "squad": "SquadEvaluator",
}


def test_no_pipeline_compiles_a_resolver_for_kubeflow():
    # Imported directly: tfx.v1 hides it without the full kfp SDK (see runners/kubeflow.py).
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kubeflow_v2

    runner = kubeflow_v2.KubeflowV2DagRunner(
        config=kubeflow_v2.KubeflowV2DagRunnerConfig(default_image="registry.example.com/b:t")
    )
    for name, tfx_pipeline in _pipelines().items():
        spec = runner.run(tfx_pipeline, write_out=False)["pipelineSpec"]
        executors = spec["deploymentSpec"]["executors"]
        assert not [e for e, executor in executors.items() if "resolver" in executor], name
        tasks = spec["root"]["dag"]["tasks"]
        assert not [t for t in tasks if "resolver" in t.lower()], name
        # The evaluator's baseline comes from ServingBaseline, a plain container step reading
        # the Pusher's base directory.
        component = spec["components"][tasks["ServingBaseline"]["componentRef"]["name"]]
        container = executors[component["executorLabel"]]["container"]
        assert "tfx_pipeline.components.serving_baseline.Executor" in container["args"]
        assert "serving_model_dir" in component["inputDefinitions"]["parameters"]
        baseline_input = tasks[EVALUATORS[name]]["inputs"]["artifacts"]["baseline_model"]
        assert baseline_input["taskOutputArtifact"] == {
            "producerTask": "ServingBaseline",
            "outputArtifactKey": "baseline_model",
        }
        assert "gs://bucket/serving/bert" in json.dumps(tasks["ServingBaseline"]["inputs"])
        # The Pusher reads it too: it skips a candidate identical to the serving version.
        pusher_input = tasks["Pusher"]["inputs"]["artifacts"]["baseline_model"]
        assert pusher_input["taskOutputArtifact"]["producerTask"] == "ServingBaseline"


@pytest.mark.parametrize(
    "executor",
    [pretraining_evaluator.Executor, squad_evaluator.Executor, tfma_evaluator.Executor],
)
def test_evaluator_executors_get_the_kubeflow_blessing_conversion(executor):
    # kubeflow_v2_run_executor converts the blessing's model ids for these classes only.
    assert issubclass(executor, evaluator_executor.Executor)


# --- the SQuAD evaluator's blessing, locally and through the Kubeflow V2 entrypoint -----------

QUESTIONS = [
    ("q1", "Which city is the capital of France?", "Paris is the capital of France.", ["Paris"]),
    ("q2", "What is the capital of Italy?", "Rome is the capital of Italy.", ["Rome"]),
    ("q3", "Who wrote Hamlet?", "Shakespeare wrote Hamlet.", ["Shakespeare"]),
    ("q4", "What is the capital of Spain?", "The capital of Spain is Madrid.", ["Madrid"]),
]
# SQuAD v2.0: two more questions, unanswerable.
UNANSWERABLE = [
    ("q5", "What is the capital of Mars?", "Mars has no capital city.", []),
    ("q6", "Who wrote the Iliad's sequel?", "Homer wrote the Iliad.", []),
]


class _Answerer(tf.Module):
    """A stand-in for the exported SQuAD model: its answer is `answers[question]` ("" for a
    question it does not know) or, without `answers`, the context's first word."""

    def __init__(self, answers: dict[str, str] | None = None):
        super().__init__()
        self.table = None
        if answers is not None:
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(list(answers) or [""], tf.string),
                    tf.constant(list(answers.values()) or [""], tf.string),
                ),
                default_value="",
            )

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def serve(self, question, context):
        if self.table is not None:
            return {"answer_text": self.table.lookup(question)}
        return {"answer_text": tf.strings.split(context).to_tensor("")[:, 0]}


def _squad_model(uri: Path, answers: dict[str, str] | None = None) -> standard_artifacts.Model:
    model = standard_artifacts.Model()
    model.uri = str(uri)
    answerer = _Answerer(answers)
    tf.saved_model.save(
        answerer, str(uri / "Format-Serving"), signatures={"serving_default": answerer.serve}
    )
    return model


def _squad_examples(folder: Path, questions) -> standard_artifacts.Examples:
    """SquadExampleGen's eval split of `questions` (id, question, context, answers)."""
    examples = standard_artifacts.Examples()
    examples.uri = str(folder)
    examples.split_names = artifact_utils.encode_split_names(["eval"])
    split = folder / "Split-eval"
    split.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(split / "data.gz"), options="GZIP") as writer:
        for qas_id, question, context, answers in questions:

            def feature(*values):
                return tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[v.encode() for v in values])
                )

            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "id": feature(qas_id),
                        "question": feature(question),
                        "context": feature(context),
                        "answers": feature(*answers),
                    }
                )
            )
            writer.write(example.SerializeToString())
    return examples


def _known(questions, right: int | None = None) -> dict[str, str]:
    """question -> its first gold answer ("" if none), for the first `right` questions only."""
    return {q: (answers or [""])[0] for _, q, _, answers in questions[:right]}


@pytest.fixture(scope="module")
def squad_inputs(tmp_path_factory):
    """v1.1 questions (the context's first word answers 3 of the 4: the data baseline scores
    F1 75), v2.0 ones, and models: `good` (every gold answer: F1 100), `bad` (F1 0),
    `first_word` (the data baseline's answers), `three` (right on 3 of 4: F1 75), and for v2.0
    `good_v2` and `no_answer` (always "")."""
    root = tmp_path_factory.mktemp("squad_eval")
    every = QUESTIONS + UNANSWERABLE
    return SimpleNamespace(
        root=root,
        examples=_squad_examples(root / "examples", QUESTIONS),
        examples_v2=_squad_examples(root / "examples_v2", every),
        good=_squad_model(root / "good", _known(QUESTIONS)),
        bad=_squad_model(root / "bad", {q: "nothing" for _, q, _, _ in QUESTIONS}),
        first_word=_squad_model(root / "first_word"),
        three=_squad_model(root / "three", _known(QUESTIONS, right=3)),
        good_v2=_squad_model(root / "good_v2", _known(every)),
        no_answer=_squad_model(root / "no_answer", {}),
    )


EXEC_PROPERTIES = {
    "eval_split": "eval",
    "min_f1": 50.0,
    "min_baseline_gain": 1.0,
    "max_f1_decrease": 1.0,
    "version_2_with_negative": 0,
    "batch_size": 2,
}


def _baseline(source: standard_artifacts.Model, *, candidate: bool, version: int = 3):
    """ServingBaseline's output for `source`'s SavedModel (its own uri: the copy is no matter)."""
    baseline = standard_artifacts.Model()
    baseline.uri = source.uri
    baseline.set_int_custom_property(serving_baseline.IS_CANDIDATE, int(candidate))
    baseline.set_int_custom_property(
        serving_baseline.BASELINE_VERSION, -1 if candidate else version
    )
    baseline.set_string_custom_property(serving_baseline.BASELINE_SOURCE, f"/serving/{version}")
    return baseline


def _outputs(root: Path):
    evaluation, blessing_artifact = (
        standard_artifacts.ModelEvaluation(),
        standard_artifacts.ModelBlessing(),
    )
    evaluation.uri, blessing_artifact.uri = str(root / "evaluation"), str(root / "blessing")
    return {"evaluation": [evaluation], "blessing": [blessing_artifact]}


def _report(outputs) -> dict:
    return json.loads((Path(outputs["evaluation"][0].uri) / blessing.METRICS_FILE).read_text())


@pytest.mark.parametrize(
    "candidate, served, blessed",
    [("good", "bad", True), ("bad", "good", False)],
)
def test_squad_evaluator_blesses_against_the_served_model_with_int_ids(
    squad_inputs, tmp_path, candidate, served, blessed
):
    model = getattr(squad_inputs, candidate)
    model.id = 11  # what ML Metadata assigns locally
    baseline = _baseline(getattr(squad_inputs, served), candidate=False)
    baseline.id = 12
    outputs = _outputs(tmp_path)
    squad_evaluator.Executor().Do(
        {"examples": [squad_inputs.examples], "model": [model], "baseline_model": [baseline]},
        outputs,
        dict(EXEC_PROPERTIES),
    )
    report = _report(outputs)
    assert report["candidate"]["f1"] == (100.0 if candidate == "good" else 0.0)
    assert report["baseline"]["f1"] == (100.0 if served == "good" else 0.0)
    assert report["baseline_model"] == {"version": 3, "source": "/serving/3"}
    assert report["blessed"] is blessed
    result = outputs["blessing"][0]
    # TFX Evaluator's properties: the models' uris and int ML Metadata ids.
    assert result.get_int_custom_property("blessed") == int(blessed)
    assert result.mlmd_artifact.custom_properties["current_model_id"].int_value == 11
    assert result.mlmd_artifact.custom_properties["baseline_model_id"].int_value == 12
    assert result.get_string_custom_property("current_model") == model.uri
    assert result.get_string_custom_property("baseline_model") == baseline.uri
    assert (Path(result.uri) / ("BLESSED" if blessed else "NOT_BLESSED")).exists()


def test_squad_evaluator_skips_the_comparison_when_nothing_serves(squad_inputs, tmp_path):
    model = squad_inputs.good
    model.id = 11
    outputs = _outputs(tmp_path)
    squad_evaluator.Executor().Do(
        {
            "examples": [squad_inputs.examples],
            "model": [model],
            "baseline_model": [_baseline(model, candidate=True)],
        },
        outputs,
        dict(EXEC_PROPERTIES),
    )
    report = _report(outputs)
    assert report["baseline"] is None
    assert report["baseline_model"] == blessing.NO_BASELINE
    assert report["blessed"] and report["candidate"]["f1"] == 100.0
    properties = outputs["blessing"][0].mlmd_artifact.custom_properties
    assert properties["current_model_id"].int_value == 11
    assert "baseline_model_id" not in properties and "baseline_model" not in properties


def _run_squad(squad_inputs, tmp_path, model, served=None, examples=None, **properties):
    """The SQuAD evaluator's executor on `model` against `served` (default: nothing serving
    yet), EXEC_PROPERTIES updated with `properties`: (report, outputs)."""
    baseline = _baseline(served or model, candidate=served is None)
    outputs = _outputs(tmp_path)
    squad_evaluator.Executor().Do(
        {
            "examples": [examples or squad_inputs.examples],
            "model": [model],
            "baseline_model": [baseline],
        },
        outputs,
        {**EXEC_PROPERTIES, **properties},
    )
    return _report(outputs), outputs


@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_squad_evaluator_needs_more_than_the_datas_own_baseline(squad_inputs, tmp_path, version):
    """No F1 minimum: the threshold is the eval split's own baseline plus 1 point, scored by the
    official metric code. v1.1's baseline answers each context's first k words, k = 1 (the
    median gold answer length): right on 3 of the 4 questions, F1 75. v2.0's always answers ""
    (no answer): F1 33.33 (2 of the 6 questions have no answer). A model answering just that is
    not blessed; one answering every question right is."""
    v2 = version == "v2.0"
    examples = squad_inputs.examples_v2 if v2 else squad_inputs.examples
    constant = squad_inputs.no_answer if v2 else squad_inputs.first_word
    good = squad_inputs.good_v2 if v2 else squad_inputs.good
    properties = {"min_f1": 0.0, "version_2_with_negative": int(v2)}
    expected = 100 * 2 / 6 if v2 else 75.0
    predictor = (
        'always "" (no answer)' if v2 else "the context's first word (the median answer length)"
    )

    report, outputs = _run_squad(
        squad_inputs, tmp_path / "constant", constant, None, examples, **properties
    )
    assert report["candidate"]["f1"] == pytest.approx(expected)
    assert report["data_baselines"] == {"f1": pytest.approx(expected)}
    assert report["baseline_predictors"] == {"f1": predictor}
    assert report["thresholds"] == {"f1": pytest.approx(expected + 1)}
    assert report["failures"] == [f"f1 {expected:.2f} < threshold {expected + 1:.2f}"]
    assert not report["blessed"]
    evaluation = outputs["evaluation"][0]
    assert evaluation.get_float_custom_property("data_baseline_f1") == pytest.approx(expected)
    # The run summary's line: the model's F1, its threshold and the baseline's F1.
    assert metadata.report_lines(report)[0] == (
        f"f1 {expected:.4g} (threshold >= {expected + 1:.4g}; {predictor} scores {expected:.4g})"
    )

    report, _ = _run_squad(squad_inputs, tmp_path / "good", good, None, examples, **properties)
    assert report["candidate"]["f1"] == 100.0
    assert report["blessed"] and not report["failures"]


def test_squad_evaluator_keeps_min_f1_as_a_floor(squad_inputs, tmp_path):
    report, _ = _run_squad(squad_inputs, tmp_path, squad_inputs.good, min_f1=100.5)
    assert report["thresholds"] == {"f1": 100.5}  # above the baseline's 75 + 1
    assert not report["blessed"]


def test_squad_evaluator_rejects_a_model_worse_than_the_serving_one(squad_inputs, tmp_path):
    """No threshold to meet (min_f1 0, the data baseline loosened by 100 points): only the
    comparison with the model serving now (F1 100 on the same questions) rejects this one (75)."""
    report, _ = _run_squad(
        squad_inputs,
        tmp_path,
        squad_inputs.three,
        served=squad_inputs.good,
        min_f1=0.0,
        min_baseline_gain=-100.0,
    )
    assert report["thresholds"] == {"f1": 0.0}
    assert report["candidate"]["f1"] == 75.0 and report["baseline"]["f1"] == 100.0
    assert report["failures"] == ["f1 75.00 is more than 1.0 below the baseline's 100.00"]
    assert not report["blessed"]


def _runtime_artifact(name, title, uri, metadata=None) -> dict:
    artifact = {"type": {"schemaTitle": title}, "uri": str(uri), "metadata": metadata or {}}
    if name:
        artifact["name"] = name
    return {"artifacts": [artifact]}


def test_kubeflow_v2_entrypoint_writes_resource_names_as_model_ids(squad_inputs, tmp_path):
    """The container entrypoint of a compiled pipeline (`kubeflow_v2_run_executor`, what runs
    in each Vertex/KFP step) on the SQuAD evaluator: the blessing it reports names the models by
    their ML Metadata resource names, as for TFX's own Evaluator."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    store = "projects/p/locations/us-central1/metadataStores/default/artifacts"
    executor_input = {
        "inputs": {
            "parameterValues": EXEC_PROPERTIES,
            "artifacts": {
                "examples": _runtime_artifact(
                    f"{store}/100",
                    "tfx.Examples",
                    squad_inputs.examples.uri,
                    {"split_names": '["eval"]'},
                ),
                "model": _runtime_artifact(f"{store}/101", "tfx.Model", squad_inputs.good.uri),
                # ServingBaseline's properties arrive as JSON numbers (metadata), as on Vertex.
                "baseline_model": _runtime_artifact(
                    f"{store}/102",
                    "tfx.Model",
                    squad_inputs.bad.uri,
                    {"is_candidate": 0.0, "baseline_version": 3.0, "baseline_source": "/s/3"},
                ),
            },
        },
        "outputs": {
            "artifacts": {
                "evaluation": _runtime_artifact(
                    None, "tfx.ModelEvaluation", tmp_path / "evaluation"
                ),
                "blessing": _runtime_artifact(None, "tfx.ModelBlessing", tmp_path / "blessing"),
            },
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    inputs_spec = {
        "parameters": {
            "eval_split": {"parameterType": "STRING"},
            "min_f1": {"parameterType": "NUMBER_DOUBLE"},
            "min_baseline_gain": {"parameterType": "NUMBER_DOUBLE"},
            "max_f1_decrease": {"parameterType": "NUMBER_DOUBLE"},
            "version_2_with_negative": {"parameterType": "NUMBER_INTEGER"},
            "batch_size": {"parameterType": "NUMBER_INTEGER"},
        }
    }
    kubeflow_v2_run_executor._run_executor(
        SimpleNamespace(
            executor_class_path="tfx_pipeline.components.squad_evaluator.Executor",
            json_serialized_invocation_args=json.dumps(executor_input),
            json_serialized_inputs_spec_args=json.dumps(inputs_spec),
        ),
        [],
    )
    output = json.loads((tmp_path / "executor_output.json").read_text())
    (blessing_output,) = output["artifacts"]["blessing"]["artifacts"]
    metadata = blessing_output["metadata"]
    assert metadata["current_model_id"] == f"{store}/101"
    assert metadata["baseline_model_id"] == f"{store}/102"
    assert metadata["blessed"] == 1.0
    report = json.loads((tmp_path / "evaluation" / blessing.METRICS_FILE).read_text())
    assert report["baseline_model"] == {"version": 3, "source": "/s/3"}
    assert report["baseline"]["f1"] == 0.0
    json_format.Parse(json.dumps(output), pipeline_spec_pb2.ExecutorOutput())  # what KFP reads


# --- the pretraining evaluator scores a served version -----------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "the", "a", "man", "dog", "runs"]


def test_pretraining_evaluator_scores_a_pushed_version_like_the_trainers_keras_model(tmp_path):
    """A pushed version has only the serving SavedModel: its `pretraining_logits` signature
    scores it the same as the Trainer's Keras file scores the candidate."""
    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertPretrainer
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_encoder
    from tfx_pipeline import trainer_lib
    from tfx_pipeline.modules.pretraining import KERAS_MODEL_FILE

    keras.utils.set_random_seed(3)
    config = testing.micro_config(vocab_size=len(VOCAB))
    model = BertPretrainer(build_encoder(config))
    preprocessor = BertPreprocessor(VOCAB, seq_length=12)
    rng = np.random.default_rng(0)
    n, seq, pred = 24, 12, 3
    features = {
        "input_word_ids": rng.integers(5, len(VOCAB), (n, seq)).astype(np.int32),
        "input_mask": np.ones((n, seq), np.int32),
        "input_type_ids": np.zeros((n, seq), np.int32),
        "masked_lm_positions": rng.integers(1, seq, (n, pred)).astype(np.int32),
        "masked_lm_ids": rng.integers(5, len(VOCAB), (n, pred)).astype(np.int32),
        "masked_lm_weights": np.ones((n, pred), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n,)).astype(np.int32),
    }
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(8)
    model(dict(list(features.items())[:4]))  # build

    trained = tmp_path / "pretrainer"
    (trained / "Format-TFMA").mkdir(parents=True)
    model.save(str(trained / "Format-TFMA" / KERAS_MODEL_FILE))
    keras_only = pretraining_evaluator.evaluate_pretrainer(str(trained), dataset)
    trainer_lib.export_serving_model(
        export_encoder, str(trained / "Format-Serving"), model, preprocessor
    )
    # A pushed version, then ServingBaseline's copy of it.
    served = tmp_path / "serving" / "bert"
    served.mkdir(parents=True)
    tf.io.gfile.rename(str(trained / "Format-Serving"), str(served / "1"))
    _, baseline = _run_serving_baseline(tmp_path, served)
    assert not (Path(baseline.uri) / "Format-TFMA").exists()
    from_signature = pretraining_evaluator.evaluate_pretrainer(baseline.uri, dataset)
    assert from_signature["num_examples"] == keras_only["num_examples"] == n
    for name in pretraining_evaluator.METRICS:
        assert from_signature[name] == pytest.approx(keras_only[name], abs=1e-6), name

    # Neither the signature nor the Keras file: the evaluator notes it and skips the comparison.
    with pytest.raises(pretraining_evaluator.NotScorable):
        pretraining_evaluator.pretraining_heads(str(tmp_path / "nothing_here"))


def _pretraining_features(n: int = 40, seq: int = 12, pred: int = 3) -> dict[str, np.ndarray]:
    """Transformed pretraining examples where "the" (id 6) is 3 in 5 weighted masked positions
    (padding positions weigh 0) and 7 in 10 pairs are "random next" (label 1)."""
    rng = np.random.default_rng(1)
    ids = np.full((n, pred), 9, np.int32)  # the last position: padding, never counted
    ids[:, :2] = np.array([6, 6, 6, 7, 8] * 16).reshape(n, 2)
    weights = np.ones((n, pred), np.float32)
    weights[:, 2] = 0.0
    return {
        "input_word_ids": rng.integers(5, len(VOCAB), (n, seq)).astype(np.int32),
        "input_mask": np.ones((n, seq), np.int32),
        "input_type_ids": np.zeros((n, seq), np.int32),
        "masked_lm_positions": rng.integers(1, seq, (n, pred)).astype(np.int32),
        "masked_lm_ids": ids,
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([1] * 28 + [0] * 12, np.int32),
    }


def _pretrainer(uri: Path, token_id: int | None = None, next_sentence: int | None = None):
    """A micro BertPretrainer as the Trainer writes it (`Format-TFMA/model.keras`), untrained,
    or a constant one: its output biases make it always answer `token_id` for every masked
    position and `next_sentence` for every pair. `Format-Serving` holds only the vocab, as a
    serving export's `assets/vocab.txt` (no SavedModel: the evaluator scores the Keras file)."""
    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertPretrainer
    from serving.export_lib import VOCAB_ASSET
    from tfx_pipeline.modules.pretraining import KERAS_MODEL_FILE

    keras.utils.set_random_seed(5)
    model = BertPretrainer(build_encoder(testing.micro_config(vocab_size=len(VOCAB))))
    features = _pretraining_features()
    model({k: features[k][:1] for k in ("input_word_ids", "input_mask", "input_type_ids",
                                        "masked_lm_positions")})  # fmt: skip
    if token_id is not None:
        bias = np.zeros(len(VOCAB), np.float32)
        bias[token_id] = 50.0
        model.get_layer("masked_lm_head").weights[0].assign(bias)  # output_bias
        model.get_layer("next_sentence_head").bias.assign(np.eye(2)[next_sentence] * 50.0)
    (uri / "Format-TFMA").mkdir(parents=True)
    model.save(str(uri / "Format-TFMA" / KERAS_MODEL_FILE))
    vocab_file = uri / "Format-Serving" / VOCAB_ASSET
    vocab_file.parent.mkdir(parents=True)
    vocab_file.write_text("".join(token + "\n" for token in VOCAB))
    artifact = standard_artifacts.Model()
    artifact.uri = str(uri)
    return artifact


def test_pretraining_gate_is_relative_to_the_datas_constant_predictor(tmp_path):
    """The blessing thresholds are the eval split's constant-predictor scores plus a margin: a
    model that always answers the most frequent token and the majority class, or an untrained
    one, is not blessed; one that beats both baselines by the margin is."""
    features = _pretraining_features()
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(16)
    data, constants = pretraining_evaluator.data_baselines(dataset)
    assert data == pytest.approx({"masked_lm_accuracy": 0.6, "next_sentence_accuracy": 0.7})
    assert constants == {"masked_lm_accuracy": 6, "next_sentence_accuracy": 1}

    options = {
        "min_masked_lm_accuracy": 0.05,
        "min_next_sentence_accuracy": 0.4,
        "min_masked_lm_gain": 0.01,
        "min_next_sentence_gain": 0.01,
    }
    minimums = pretraining_evaluator.thresholds(data, options)
    assert minimums == pytest.approx({"masked_lm_accuracy": 0.61, "next_sentence_accuracy": 0.71})
    # The constant predictor scores exactly the baselines: not blessed, on both metrics.
    assert len(blessing.validate(data, None, minimums, 0.0)) == 2
    beats = {name: value + 0.02 for name, value in data.items()}
    assert blessing.validate(beats, None, minimums, 0.0) == []
    # An absolute minimum above the baseline still counts.
    higher = pretraining_evaluator.thresholds(data, {**options, "min_masked_lm_accuracy": 0.9})
    assert higher["masked_lm_accuracy"] == 0.9

    # An untrained model, scored as the executor scores the Trainer's model: not blessed.
    untrained = _pretrainer(tmp_path / "untrained")
    scores = pretraining_evaluator.evaluate_pretrainer(untrained.uri, dataset)
    assert blessing.validate(scores, None, minimums, 0.0) != []


@pytest.fixture(scope="module")
def pretraining_inputs(tmp_path_factory):
    """Transform's outputs for `_pretraining_features` (the eval split's gzipped examples and
    the graph's transformed metadata, which the evaluator parses them with) and constant
    pretrainers: `constant` (always "the" and "random next": the data's baselines) and `wrong`
    (always "dog", never masked, and "is next": accuracies 0 and 0.3)."""
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils

    root = tmp_path_factory.mktemp("pretraining_eval")
    features = _pretraining_features()
    spec = {
        name: tf.io.FixedLenFeature(
            value.shape[1:], tf.float32 if value.dtype == np.float32 else tf.int64
        )
        for name, value in features.items()
    }
    graph = root / "transform_graph"
    metadata_io.write_metadata(
        dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec)),
        str(graph / "transformed_metadata"),
    )
    examples = standard_artifacts.Examples()
    examples.uri = str(root / "examples")
    examples.split_names = artifact_utils.encode_split_names(["eval"])
    (root / "examples" / "Split-eval").mkdir(parents=True)
    with tf.io.TFRecordWriter(
        str(root / "examples" / "Split-eval" / "data.gz"), options="GZIP"
    ) as writer:
        for i in range(len(features["masked_lm_ids"])):
            feature = {
                name: tf.train.Feature(float_list=tf.train.FloatList(value=np.ravel(value[i])))
                if value.dtype == np.float32
                else tf.train.Feature(int64_list=tf.train.Int64List(value=np.ravel(value[i])))
                for name, value in features.items()
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    transform_graph = standard_artifacts.TransformGraph()
    transform_graph.uri = str(graph)
    return SimpleNamespace(
        examples=examples,
        transform_graph=transform_graph,
        constant=_pretrainer(root / "constant", token_id=6, next_sentence=1),
        wrong=_pretrainer(root / "wrong", token_id=9, next_sentence=0),
    )


def _run_pretraining_evaluator(inputs, tmp_path, model, served=None, **properties):
    """PretrainingEvaluator's executor on `model` against `served` (default: nothing serving
    yet), no absolute minimums, the default gains unless `properties` say otherwise: the report
    and the evaluation's custom properties."""
    outputs = _outputs(tmp_path)
    pretraining_evaluator.Executor().Do(
        {
            "examples": [inputs.examples],
            "transform_graph": [inputs.transform_graph],
            "model": [model],
            "baseline_model": [_baseline(served or model, candidate=served is None)],
        },
        outputs,
        {
            "eval_split": "eval",
            "min_masked_lm_accuracy": 0.0,
            "min_next_sentence_accuracy": 0.0,
            "min_masked_lm_gain": 0.01,
            "min_next_sentence_gain": 0.01,
            "max_decrease": 0.01,
            "batch_size": 16,
            "eval_steps": 0,
            **properties,
        },
    )
    report = _report(outputs)
    assert outputs["blessing"][0].get_int_custom_property("blessed") == int(report["blessed"])
    recorded = outputs["evaluation"][0].mlmd_artifact.custom_properties
    return report, {name: value.double_value for name, value in recorded.items()}


def test_pretraining_evaluator_does_not_bless_the_constant_predictor(pretraining_inputs, tmp_path):
    """The executor, end to end on Transform-like outputs, with no absolute minimum: a model
    that always answers the most frequent masked token and the majority next-sentence class
    scores exactly the data's baselines and is not blessed by default; with the margins
    loosened below zero it is, so the margin over the baseline is what decides."""
    report, properties = _run_pretraining_evaluator(
        pretraining_inputs, tmp_path / "default", pretraining_inputs.constant
    )
    assert report["candidate"]["masked_lm_accuracy"] == pytest.approx(0.6)
    assert report["candidate"]["next_sentence_accuracy"] == pytest.approx(0.7)
    assert report["data_baselines"] == pytest.approx(
        {"masked_lm_accuracy": 0.6, "next_sentence_accuracy": 0.7}
    )
    assert report["thresholds"] == pytest.approx(
        {"masked_lm_accuracy": 0.61, "next_sentence_accuracy": 0.71}
    )
    assert report["failures"] == [
        "masked_lm_accuracy 0.6000 < threshold 0.6100",
        "next_sentence_accuracy 0.7000 < threshold 0.7100",
    ]
    assert not report["blessed"]
    assert report["baseline_predictors"] == {
        "masked_lm_accuracy": 'always "the" (the most frequent masked token)',
        "next_sentence_accuracy": 'always "B is random" (the majority class)',
    }
    assert properties["data_baseline_masked_lm_accuracy"] == pytest.approx(0.6)
    assert properties["data_baseline_next_sentence_accuracy"] == pytest.approx(0.7)
    # The run summary shows each baseline beside the model's number.
    assert metadata.report_lines(report)[:2] == [
        'masked_lm_accuracy 0.6 (threshold >= 0.61; always "the" (the most frequent masked '
        "token) scores 0.6)",
        'next_sentence_accuracy 0.7 (threshold >= 0.71; always "B is random" (the majority '
        "class) scores 0.7)",
    ]

    report, _ = _run_pretraining_evaluator(
        pretraining_inputs,
        tmp_path / "loosened",
        pretraining_inputs.constant,
        min_masked_lm_gain=-0.01,
        min_next_sentence_gain=-0.01,
    )
    assert report["blessed"] and not report["failures"]


def test_pretraining_evaluator_rejects_a_model_worse_than_the_serving_one(
    pretraining_inputs, tmp_path
):
    """No threshold to meet (the margins -1): only the comparison with the model serving now,
    scored on the same examples, rejects the candidate."""
    report, _ = _run_pretraining_evaluator(
        pretraining_inputs,
        tmp_path,
        pretraining_inputs.wrong,
        served=pretraining_inputs.constant,
        min_masked_lm_gain=-1.0,
        min_next_sentence_gain=-1.0,
    )
    assert report["thresholds"] == {"masked_lm_accuracy": 0.0, "next_sentence_accuracy": 0.0}
    assert report["baseline"]["masked_lm_accuracy"] == pytest.approx(0.6)
    assert report["failures"] == [
        "masked_lm_accuracy 0.0000 is more than 0.01 below the baseline's 0.6000",
        "next_sentence_accuracy 0.3000 is more than 0.01 below the baseline's 0.7000",
    ]
    assert not report["blessed"]


# --- TFMA's Evaluator: the data's own baseline and ServingBaseline's output --------------------


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    words = VOCAB[6:]
    return [(" ".join(rng.choice(words, 4)), " ".join(rng.choice(words, 3))) for _ in range(n)]


def _eval_examples(folder: Path, pairs, labels) -> standard_artifacts.Examples:
    """TextClassificationExampleGen's eval split: `text_a`, `text_b` and `label` (int64 class
    ids, or float scores)."""
    examples = standard_artifacts.Examples()
    examples.uri = str(folder)
    examples.split_names = artifact_utils.encode_split_names(["eval"])
    (folder / "Split-eval").mkdir(parents=True)
    with tf.io.TFRecordWriter(str(folder / "Split-eval" / "data.gz"), options="GZIP") as writer:
        for (text_a, text_b), label in zip(pairs, labels, strict=True):
            feature = {
                "text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text_a.encode()])),
                "text_b": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text_b.encode()])),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
                if isinstance(label, float)
                else tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return examples


def _answers(model: standard_artifacts.Model, pairs, key: str) -> np.ndarray:
    """The export's `serving_default` `key` output for the pairs, raw text in."""
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    serve = tf.saved_model.load(_serving(model)).signatures["serving_default"]
    text_a, text_b = zip(*pairs, strict=True)
    return serve(text_a=tf.constant(text_a), text_b=tf.constant(text_b))[key].numpy()


def _classifier(num_classes: int, bias=None, constant: bool = False):
    """A micro BertClassifier, untrained, its weights drawn wide (initializer range 1) so that
    its answers vary with the text; its head's bias set if given, its kernel zero if
    `constant` (then it gives every text the same answer)."""
    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier

    keras.utils.set_random_seed(5)
    config = testing.micro_config(vocab_size=len(VOCAB), initializer_range=1.0)
    classifier = BertClassifier(build_encoder(config), num_classes)
    dense = classifier.head.dense
    if constant:
        dense.kernel.assign(np.zeros(dense.kernel.shape, np.float32))
    if bias is not None:
        dense.bias.assign(np.array(bias, np.float32))
    return classifier


def _run_tfma(tmp_path, model, examples, eval_config, baseline=None, min_baseline_gain=0.01):
    """The Evaluator's executor (TFMA, Beam in this process) on `model` against `baseline`
    (default: ServingBaseline's "nothing serving yet" copy): its outputs, the validation
    result, and its data_baselines.json."""
    import tensorflow_model_analysis as tfma
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import proto_utils

    outputs = _outputs(tmp_path)
    tfma_evaluator.Executor(base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[])).Do(
        {
            "examples": [examples],
            "model": [model],
            "baseline_model": [baseline or _baseline(model, candidate=True)],
        },
        outputs,
        {
            "eval_config": proto_utils.proto_to_json(eval_config),
            "example_splits": '["eval"]',
            "min_baseline_gain": min_baseline_gain,
        },
    )
    uri = outputs["evaluation"][0].uri
    gates = json.loads((Path(uri) / tfma_evaluator.DATA_BASELINES_FILE).read_text())
    return outputs, tfma.load_validation_result(uri), gates


def _failed(validation) -> list[tuple[str, bool]]:
    """TFMA's failed thresholds: (metric name, whether it is the change vs the baseline)."""
    return [
        (f.metric_key.name, f.metric_key.is_diff)
        for per_slice in validation.metric_validations_per_slice
        for f in per_slice.failures
    ]


@pytest.fixture(scope="module")
def regression_inputs(tmp_path_factory):
    """A tiny STS-B-style regressor's export (as a Trainer's Model) and eval examples labelled
    from its own answers: `examples`, its answers plus a little noise (R² and Pearson near 1);
    `offset`, its answers plus 3 of their standard deviations (Pearson 1, and yet a mean
    squared error 9 times the labels' variance: worse than always answering their mean)."""
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_classifier
    from tfx_pipeline import trainer_lib

    root = tmp_path_factory.mktemp("tfma_eval")
    model = standard_artifacts.Model()
    model.uri = str(root / "trainer_model")
    trainer_lib.export_serving_model(
        export_classifier,
        _serving(model),
        _classifier(1),
        BertPreprocessor(VOCAB, seq_length=12),
        regression=True,
    )
    pairs = _pairs(16, seed=1)
    outputs = _answers(model, pairs, "outputs").astype(np.float64)
    spread = outputs.std()
    assert spread > 0.05, outputs  # answers that vary with the texts
    noise = np.random.default_rng(2).normal(0, 0.01 * spread, len(pairs))
    fit = [float(x) for x in outputs + noise]
    offset = [float(x) for x in outputs + 3 * spread]
    return SimpleNamespace(
        root=root,
        model=model,
        examples=_eval_examples(root / "examples", pairs, fit),
        offset=_eval_examples(root / "offset", pairs, offset),
        offset_labels=np.array(offset, np.float32),
    )


@pytest.mark.parametrize("nothing_serving", [True, False])
def test_tfma_evaluator_compares_with_the_served_model_only(
    regression_inputs, tmp_path, nothing_serving
):
    """The same candidate and thresholds (its answers fit the labels: the data-baseline gates
    pass), with a change threshold no model can meet against itself (Pearson at least 1.5 above
    the baseline's): judged against a served model (here its own copy) it fails; with
    ServingBaseline's "nothing serving yet" copy TFMA rubber-stamps the change threshold and
    blesses on the value thresholds alone."""
    served = tmp_path / "serving" / "sts"
    if not nothing_serving:
        served.mkdir(parents=True)
        tf.io.gfile.rename(_serving(regression_inputs.model), str(served / "1"))
    try:
        output = standard_artifacts.Model()
        output.uri = str(tmp_path / "baseline_model")
        serving_baseline.Executor().Do(
            {"model": [regression_inputs.model]},
            {"baseline_model": [output]},
            {"serving_model_dir": str(served)},
        )
    finally:
        if not nothing_serving:
            tf.io.gfile.rename(str(served / "1"), _serving(regression_inputs.model))
    assert serving_baseline.is_candidate(output) == nothing_serving
    regression_inputs.model.id, output.id = 21, 22
    eval_config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b", min_metric=-1.0, max_decrease=-1.5), []
    )
    outputs, validation, _ = _run_tfma(
        tmp_path, regression_inputs.model, regression_inputs.examples, eval_config, output
    )
    properties = outputs["blessing"][0].mlmd_artifact.custom_properties
    assert properties["current_model_id"].int_value == 21
    assert properties["blessed"].int_value == int(nothing_serving)
    if nothing_serving:
        assert "baseline_model_id" not in properties
        assert validation.validation_ok
    else:
        assert properties["baseline_model_id"].int_value == 22
        assert _failed(validation) == [("pearson", True)]


def test_a_regressor_worse_than_the_mean_label_is_not_blessed(regression_inputs, tmp_path):
    """Regression must beat the mean predictor: TFMA checks a MeanSquaredError bound of (1 -
    0.01) x the labels' variance (R² at least 0.01) besides the Pearson threshold. Answers
    perfectly correlated with the labels but 3 standard deviations off pass Pearson's and fail
    that bound."""
    eval_config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b"), []
    )
    outputs, validation, gates = _run_tfma(
        tmp_path, regression_inputs.model, regression_inputs.offset, eval_config
    )
    assert outputs["blessing"][0].get_int_custom_property("blessed") == 0
    assert _failed(validation) == [("mean_squared_error", False)]
    variance = float(np.var(regression_inputs.offset_labels))
    mean = float(np.mean(regression_inputs.offset_labels))
    pearson, mse = gates["gates"]
    assert pearson == {
        "metric": "pearson",
        "baseline": 0.0,
        "predictor": "any constant (no correlation)",
        "lower_bound": 0.01,
    }
    assert mse == {
        "metric": "mean_squared_error",
        "baseline": pytest.approx(variance, rel=1e-5),
        "predictor": f"always {mean:.4g} (the mean label)",
        "upper_bound": pytest.approx(0.99 * variance, rel=1e-5),
    }
    lines, failures = metadata.tfma_lines(outputs["evaluation"][0].uri)
    shown = {line.split()[0]: line for line in lines}
    assert shown["pearson"] == (
        "pearson 1 (threshold >= 0.01; any constant (no correlation) scores 0)"
    )
    mse_line = re.fullmatch(
        r"mean_squared_error ([\d.]+) \(threshold <= ([\d.]+); always "
        + re.escape(f"{mean:.4g} (the mean label) scores {variance:.4g})"),
        shown["mean_squared_error"],
    )
    assert mse_line, lines
    assert float(mse_line[1]) == pytest.approx(9 * variance, rel=1e-3)  # 3 deviations off
    assert float(mse_line[2]) == pytest.approx(0.99 * variance, rel=1e-3)
    assert failures == [f"mean_squared_error {mse_line[1]} > threshold {mse_line[2]}"]


@pytest.fixture(scope="module")
def classifier_inputs(tmp_path_factory):
    """Eval examples of 25 pairs and tiny classifiers' exports (label names neg, pos):
    `always_neg` and `always_pos` (head kernel 0, bias towards one class) on `examples`, 15
    "neg" and 10 "pos" (the majority class's share 0.6); `learned`, a random head whose bias
    splits the pairs between the classes, on `its_own`, labelled with its own answers."""
    root = tmp_path_factory.mktemp("tfma_classifiers")
    pairs = _pairs(25, seed=3)
    scorer = _export(root / "scorer", _classifier(2))
    margins = np.diff(_answers(scorer, pairs, "logits"), axis=1)[:, 0]  # logit of pos - of neg
    ordered = np.sort(margins)
    middle = (ordered[12] + ordered[13]) / 2
    assert ordered[13] - ordered[12] > 1e-3, ordered  # well apart
    learned = _export(root / "learned", _classifier(2, bias=[middle, 0.0]))
    its_own = [int(x) for x in (margins > middle)]
    assert sum(its_own) == 12
    return SimpleNamespace(
        examples=_eval_examples(root / "examples", pairs, [0] * 15 + [1] * 10),
        always_neg=_export(root / "always_neg", _classifier(2, bias=[5.0, 0.0], constant=True)),
        always_pos=_export(root / "always_pos", _classifier(2, bias=[0.0, 5.0], constant=True)),
        learned=learned,
        its_own=_eval_examples(root / "its_own", pairs, its_own),
    )


@pytest.mark.parametrize(
    "task, model, metric, baseline, predictor",
    [
        # SST-2's main metric: accuracy; the constant answer is the majority class.
        (
            "sst-2",
            "always_neg",
            "sparse_categorical_accuracy",
            0.6,
            'always "neg" (the majority class)',
        ),
        # MRPC's: F1 of class 1; always class 1 scores 2p/(1+p) = 0.8/1.4.
        ("mrpc", "always_pos", "f1_score", 0.8 / 1.4, 'always "pos"'),
    ],
)
def test_a_constant_classifier_is_not_blessed_by_default(
    classifier_inputs, tmp_path, task, model, metric, baseline, predictor
):
    """The pipeline's EvalConfig with its defaults (no --min_metric), nothing serving yet: the
    executor raises the main metric's threshold to what the best constant predictor scores on
    the eval split plus 0.01, so a classifier answering one class for every text is not
    blessed. The summary names the classes."""
    options = configs.ClassificationOptions(task_name=task)
    assert options.min_metric == 0.0 and options.min_baseline_gain == 0.01
    eval_config = tfma_config.classification_eval_config(options, ["0", "1"])
    outputs, validation, gates = _run_tfma(
        tmp_path, getattr(classifier_inputs, model), classifier_inputs.examples, eval_config
    )
    assert outputs["blessing"][0].get_int_custom_property("blessed") == 0
    assert _failed(validation) == [(metric, False)]
    (gate,) = gates["gates"]
    assert gate["metric"] == metric
    assert gate["baseline"] == pytest.approx(baseline)
    assert gate["predictor"] == predictor
    assert gate["lower_bound"] == pytest.approx(baseline + 0.01)
    assert gates["label_names"] == ["neg", "pos"] and gates["num_examples"] == 25
    evaluation = outputs["evaluation"][0]
    name = metric + ("_1" if metric == "f1_score" else "")
    assert evaluation.get_float_custom_property(f"data_baseline_{name}") == pytest.approx(baseline)
    # TFMA's own record of the threshold it applied.
    import tensorflow_model_analysis as tfma

    config = tfma.load_eval_result(evaluation.uri).config
    (bound,) = [
        m.threshold.value_threshold.lower_bound.value
        for spec in config.metrics_specs
        for m in spec.metrics
        if m.HasField("threshold") and m.threshold.HasField("value_threshold")
    ]
    assert bound == pytest.approx(baseline + 0.01)
    # The summary: the model's number, its threshold, the baseline's; classes by their names.
    lines, failures = metadata.tfma_lines(evaluation.uri)
    shown = metric + (' ("pos")' if metric == "f1_score" else "")
    assert lines[0] == (
        f"{shown} {baseline:.4g} (threshold >= {baseline + 0.01:.4g}; {predictor} scores "
        f"{baseline:.4g})"
    )
    assert failures == [f"{shown} {baseline:.4g} < threshold {baseline + 0.01:.4g}"]
    assert 'matthews_correlation_coefficient ("pos")' in lines[-1]
    assert "class 1" not in "\n".join(lines + failures)


def test_a_classifier_better_than_the_majority_class_is_blessed(classifier_inputs, tmp_path):
    outputs, validation, gates = _run_tfma(
        tmp_path,
        classifier_inputs.learned,
        classifier_inputs.its_own,
        tfma_config.classification_eval_config(configs.ClassificationOptions(), ["0", "1"]),
    )
    assert validation.validation_ok
    assert outputs["blessing"][0].get_int_custom_property("blessed") == 1
    assert gates["gates"][0]["baseline"] == pytest.approx(13 / 25)  # 13 "neg", 12 "pos"
    lines, _ = metadata.tfma_lines(outputs["evaluation"][0].uri)
    assert lines[0] == (
        'sparse_categorical_accuracy 1 (threshold >= 0.53; always "neg" (the majority class) '
        "scores 0.52)"
    )


def test_the_data_gate_raises_only_the_value_thresholds():
    """`data_gate` on the pipeline's EvalConfigs: the main metric's lower bound becomes the
    larger of --min_metric and the baseline plus the margin; the change threshold against the
    model serving now is TFMA's, untouched; regression gets the mean predictor's MSE bound."""
    labels = np.array([0] * 6 + [1] * 4)
    config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sst-2", min_metric=0.55, max_decrease=0.02),
        ["0", "1"],
    )
    (gate,) = tfma_evaluator.data_gate(config, labels, ["neg", "pos"], 0.01)
    assert gate["lower_bound"] == pytest.approx(0.61)
    (threshold,) = [
        m.threshold for s in config.metrics_specs for m in s.metrics if m.HasField("threshold")
    ]
    assert threshold.value_threshold.lower_bound.value == pytest.approx(0.61)
    assert threshold.change_threshold.absolute.value == pytest.approx(-0.02)
    # --min_metric above the baseline stays the bound.
    config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="cola", min_metric=0.3), ["0", "1"]
    )
    (gate,) = tfma_evaluator.data_gate(config, labels, ["neg", "pos"], 0.01)
    assert (gate["metric"], gate["baseline"], gate["lower_bound"]) == (
        "matthews_correlation_coefficient",
        0.0,
        pytest.approx(0.3),
    )
    scores = np.array([1.0, 2.0, 3.0, 6.0])
    config = tfma_config.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b"), []
    )
    pearson, mse = tfma_evaluator.data_gate(config, scores, [], 0.1)
    assert pearson["lower_bound"] == pytest.approx(0.1)
    assert mse["upper_bound"] == pytest.approx(0.9 * np.var(scores))
    assert [m.class_name for m in config.metrics_specs[0].metrics][-1] == "MeanSquaredError"


def test_constant_predictors_score_as_sklearn_scores_them():
    from sklearn import metrics

    labels = np.array([1, 0, 0, 1, 0, 2, 0, 0, 1, 0])
    names = ["a", "b", "c"]
    for always in (0, 1, 2):  # the majority class is the best constant for accuracy
        score = metrics.accuracy_score(labels, np.full(10, always))
        assert (
            score
            <= tfma_evaluator.constant_predictor("SparseCategoricalAccuracy", labels, None, names)[
                0
            ]
        )
    assert tfma_evaluator.constant_predictor("SparseCategoricalAccuracy", labels, None, names) == (
        0.6,
        'always "a" (the majority class)',
    )
    binary = (labels == 1).astype(int)
    f1, predictor = tfma_evaluator.constant_predictor("F1Score", binary, 1, ["no", "yes"])
    assert f1 == pytest.approx(metrics.f1_score(binary, np.ones(10)))
    assert metrics.f1_score(binary, np.zeros(10), zero_division=0) == 0.0 < f1
    assert predictor == 'always "yes"'
    for always in (0, 1):
        assert metrics.matthews_corrcoef(binary, np.full(10, always)) == 0.0
    assert (
        tfma_evaluator.constant_predictor("MatthewsCorrelationCoefficient", binary, 1, [])[0] == 0.0
    )
    with pytest.raises(ValueError, match="no constant-predictor baseline for the metric AUC"):
        tfma_evaluator.constant_predictor("AUC", binary, 1, [])


# --- the model serving now is not pushed again ------------------------------------------------


def _export(root: Path, classifier, label_names=("neg", "pos")) -> standard_artifacts.Model:
    """A Trainer-like Model artifact at `root` holding `classifier`'s export."""
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_classifier
    from tfx_pipeline import trainer_lib

    model = standard_artifacts.Model()
    model.uri = str(root)
    trainer_lib.export_serving_model(
        export_classifier,
        str(root / "Format-Serving"),
        classifier,
        BertPreprocessor(VOCAB, seq_length=12),
        label_names=list(label_names),
    )
    return model


def _serving(model: standard_artifacts.Model) -> str:
    return str(Path(model.uri) / "Format-Serving")


def _edited(model: standard_artifacts.Model, root: Path, what: str) -> standard_artifacts.Model:
    """A copy of `model` with its label names changed in the graph (`what="labels"`: the same
    weights, another model) or one weight changed (`"weights"`: a retrained model)."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tfx.utils import io_utils

    copy = standard_artifacts.Model()
    copy.uri = str(root)
    io_utils.copy_dir(_serving(model), _serving(copy))
    if what == "labels":
        path = Path(_serving(copy), "saved_model.pb")
        saved_model = saved_model_pb2.SavedModel.FromString(path.read_bytes())
        (labels,) = [
            node.attr["value"].tensor
            for node in saved_model.meta_graphs[0].graph_def.node
            if node.op == "Const" and list(node.attr["value"].tensor.string_val) == [b"neg", b"pos"]
        ]
        labels.string_val[:] = [b"bad", b"good"]
        path.write_bytes(saved_model.SerializeToString())
    else:
        prefix = str(Path(_serving(copy), "variables", "variables"))
        reader = tf.train.load_checkpoint(prefix)
        names = sorted(reader.get_variable_to_shape_map())
        tensors = [reader.get_tensor(name) for name in names]
        kernel = next(i for i, t in enumerate(tensors) if getattr(t, "ndim", 0) == 2)
        tensors[kernel] = tensors[kernel] + 0.01  # (some kernels start as zeros)
        for name in tf.io.gfile.glob(prefix + ".*"):
            tf.io.gfile.remove(name)
        tf.raw_ops.SaveV2(
            prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors
        )
    return copy


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> SimpleNamespace:
    """A tiny classifier's export, `candidate`, and other models: `same`, the same weights
    exported again (what a rerun of the seeded Trainer on unchanged data writes);
    `relabelled`, other label names in its graph (the weights unchanged); `retrained`, one
    weight changed."""
    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier

    root = tmp_path_factory.mktemp("exports")
    config = testing.micro_config(vocab_size=len(VOCAB))
    keras.utils.set_random_seed(5)
    classifier = BertClassifier(build_encoder(config), 2)
    candidate = _export(root / "candidate", classifier)
    return SimpleNamespace(
        candidate=candidate,
        same=_export(root / "same", classifier),
        relabelled=_edited(candidate, root / "relabelled", "labels"),
        retrained=_edited(candidate, root / "retrained", "weights"),
    )


def test_model_digest_is_the_model_not_the_bytes(exports):
    digest = serving_baseline.model_digest
    candidate, same = _serving(exports.candidate), _serving(exports.same)
    # Two exports of one model: saved_model.pb differs (functions are named by process-wide
    # counters), the digest does not.
    assert (
        Path(candidate, "saved_model.pb").read_bytes() != Path(same, "saved_model.pb").read_bytes()
    )
    assert digest(candidate) == digest(same) is not None
    assert digest(_serving(exports.relabelled)) != digest(candidate)  # the graph differs
    assert digest(_serving(exports.retrained)) != digest(candidate)  # the weights differ
    assert digest(str(Path(candidate).parent)) is None  # no SavedModel there


def _serve_and_push(tmp_path: Path, served: standard_artifacts.Model, candidate):
    """`served` as version 1 under a Pusher base folder, then ServingBaseline and our Pusher's
    executor on a blessed `candidate`: (baseline output, pushed_model output, versions)."""
    from tfx import v1 as tfx
    from tfx.utils import io_utils, proto_utils

    base = tmp_path / "serving" / "cls"
    io_utils.copy_dir(_serving(served), str(base / "1"))
    baseline = standard_artifacts.Model()
    baseline.uri = str(tmp_path / "baseline_model")
    serving_baseline.Executor().Do(
        {"model": [candidate]}, {"baseline_model": [baseline]}, {"serving_model_dir": str(base)}
    )
    model_blessing = standard_artifacts.ModelBlessing()
    model_blessing.uri = str(tmp_path / "blessing")
    model_blessing.set_int_custom_property("blessed", 1)
    pushed_model = standard_artifacts.PushedModel()
    pushed_model.uri = str(tmp_path / "pushed_model")
    destination = tfx.proto.PushDestination(
        filesystem=tfx.proto.PushDestination.Filesystem(base_directory=str(base))
    )
    serving_baseline.PusherExecutor().Do(
        {"model": [candidate], "model_blessing": [model_blessing], "baseline_model": [baseline]},
        {"pushed_model": [pushed_model]},
        {"push_destination": proto_utils.proto_to_json(destination)},
    )
    versions = sorted(p.name for p in base.iterdir())
    return baseline, pushed_model, versions


def test_the_serving_model_is_not_pushed_again(exports, tmp_path):
    baseline, pushed_model, versions = _serve_and_push(tmp_path, exports.same, exports.candidate)
    assert serving_baseline.same_as_serving(baseline)
    assert baseline.get_string_custom_property(serving_baseline.CANDIDATE_DIGEST) == (
        baseline.get_string_custom_property(serving_baseline.BASELINE_DIGEST)
    )
    assert serving_baseline.push_decision({"baseline_model": [baseline]}) == (
        "same model as version 1"
    )
    assert pushed_model.get_int_custom_property("pushed") == 0
    assert pushed_model.get_string_custom_property(serving_baseline.NOT_PUSHED_REASON) == (
        "same model as version 1"
    )
    assert versions == ["1"]  # no new version


@pytest.mark.parametrize("served", ["relabelled", "retrained"])
def test_a_different_model_is_pushed(exports, tmp_path, served):
    baseline, pushed_model, versions = _serve_and_push(
        tmp_path, getattr(exports, served), exports.candidate
    )
    assert not serving_baseline.same_as_serving(baseline)
    assert baseline.get_int_custom_property(serving_baseline.SAME_AS_SERVING) == 0
    assert serving_baseline.push_decision({"baseline_model": [baseline]}) is None
    assert pushed_model.get_int_custom_property("pushed") == 1
    (new,) = [v for v in versions if v != "1"]
    assert pushed_model.get_string_custom_property("pushed_destination") == str(
        tmp_path / "serving" / "cls" / new
    )


def test_nothing_serving_yet_pushes_and_not_blessed_says_so(exports, tmp_path):
    baseline = standard_artifacts.Model()
    baseline.uri = str(tmp_path / "baseline_model")
    serving_baseline.Executor().Do(
        {"model": [exports.candidate]},
        {"baseline_model": [baseline]},
        {"serving_model_dir": str(tmp_path / "nothing")},
    )
    assert not serving_baseline.same_as_serving(baseline)  # its own copy: not "the same"
    assert serving_baseline.push_decision({"baseline_model": [baseline]}) is None
    blessing_artifact = standard_artifacts.ModelBlessing()
    blessing_artifact.set_int_custom_property("blessed", 0)
    pushed_model = standard_artifacts.PushedModel()
    pushed_model.uri = str(tmp_path / "pushed_model")
    serving_baseline.PusherExecutor().Do(
        {"model": [exports.candidate], "model_blessing": [blessing_artifact]},
        {"pushed_model": [pushed_model]},
        {"push_destination": "{}"},
    )
    assert pushed_model.get_int_custom_property("pushed") == 0
    assert pushed_model.get_string_custom_property(serving_baseline.NOT_PUSHED_REASON) == (
        "the model was not blessed"
    )
    from tfx_pipeline import metadata

    assert metadata.NOT_PUSHED_REASON == serving_baseline.NOT_PUSHED_REASON
    assert metadata.METRICS_FILE == blessing.METRICS_FILE


def test_pipelines_push_through_our_pusher_and_fine_tune_for_epochs():
    for name, tfx_pipeline in _pipelines().items():
        components = {c.id: c for c in tfx_pipeline.components}
        pusher = components["Pusher"]
        assert isinstance(pusher, serving_baseline.Pusher), name
        assert (
            pusher.inputs["baseline_model"]
            is components["ServingBaseline"].outputs["baseline_model"]
        )
        assert pusher.inputs["infra_blessing"] is components["ServingCheck"].outputs["blessing"]
        trainer = components["Trainer"]
        train_args = json.loads(trainer.exec_properties["train_args"])
        config = json.loads(trainer.exec_properties["custom_config"])
        if name == "pretrain":
            assert int(train_args["num_steps"]) == 10_000
        else:  # num_steps 0: the run_fn trains num_train_epochs epochs
            assert int(train_args.get("num_steps", 0)) == 0
            assert config["num_train_epochs"] == 3.0
