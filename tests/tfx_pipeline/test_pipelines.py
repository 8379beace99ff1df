"""The TFX pipelines end to end on the local runner (tiny data, few steps) and Kubeflow V2
compilation.

One pipeline run per fixture, shared by the asserts; the caching run reuses the first run's
pipeline root and ML Metadata. Beam runs in memory here (the default multi-processing mode
would start a worker process per core for each Beam component).
"""

import glob
import itertools
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from bert_tf.data import corpora, fetch
from bert_tf.masking import restore_original_ids
from bert_tf.tokenization import BertPreprocessor, SpecialTokenIds, load_vocab
from tfx_pipeline import run

pytestmark = pytest.mark.slow

SEQ, PRED = 64, 10
BEAM_ARGS = "--beam_pipeline_args=--direct_running_mode=in_memory,--direct_num_workers=1"
PRETRAIN_COMPONENTS = {
    "PretrainingExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "Transform",
    "Trainer",
    "PretrainingEvaluator",
    "Pusher",
}
CLASSIFY_COMPONENTS = {
    "TextClassificationExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "Transform",
    "Trainer",
    "Evaluator",
    "Pusher",
}


def run_cli(*args: str) -> None:
    """`python -m tfx_pipeline.run <args>`, in this process (TFX is imported once)."""
    flag_values = flags.FlagValues()
    run.define_flags(flag_values)
    flag_values(["tfx_pipeline.run", *args])
    saved, run.FLAGS = run.FLAGS, flag_values
    try:
        run.main([])
    finally:
        run.FLAGS = saved


def vocab_file() -> str:
    return str(fetch.path("minilm", "vocab.txt"))


def pipeline_flags(root, pipeline: str, data_root) -> list[str]:
    return [
        f"--pipeline={pipeline}",
        f"--data_root={data_root}",
        f"--pipeline_root={root / 'pipeline'}",
        f"--metadata_path={root / 'metadata.sqlite'}",
        f"--serving_model_dir={root / 'serving'}",
        f"--model_name={pipeline}",
        f"--max_seq_length={SEQ}",
        "--train_batch_size=16",
        "--steps_per_loop=10",
        BEAM_ARGS,
    ]


def node_states(metadata_path) -> list[dict[str, str]]:
    """Per pipeline run, in order: component id -> last known execution state."""
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    store = metadata_store.MetadataStore(config)
    node_type = store.get_context_type("node")
    runs = sorted(
        store.get_contexts_by_type("pipeline_run"), key=lambda c: c.create_time_since_epoch
    )
    states = []
    for run_context in runs:
        run_states = {}
        for execution in store.get_executions_by_context(run_context.id):
            node = next(
                c.name
                for c in store.get_contexts_by_execution(execution.id)
                if c.type_id == node_type.id
            )
            run_states[node.split(".", 1)[1]] = metadata_store_pb2.Execution.State.Name(
                execution.last_known_state
            )
        states.append(run_states)
    return states


def blessings(metadata_path) -> list[int]:
    """`blessed` of every ModelBlessing in ML Metadata, oldest first."""
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    store = metadata_store.MetadataStore(config)
    artifacts = sorted(store.get_artifacts_by_type("ModelBlessing"), key=lambda a: a.id)
    return [a.custom_properties["blessed"].int_value for a in artifacts]


def read_examples(pattern: str) -> list[tf.train.Example]:
    files = sorted(glob.glob(pattern))
    assert files, pattern
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()
    return [tf.train.Example.FromString(r) for r in records]


def values(example, name) -> np.ndarray:
    feature = example.features.feature[name]
    return np.array(getattr(feature, feature.WhichOneof("kind")).value)


def serve_in_fresh_process(model_dir: str, code: str) -> dict:
    """Runs `code` (with `signatures` loaded from model_dir) in a new Python; returns its JSON."""
    script = textwrap.dedent(
        """
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the tokenizer's ops
        signatures = tf.saved_model.load(sys.argv[1]).signatures
        """
    ) + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script, model_dir], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def pushed_model(root, model_name: str) -> str:
    versions = glob.glob(str(root / "serving" / model_name / "*" / "saved_model.pb"))
    assert len(versions) == 1, versions
    return os.path.dirname(versions[0])


# --- pretraining ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrain(tmp_path_factory, gensim_dir):
    """One local run on a few Wikipedia articles (first 25 sentences each); returns the root."""
    root = tmp_path_factory.mktemp("pretrain")
    articles = corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2")
    documents = [article[:25] for article in itertools.islice(articles, 10)]
    corpora.write_documents(documents, root / "corpus" / "wiki.txt")
    flags = [
        *pipeline_flags(root, "pretrain", root / "corpus"),
        "--preset=tiny",
        f"--max_predictions_per_seq={PRED}",
        "--dupe_factor=2",
        "--train_steps=30",
        "--learning_rate=1e-3",
        # Real but reachable for 30 steps of a tiny model: chance is 1/30522 for the masked
        # tokens (a model that learnt the frequent words does far better) and 0.5 for NSP.
        "--min_masked_lm_accuracy=0.03",
        "--min_next_sentence_accuracy=0.3",
    ]
    run_cli(*flags)
    return root, flags


