"""The evaluators' baseline is the model serving now (`ServingBaseline`), with no MLMD resolver;
the custom evaluators' blessings name the models as TFX's Evaluator does, on Kubeflow V2 too.

No pipeline run here: executors are called directly (and through TFX's Kubeflow V2 container
entrypoint), and the three pipelines are only compiled.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils, standard_artifacts

from tfx_pipeline import configs, pipeline
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
    # Imported directly: tfx.v1 hides it without the full kfp SDK (see run.py).
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
]


class _Answerer(tf.Module):
    """A stand-in for the exported SQuAD model: its answer is the context's first word, or
    `constant` for every question."""

    def __init__(self, constant: str = ""):
        super().__init__()
        self.constant = constant

    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)]
    )
    def serve(self, question, context):
        first = tf.strings.split(context).to_tensor("")[:, 0]
        if self.constant:
            first = tf.fill(tf.shape(question), self.constant)
        return {"answer_text": first}


def _squad_model(uri: Path, constant: str = "") -> standard_artifacts.Model:
    model = standard_artifacts.Model()
    model.uri = str(uri)
    answerer = _Answerer(constant)
    tf.saved_model.save(
        answerer, str(uri / "Format-Serving"), signatures={"serving_default": answerer.serve}
    )
    return model


@pytest.fixture(scope="module")
def squad_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_eval")
    examples = standard_artifacts.Examples()
    examples.uri = str(root / "examples")
    examples.split_names = artifact_utils.encode_split_names(["eval"])
    split = root / "examples" / "Split-eval"
    split.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(split / "data.gz"), options="GZIP") as writer:
        for qas_id, question, context, answers in QUESTIONS:

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
    good = _squad_model(root / "good")  # F1 100
    bad = _squad_model(root / "bad", constant="nothing")  # F1 0
    return SimpleNamespace(root=root, examples=examples, good=good, bad=bad)


EXEC_PROPERTIES = {
    "eval_split": "eval",
    "min_f1": 50.0,
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


def _squad_report(outputs) -> dict:
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
    report = _squad_report(outputs)
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
    report = _squad_report(outputs)
    assert report["baseline"] is None
    assert report["baseline_model"] == blessing.NO_BASELINE
    assert report["blessed"] and report["candidate"]["f1"] == 100.0
    properties = outputs["blessing"][0].mlmd_artifact.custom_properties
    assert properties["current_model_id"].int_value == 11
    assert "baseline_model_id" not in properties and "baseline_model" not in properties


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


def test_pretraining_gate_is_relative_to_the_datas_constant_predictor(tmp_path):
    """The blessing thresholds are the eval split's constant-predictor scores plus a margin: a
    model that always answers the most frequent token and the majority class, or an untrained
    one, is not blessed; one that beats both baselines by the margin is."""
    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertPretrainer
    from tfx_pipeline.modules.pretraining import KERAS_MODEL_FILE

    rng = np.random.default_rng(1)
    n, seq, pred = 40, 12, 3
    # "the" (id 6) is 3 in 5 weighted masked positions (padding positions weigh 0), and 7 in
    # 10 pairs are "random next" (label 1).
    ids = np.full((n, pred), 9, np.int32)  # the last position: padding, never counted
    ids[:, :2] = np.array([6, 6, 6, 7, 8] * 16).reshape(n, 2)
    weights = np.ones((n, pred), np.float32)
    weights[:, 2] = 0.0
    features = {
        "input_word_ids": rng.integers(5, len(VOCAB), (n, seq)).astype(np.int32),
        "input_mask": np.ones((n, seq), np.int32),
        "input_type_ids": np.zeros((n, seq), np.int32),
        "masked_lm_positions": rng.integers(1, seq, (n, pred)).astype(np.int32),
        "masked_lm_ids": ids,
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([1] * 28 + [0] * 12, np.int32),
    }
    dataset = tf.data.Dataset.from_tensor_slices(features).batch(16)
    data = pretraining_evaluator.data_baselines(dataset)
    assert data == pytest.approx({"masked_lm_accuracy": 0.6, "next_sentence_accuracy": 0.7})

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
    keras.utils.set_random_seed(5)
    model = BertPretrainer(build_encoder(testing.micro_config(vocab_size=len(VOCAB))))
    model({k: features[k][:1] for k in ("input_word_ids", "input_mask", "input_type_ids",
                                        "masked_lm_positions")})  # fmt: skip
    untrained = tmp_path / "untrained"
    (untrained / "Format-TFMA").mkdir(parents=True)
    model.save(str(untrained / "Format-TFMA" / KERAS_MODEL_FILE))
    scores = pretraining_evaluator.evaluate_pretrainer(str(untrained), dataset)
    assert blessing.validate(scores, None, minimums, 0.0) != []


# --- TFMA's Evaluator on ServingBaseline's output ----------------------------------------------


@pytest.fixture(scope="module")
def regression_inputs(tmp_path_factory):
    """A tiny STS-B-style regressor's export (as a Trainer's Model) and its eval examples."""
    import tensorflow_text  # noqa: F401  (the exported tokenizer's ops)

    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier
    from bert_tf.text.tokenization import BertPreprocessor
    from serving.export_lib import export_classifier
    from tfx_pipeline import trainer_lib

    root = tmp_path_factory.mktemp("tfma_eval")
    keras.utils.set_random_seed(5)
    config = testing.micro_config(vocab_size=len(VOCAB))
    model = standard_artifacts.Model()
    model.uri = str(root / "trainer_model")
    trainer_lib.export_serving_model(
        export_classifier,
        str(root / "trainer_model" / "Format-Serving"),
        BertClassifier(build_encoder(config), 1),
        BertPreprocessor(VOCAB, seq_length=12),
        regression=True,
    )
    examples = standard_artifacts.Examples()
    examples.uri = str(root / "examples")
    examples.split_names = artifact_utils.encode_split_names(["eval"])
    (root / "examples" / "Split-eval").mkdir(parents=True)
    rng = np.random.default_rng(1)
    words = VOCAB[6:]
    with tf.io.TFRecordWriter(
        str(root / "examples" / "Split-eval" / "data.gz"), options="GZIP"
    ) as writer:
        for _ in range(16):
            feature = {
                "text_a": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[" ".join(rng.choice(words, 4)).encode()])
                ),
                "text_b": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[" ".join(rng.choice(words, 3)).encode()])
                ),
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[rng.random() * 5])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )
    return SimpleNamespace(root=root, model=model, examples=examples)


@pytest.mark.parametrize("nothing_serving", [True, False])
def test_tfma_evaluator_compares_with_the_served_model_only(
    regression_inputs, tmp_path, nothing_serving
):
    """The same candidate and thresholds, with a change threshold no model can meet against
    itself (Pearson at least 1.5 above the baseline's): judged against a served model (here its
    own copy) it fails; with ServingBaseline's "nothing serving yet" copy TFMA rubber-stamps the
    change threshold and blesses on the value threshold alone."""
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import proto_utils

    served = tmp_path / "serving" / "sts"
    if not nothing_serving:
        served.mkdir(parents=True)
        tf.io.gfile.rename(
            str(Path(regression_inputs.model.uri) / "Format-Serving"), str(served / "1")
        )
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
            tf.io.gfile.rename(
                str(served / "1"), str(Path(regression_inputs.model.uri) / "Format-Serving")
            )
    assert serving_baseline.is_candidate(output) == nothing_serving
    regression_inputs.model.id, output.id = 21, 22
    eval_config = pipeline.classification_eval_config(
        configs.ClassificationOptions(task_name="sts-b", min_metric=-1.0, max_decrease=-1.5), []
    )
    outputs = _outputs(tmp_path)
    tfma_evaluator.Executor(base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[])).Do(
        {
            "examples": [regression_inputs.examples],
            "model": [regression_inputs.model],
            "baseline_model": [output],
        },
        outputs,
        {"eval_config": proto_utils.proto_to_json(eval_config), "example_splits": '["eval"]'},
    )
    properties = outputs["blessing"][0].mlmd_artifact.custom_properties
    assert properties["current_model_id"].int_value == 21
    assert properties["blessed"].int_value == int(nothing_serving)
    if nothing_serving:
        assert "baseline_model_id" not in properties
    else:
        assert properties["baseline_model_id"].int_value == 22


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