@pytest.fixture(scope="module")
def pretrain_rerun(pretrain):
    """The same run again, same inputs and root."""
    root, flags = pretrain
    run_cli(*flags)
    return root


def test_pretraining_components_all_succeeded(pretrain):
    root, _ = pretrain
    first_run = node_states(root / "metadata.sqlite")[0]
    assert {n: first_run.get(n) for n in PRETRAIN_COMPONENTS} == dict.fromkeys(
        PRETRAIN_COMPONENTS, "COMPLETE"
    )


def test_transform_writes_masked_pretraining_features(pretrain):
    root, _ = pretrain
    special = SpecialTokenIds.from_vocab(load_vocab(vocab_file()))
    examples = read_examples(str(root / "pipeline/Transform/transformed_examples/*/Split-train/*"))
    assert len(examples) > 50
    assert set(examples[0].features.feature) == {
        "input_word_ids",
        "input_mask",
        "input_type_ids",
        "masked_lm_positions",
        "masked_lm_ids",
        "masked_lm_weights",
        "next_sentence_labels",
    }
    chosen = candidates = as_mask = kept = 0
    for example in examples:
        ids, mask = values(example, "input_word_ids"), values(example, "input_mask")
        weights = values(example, "masked_lm_weights")
        assert len(ids) == SEQ and len(weights) == PRED
        n = int(weights.sum())
        positions = values(example, "masked_lm_positions")[:n]
        labels = values(example, "masked_lm_ids")[:n]
        chosen += n
        candidates += int(((ids != special.cls) & (ids != special.sep) & (mask == 1)).sum())
        as_mask += int((ids[positions] == special.mask).sum())
        kept += int((ids[positions] == labels).sum())
        assert not np.isin(labels, [special.cls, special.sep, special.pad]).any()
    # google-research: round(15% of the tokens, [CLS]/[SEP] counted), all non-special.
    assert 0.13 < chosen / candidates < 0.19
    assert abs(as_mask / chosen - 0.8) < 0.05
    assert abs(kept / chosen - 0.1) < 0.04
    labels = [values(e, "next_sentence_labels")[0] for e in examples]
    assert 0.3 < np.mean(labels) < 0.7


def test_transform_ids_equal_the_serving_preprocessor_ids(pretrain):
    """No train/serve skew: the exported model tokenizes with the same BertPreprocessor."""
    import tensorflow_transform as tft

    root, _ = pretrain
    raw = read_examples(str(root / "pipeline/PretrainingExampleGen/examples/*/Split-eval/*"))[:16]
    graph = glob.glob(str(root / "pipeline/Transform/transform_graph/*"))[0]
    output = tft.TFTransformOutput(graph)
    records = tf.constant([e.SerializeToString() for e in raw])
    transformed = output.transform_features_layer()(
        tf.io.parse_example(records, output.raw_feature_spec())
    )
    preprocessor = BertPreprocessor(vocab_file(), seq_length=SEQ)
    expected = preprocessor(
        (
            tf.constant([values(e, "text_a")[0] for e in raw]),
            tf.constant([values(e, "text_b")[0] for e in raw]),
        )
    )
    unmasked = restore_original_ids(
        transformed["input_word_ids"],
        transformed["masked_lm_positions"],
        transformed["masked_lm_ids"],
        transformed["masked_lm_weights"],
    )
    np.testing.assert_array_equal(unmasked, tf.cast(expected["input_word_ids"], tf.int64))
    for name in ("input_mask", "input_type_ids"):
        np.testing.assert_array_equal(transformed[name], tf.cast(expected[name], tf.int64))


def test_pretraining_evaluator_blessed_the_model(pretrain):
    root, _ = pretrain
    assert blessings(root / "metadata.sqlite")[0] == 1
    (report,) = glob.glob(str(root / "pipeline/PretrainingEvaluator/evaluation/*/metrics.json"))
    report = json.loads(Path(report).read_text())
    assert report["blessed"] and not report["failures"]
    assert report["candidate"]["masked_lm_accuracy"] >= 0.03
    assert report["baseline"] is None  # first run: nothing blessed before


def test_pushed_encoder_answers_raw_text_in_a_fresh_process(pretrain):
    root, _ = pretrain
    result = serve_in_fresh_process(
        pushed_model(root, "pretrain"),
        """
        out = signatures["serving_default"](text=tf.constant(["The city lies on a river."]))
        masked = signatures["fill_mask"](
            text=tf.constant(["The city lies on a [MASK]."]), top_k=tf.constant(3))
        print(json.dumps({"pooled": out["pooled_output"].shape.as_list(),
                          "top_k": masked["top_k_tokens"].shape.as_list()}))
        """,
    )
    assert result == {"pooled": [1, 128], "top_k": [1, 1, 3]}


def test_second_run_reuses_cached_components(pretrain_rerun):
    _, second = node_states(pretrain_rerun / "metadata.sqlite")
    cached = {"PretrainingExampleGen", "StatisticsGen", "SchemaGen", "Transform", "Trainer"}
    assert {n: second.get(n) for n in cached} == dict.fromkeys(cached, "CACHED")
    # The resolver now finds the first run's blessed model: the evaluator compares against it
    # (same model, so no decrease) and blesses again.
    assert blessings(pretrain_rerun / "metadata.sqlite") == [1, 1]
    reports = glob.glob(str(pretrain_rerun / "pipeline/PretrainingEvaluator/evaluation/*/*.json"))
    baselines = [json.loads(Path(p).read_text())["baseline"] for p in reports]
    assert sum(b is not None for b in baselines) == 1


def test_kubeflow_runner_writes_a_pipeline_spec(tmp_path, pretrain):
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    _, flags = pretrain
    spec_file = tmp_path / "pretrain.json"
    run_cli(
        *[f for f in flags if not f.startswith(("--pipeline_root", "--metadata_path"))],
        "--runner=kubeflow",
        f"--pipeline_root={tmp_path / 'root'}",
        "--image=registry.example.com/bert-tfx:test",
        f"--output_spec_file={spec_file}",
    )
    job = json.loads(spec_file.read_text())
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    assert spec.pipeline_info.name == "bert-pretraining"
    assert set(spec.root.dag.tasks) >= PRETRAIN_COMPONENTS
    images = {
        executor["container"]["image"]
        for executor in job["pipelineSpec"]["deploymentSpec"]["executors"].values()
        if "container" in executor
    }
    assert images == {"registry.example.com/bert-tfx:test"}


# --- fine-tuning ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classify(tmp_path_factory, gensim_dir, minilm_dir):
    """gensim's Pang & Lee polarity sample (200 sentences: 140 train, 60 dev), fine-tuning
    all-MiniLM-L6-v2."""
    root = tmp_path_factory.mktemp("classify")
    examples = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    random.Random(0).shuffle(examples)
    data = root / "polarity"
    data.mkdir()
    for name, rows in (("train", examples[:140]), ("dev", examples[140:])):
        lines = ["text\tlabel"] + [f"{text}\t{'pos' if label else 'neg'}" for text, label in rows]
        (data / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_cli(
        *pipeline_flags(root, "classify", data),
        "--task_name=text_classification",
        f"--init_checkpoint={minilm_dir}",
        "--train_steps=60",
        "--learning_rate=3e-4",
        # Above chance (0.5, balanced classes); this run scores 0.58 on the 60 dev sentences.
        "--min_accuracy=0.55",
    )
    return root


def test_classification_components_all_succeeded(classify):
    first_run = node_states(classify / "metadata.sqlite")[0]
    assert {n: first_run.get(n) for n in CLASSIFY_COMPONENTS} == dict.fromkeys(
        CLASSIFY_COMPONENTS, "COMPLETE"
    )


def test_tfma_accuracy_blessed_the_classifier(classify):
    import tensorflow_model_analysis as tfma

    assert blessings(classify / "metadata.sqlite") == [1]
    (evaluation,) = glob.glob(str(classify / "pipeline/Evaluator/evaluation/*"))
    metrics = tfma.load_metrics(evaluation)
    values_by_name = {
        kv.key.name: kv.value.double_value.value for m in metrics for kv in m.metric_keys_and_values
    }
    assert values_by_name["sparse_categorical_accuracy"] >= 0.55
    assert values_by_name["example_count"] == 60
    assert tfma.load_validation_result(evaluation).validation_ok


def test_pushed_classifier_answers_raw_text_in_a_fresh_process(classify):
    result = serve_in_fresh_process(
        pushed_model(classify, "classify"),
        """
        out = signatures["serving_default"](
            text_a=tf.constant(["a moving, beautifully acted film.", "dull and lifeless."]),
            text_b=tf.constant(["", ""]))
        print(json.dumps({"labels": [l.decode() for l in out["label"].numpy()],
                          "probabilities": out["probabilities"].shape.as_list()}))
        """,
    )
    assert result["probabilities"] == [2, 2]
    assert set(result["labels"]) <= {"neg", "pos"}
