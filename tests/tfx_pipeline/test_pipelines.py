"""The TFX pipelines end to end on the local runner (tiny data, few steps) and Kubeflow V2
compilation.

`make demo` runs as it does (`demo.run`) at a small size (10 Wikipedia articles, 40 steps of
continued pretraining from all-MiniLM-L6-v2, 2000 review snippets to fine-tune on): it starts
`python -m tfx_pipeline.run` for the pretraining and the classification pipelines, then one
model server with both pushed models; the asserts read those runs' files and ML Metadata, and a
second run of the demo's two pipeline commands is all cache (the README's pretrain command is
test_pretrain_readme_command.py's).
The fine-tuning pipeline runs the README's classify command in this process (the SQuAD one is
test_squad_pipeline.py's), folders mapped and tiny-size flags appended. One pipeline run per fixture, shared by the asserts. No --beam_pipeline_args: on data this small
the default runs Beam in this process.
"""

import ast
import contextlib
import glob
import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import fetch
from bert_tf.tasks import glue
from bert_tf.text.masking import restore_original_ids
from bert_tf.text.tokenization import BertPreprocessor, SpecialTokenIds, load_vocab
from demo import run as demo
from tfx_pipeline import configs, run

# A fixture runs a whole pipeline (10-15 min on a loaded 2-core machine): more than pytest's
# default 900 s per test, which covers fixture setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# The demo's pipeline options; the Transform checks use its sequence sizes.
SEQ = configs.DEMO_PRETRAINING.max_seq_length
PRED = configs.DEMO_PRETRAINING.max_predictions_per_seq
# `make demo` at a small size: the first 50 sentences of the first 10 Wikipedia articles, 40
# steps of continued pretraining, 2000 / 200 review snippets (the demo's 63 fine-tuning steps:
# 20 leave MiniLM at the majority class), no MiniLM check (step 2). Its
# evaluators' thresholds are the defaults, against the eval splits' constant predictors.
DEMO_TRAIN_STEPS = 40
DEMO_FLAGS = (
    "--nominilm",
    "--max_documents=10",
    "--max_sentences_per_document=50",
    f"--train_steps={DEMO_TRAIN_STEPS}",
    "--classify_train_examples=2000",
    "--classify_dev_examples=200",
)
# Fine-tuning gate: above chance (0.5, balanced classes); this run scored 0.67 on the 60 dev
# sentences (F1 0.67, MCC 0.33; 2026-11-29). 60 sentences cannot tell a model that learned from
# one at chance (which passes 0.6 about 8% of the time): that the Trainer learns is shown on its
# training batches here (MIN_TRAIN_ACCURACY over the last 160 examples; chance reaches it with
# probability < 1e-12) and on 1,000 held-out sentences by
# tests/test_run_classifier.py::test_fine_tuning_learns_chinese_review_sentiment.
MIN_DEV_ACCURACY = 0.6
MIN_TRAIN_ACCURACY = 0.8
# Fine-tuning trains epochs (the default is 3): this many make the 60 steps the gate was set on.
CLASSIFY_EPOCHS = 6.857
CLASSIFY_MODEL = "cls"  # the README command's --model_name
NO_BASELINE = "no model serving yet: baseline comparison skipped"  # blessing.NO_BASELINE
PRETRAIN_COMPONENTS = {
    "PretrainingExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "Transform",
    "Trainer",
    "ServingBaseline",
    "PretrainingEvaluator",
    "ServingCheck",
    "Pusher",
}
CLASSIFY_COMPONENTS = {
    "TextClassificationExampleGen",
    "UnlabelledExampleGen",
    "BulkInferrer",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "Transform",
    "Tuner",
    "Trainer",
    "ServingBaseline",
    "Evaluator",
    "ServingCheck",
    "Pusher",
}


def vocab_file() -> str:
    return str(fetch.path("minilm", "vocab.txt"))


# --- pretraining: `make demo` ----------------------------------------------------------------


class DemoRun(NamedTuple):
    output_dir: Path
    printed: str  # what the demo printed
    pipeline_args: list[str]  # the demo's `python -m tfx_pipeline.run --pipeline=pretrain` flags
    classify_args: list[str]  # its `--pipeline=classify` flags
    pipeline_root: Path
    metadata: Path
    model_base_path: Path  # the Pusher's <serving_model_dir>/<model_name>
    classifier_base_path: Path


@pytest.fixture(scope="module")
def pretrain(tmp_path_factory, minilm_dir, pipeline_helpers) -> DemoRun:
    """`python -m demo.run` at a small size (its pipelines and model server are subprocesses)."""
    output_dir = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            pipeline_helpers.run_in_process(demo, f"--output_dir={output_dir}", *DEMO_FLAGS)
    except SystemExit as e:
        pytest.fail(f"the demo failed: {e}\n{printed.getvalue()[-5000:]}")
    tfx_dir, serving_dir = output_dir / "tfx", output_dir / "serving"
    precision = demo.precision_flags("auto")
    return DemoRun(
        output_dir,
        printed.getvalue(),
        demo.pipeline_args(
            output_dir / "corpus", tfx_dir, serving_dir, DEMO_TRAIN_STEPS, minilm_dir, precision
        ),
        demo.classify_args(
            output_dir / "reviews", output_dir / "tfx_classify", serving_dir, minilm_dir, precision
        ),
        tfx_dir,
        tfx_dir / "metadata.sqlite",
        serving_dir / demo.MODEL_NAME,
        serving_dir / demo.CLASSIFIER_NAME,
    )


@pytest.fixture(scope="module")
def pretrain_rerun(pretrain, pipeline_helpers) -> DemoRun:
    """The demo's two pipeline commands again (what a second `make demo` runs): same inputs,
    same roots."""
    pipeline_helpers.run_in_process(run, *pretrain.pipeline_args)
    pipeline_helpers.run_in_process(run, *pretrain.classify_args)
    return pretrain


def test_pretraining_components_all_succeeded(pretrain, pipeline_helpers):
    first_run = pipeline_helpers.node_states(pretrain.metadata)[0]
    assert {n: first_run.get(n) for n in PRETRAIN_COMPONENTS} == dict.fromkeys(
        PRETRAIN_COMPONENTS, "COMPLETE"
    )


def test_transform_writes_masked_pretraining_features(pretrain, pipeline_helpers):
    special = SpecialTokenIds.from_vocab(load_vocab(vocab_file()))
    examples = pipeline_helpers.read_examples(
        str(pretrain.pipeline_root / "Transform/transformed_examples/*/Split-train/*")
    )
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
    values = pipeline_helpers.values
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


def test_transform_ids_equal_the_serving_preprocessor_ids(pretrain, pipeline_helpers):
    """No train/serve skew: the exported model tokenizes with the same BertPreprocessor."""
    import tensorflow_transform as tft

    root = pretrain.pipeline_root
    raw = pipeline_helpers.read_examples(
        str(root / "PretrainingExampleGen/examples/*/Split-eval/*")
    )[:16]
    graph = glob.glob(str(root / "Transform/transform_graph/*"))[0]
    output = tft.TFTransformOutput(graph)
    records = tf.constant([e.SerializeToString() for e in raw])
    transformed = output.transform_features_layer()(
        tf.io.parse_example(records, output.raw_feature_spec())
    )
    preprocessor = BertPreprocessor(vocab_file(), seq_length=SEQ)
    expected = preprocessor(
        (
            tf.constant([pipeline_helpers.values(e, "text_a")[0] for e in raw]),
            tf.constant([pipeline_helpers.values(e, "text_b")[0] for e in raw]),
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


def test_pretraining_evaluator_blessed_the_model(pretrain, pipeline_helpers):
    """Continued pretraining from all-MiniLM-L6-v2 beats the eval split's constant predictor
    and the starting checkpoint (its fresh heads) after the test's 40 steps."""
    assert pipeline_helpers.blessings(pretrain.metadata)[0] == 1
    (report,) = glob.glob(str(pretrain.pipeline_root / "PretrainingEvaluator/evaluation/*/*.json"))
    report = json.loads(Path(report).read_text())
    assert report["blessed"] and not report["failures"]
    # The default thresholds: the eval split's constant predictors plus the default margins.
    gains = {
        "masked_lm_accuracy": configs.PretrainingOptions().min_masked_lm_gain,
        "next_sentence_accuracy": configs.PretrainingOptions().min_next_sentence_gain,
    }
    assert report["gains"] == gains and gains["masked_lm_accuracy"] >= 0.01
    for name, value in report["data_baselines"].items():
        assert 0.0 < value < 1.0, name
        assert report["thresholds"][name] == pytest.approx(value + gains[name])
        assert report["candidate"][name] >= report["thresholds"][name], name
    # The starting checkpoint, scored with fresh heads, knows no masked token yet.
    assert report["init_checkpoint"] == str(fetch.fetch("minilm"))
    starting = report["starting_checkpoint"]["masked_lm_accuracy"]
    assert starting < report["data_baselines"]["masked_lm_accuracy"]
    assert report["candidate"]["masked_lm_accuracy"] > starting + 0.03
    # First run: nothing served yet, so ServingBaseline's output is the candidate's copy and
    # the comparison is skipped.
    assert report["baseline"] is None
    assert report["baseline_model"] == NO_BASELINE


def test_demo_reports_the_runs_from_ml_metadata(pretrain, pipeline_helpers):
    """Steps 4 and 5 report ML Metadata's record of each run; the summary names files that
    exist."""
    out = pretrain.printed
    assert f"[2/{demo.STEPS}] all-MiniLM-L6-v2 check skipped (--nominilm)" in out
    corpus = (pretrain.output_dir / "corpus" / "wiki.txt").read_text().splitlines()
    assert f"10 articles, {sum(bool(line) for line in corpus)} sentences" in out
    assert "Rotten Tomatoes: 2000 train / 200 dev snippets" in out
    for args in (pretrain.pipeline_args, pretrain.classify_args):
        assert "$ python -m tfx_pipeline.run " + " \\\n          ".join(args) in out
    for component in PRETRAIN_COMPONENTS:  # progress shown while the pipeline ran
        assert f"Component {component} is finished." in out, component
    # tfx_pipeline.summary's report of the run (the pipeline's own end-of-run summary).
    report = out[out.index("      bert-pretraining run ") :]
    states = dict(re.findall(r"\n {8}(\w+) +([A-Z]+) +[\d.]+ s", report))
    assert {n: states.get(n) for n in PRETRAIN_COMPONENTS} == dict.fromkeys(
        PRETRAIN_COMPONENTS, "COMPLETE"
    )
    assert re.search(
        r"\n {8}masked_lm_accuracy [\d.]+ \(threshold >= 0\.\d+; always \"[^\"]+\" \(the most "
        r"frequent masked token\) scores 0\.\d+; the starting checkpoint 0\.?\d*\)",
        report,
    )
    assert "\n      blessed: yes\n" in report
    pushed = pipeline_helpers.pushed_model(pretrain.model_base_path)
    assert f"\n      pushed: {pushed}\n" in report
    classify = out[out.index("      bert-classification run ") :]
    assert re.search(
        r"\n {8}sparse_categorical_accuracy [\d.]+ \(threshold >= 0\.\d+; always "
        r"\"(fresh|rotten)\" \(the majority class\) scores 0\.\d+\)",
        classify,
    )
    assert "\n      blessed: yes\n" in classify
    pushed_classifier = pipeline_helpers.pushed_model(pretrain.classifier_base_path)
    summary = out[out.index("where everything went:") :]
    listed = dict(re.findall(r"\n      (\S+(?: \S+)*?)\s{2,}(\S+)", summary))
    assert listed["pushed model"] == pushed
    assert listed["pushed classifier"] == pushed_classifier
    for what in (
        "corpus",
        "reviews",
        "pipeline root",
        "classify root",
        "ML Metadata",
        "pipeline log",
        "classify log",
        "models.config",
        "model server log",
    ):
        assert Path(listed[what]).exists(), what


def demo_grpc_answers(printed: str) -> dict:
    """The fill_mask, encode and classify answers the demo printed (from the model server)."""
    fill_mask = []
    for line in re.findall(r"\n +-> (.*)", printed):
        guesses = re.findall(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*") ([01]\.\d{3})""", line)
        fill_mask.append([(ast.literal_eval(t), float(p)) for t, p in guesses])
    encode = [
        (int(tokens), [float(x) for x in head.split(", ")])
        for tokens, head in re.findall(r": (\d+) tokens, pooled_output \[(.*), \.\.\.\]", printed)
    ]
    classify = [
        [
            {label: float(p) for label, p in re.findall(r"(\w+) ([01]\.\d{3})", side)}
            for side in line.split(" | ")
        ]
        for line in re.findall(r"\n +=> (.*)", printed)
    ]
    return {"fill_mask": fill_mask, "encode": encode, "classify": classify}


def test_demo_answers_equal_the_pushed_models_in_a_fresh_process(pretrain, pipeline_helpers):
    """Step 6: one model server with both pushed models answered fill_mask (top 5 per [MASK])
    and encode over gRPC, and classified new reviews over gRPC and REST; the printed answers
    equal the SavedModels' own in a fresh process."""
    out = pretrain.printed
    for name, base in (
        (demo.MODEL_NAME, pretrain.model_base_path),
        (demo.CLASSIFIER_NAME, pretrain.classifier_base_path),
    ):
        version = int(Path(pipeline_helpers.pushed_model(base)).name)
        assert f"{name}: GetModelStatus: versions [{version}]; GetModelMetadata: " in out
    n, hidden = len(demo.ENCODE_TEXTS), 384  # all-MiniLM-L6-v2's width
    assert f"Predict serving_default (encode): input_mask [{n}, {SEQ}], " in out
    assert f"pooled_output [{n}, {hidden}], sequence_output [{n}, {SEQ}, {hidden}]" in out
    assert "model server stopped (SIGTERM, exit code 0)" in out
    answers = demo_grpc_answers(out)

    expected = pipeline_helpers.serve_in_fresh_process(
        pipeline_helpers.pushed_model(pretrain.model_base_path),
        f"""
        masked = signatures["fill_mask"](
            text=tf.constant({demo.FILL_MASK_TEXTS!r}), top_k=tf.constant(5))
        out = signatures["serving_default"](text=tf.constant({demo.ENCODE_TEXTS!r}))
        print(json.dumps({{
            "tokens": [[t.decode() for t in row[0]] for row in masked["top_k_tokens"].numpy()],
            "probabilities": masked["top_k_probabilities"].numpy()[:, 0].tolist(),
            "mask": out["input_mask"].numpy().sum(axis=1).tolist(),
            "pooled": out["pooled_output"].numpy()[:, :4].tolist()}}))
        """,
    )
    assert len(answers["fill_mask"]) == len(demo.FILL_MASK_TEXTS)  # one [MASK] per text
    for guesses, tokens, probabilities in zip(
        answers["fill_mask"], expected["tokens"], expected["probabilities"], strict=True
    ):
        assert [t for t, _ in guesses] == tokens
        np.testing.assert_allclose([p for _, p in guesses], probabilities, atol=6e-4)
        assert probabilities == sorted(probabilities, reverse=True)
    assert [tokens for tokens, _ in answers["encode"]] == expected["mask"]
    np.testing.assert_allclose(
        [head for _, head in answers["encode"]], expected["pooled"], atol=6e-4
    )

    # The classifier: label names and probabilities, the same over gRPC and REST, equal to
    # its serving_default's in a fresh process.
    classifier = pipeline_helpers.serve_in_fresh_process(
        pipeline_helpers.pushed_model(pretrain.classifier_base_path),
        f"""
        out = signatures["classify"](inputs=tf.constant([
            tf.train.Example(features=tf.train.Features(feature={{"text_a": tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[t.encode()]))}})).SerializeToString()
            for t in {demo.CLASSIFY_TEXTS!r}]))
        print(json.dumps([dict(zip([c.decode() for c in classes], scores.tolist()))
                          for classes, scores in zip(out["classes"].numpy(),
                                                     out["scores"].numpy())]))
        """,
    )
    assert len(answers["classify"]) == len(demo.CLASSIFY_TEXTS)
    for (by_grpc, by_rest), want in zip(answers["classify"], classifier, strict=True):
        assert set(want) == {"fresh", "rotten"}
        assert by_grpc.keys() == by_rest.keys() == want.keys()
        for label, p in want.items():
            assert by_grpc[label] == pytest.approx(p, abs=6e-4)
            assert by_rest[label] == pytest.approx(p, abs=6e-4)


def test_second_run_reuses_cached_components(pretrain_rerun, pipeline_helpers):
    """Same inputs, same model: every component is cached, ServingBaseline too (its input is
    the cached candidate), so the evaluator's verdict stands and nothing is pushed again."""
    _, second = pipeline_helpers.node_states(pretrain_rerun.metadata)
    assert {n: second.get(n) for n in PRETRAIN_COMPONENTS} == dict.fromkeys(
        PRETRAIN_COMPONENTS, "CACHED"
    )
    assert pipeline_helpers.blessings(pretrain_rerun.metadata) == [1]
    pipeline_helpers.pushed_model(pretrain_rerun.model_base_path)  # still one version
    # The fine-tuning pipeline too: nothing trained, evaluated or pushed again.
    classify_metadata = pretrain_rerun.output_dir / "tfx_classify" / "metadata.sqlite"
    _, second = pipeline_helpers.node_states(classify_metadata)
    # (the checkpoint importer records an execution that finds its artifact again)
    assert {state for node, state in second.items() if "importer" not in node} == {"CACHED"}
    pipeline_helpers.pushed_model(pretrain_rerun.classifier_base_path)


def test_kubeflow_runner_writes_a_pipeline_spec(tmp_path, pretrain, pipeline_helpers):
    spec, images = pipeline_helpers.compile_for_kubeflow(
        [
            f
            for f in pretrain.pipeline_args
            if not f.startswith(("--pipeline_root", "--metadata_path"))
        ],
        tmp_path,
        "registry.example.com/bert-tfx:test",
    )
    assert spec.pipeline_info.name == "bert-pretraining"
    assert set(spec.root.dag.tasks) >= PRETRAIN_COMPONENTS
    assert images == {"registry.example.com/bert-tfx:test"}


# --- fine-tuning ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def classify(tmp_path_factory, gensim_dir, minilm_dir, pipeline_helpers):
    """The README's classify command (data/ is gensim's Pang & Lee polarity sample: 200
    sentences, 140 train, 60 dev; runs/tfx_cls is <root>/pipeline, ML Metadata in it;
    runs/serving is <root>/serving; $M is all-MiniLM-L6-v2), tiny flags appended."""
    root = tmp_path_factory.mktemp("classify")
    pipeline_helpers.write_polarity_task(gensim_dir, root / "polarity")
    pipeline_helpers.run_in_process(
        run,
        *_classify_args(root, root / "pipeline", root / "serving", minilm_dir, pipeline_helpers),
        # The Tuner tries 1e-9 and 1e-4; the Trainer trains with the better, 60 steps:
        # ceil(6.857 x 140 / 16).
        *pipeline_helpers.tune_flags,
        f"--tune_num_train_epochs={CLASSIFY_EPOCHS}",
        f"--min_metric={MIN_DEV_ACCURACY}",
        "--bulk_inference",
    )
    return root


def _classify_args(root, pipeline_root, serving, minilm_dir, pipeline_helpers) -> list[str]:
    """The README's classify command on root/polarity, with the tests' tiny flags."""
    paths = {"data": root / "polarity", "runs/tfx_cls": pipeline_root, "runs/serving": serving}
    return [
        *pipeline_helpers.readme_pipeline_args("classify", paths, minilm_dir),
        f"--max_seq_length={SEQ}",
        "--train_batch_size=16",
        "--iterations_per_loop=10",
    ]


def test_classification_components_all_succeeded(classify, pipeline_helpers):
    first_run = pipeline_helpers.node_states(classify / "pipeline" / "metadata.sqlite")[0]
    assert {n: first_run.get(n) for n in CLASSIFY_COMPONENTS} == dict.fromkeys(
        CLASSIFY_COMPONENTS, "COMPLETE"
    )


def test_classification_run_log_and_summary(classify, pipeline_helpers):
    """The run's full log went to <pipeline_root>/logs/ (with the progress lines and the
    summary the console showed); the Trainer counted its steps from the epochs."""
    (log_file,) = glob.glob(str(classify / "pipeline" / "logs" / "run-*.log"))
    text = Path(log_file).read_text()
    assert f"full log: {log_file}\n" in text
    assert (
        f"training steps: 60 = ceil({CLASSIFY_EPOCHS} epochs x 140 training examples / "
        "batch size 16)"
    ) in text
    assert re.search(r"\n\[\d+:\d\d, [\d.]+ s\] Component Trainer is finished\.\n", text)
    summary = text[text.rindex("\nbert-classification run ") :]
    for component in CLASSIFY_COMPONENTS:
        assert re.search(rf"\n  {component} +COMPLETE +[\d.]+ s\n", summary), component
    # The threshold is --min_metric, above the dev file's majority class (30 of 60) + 0.01.
    assert re.search(
        r"\nEvaluator:\n  sparse_categorical_accuracy [\d.]+ \(threshold >= 0.6; always \"neg\" "
        r"\(the majority class\) scores 0.5\)\n",
        summary,
    )
    assert "class 1" not in summary and 'f1_score ("pos")' in summary
    assert "\nblessed: yes\n" in summary
    pushed = pipeline_helpers.pushed_model(classify / "serving" / CLASSIFY_MODEL)
    assert f"\npushed: {pushed}\nfull log: {log_file}\n" in summary


def test_the_pusher_pushed_what_the_serving_check_served(classify, pipeline_helpers):
    """ServingCheck served the Trainer's export with the model server (this repo's: no
    tensorflow_model_server here) and its two warmup requests, over gRPC and REST, answered as
    the export in-process; the Pusher consumed that InfraBlessing and pushed."""
    infra = pipeline_helpers.pusher_infra_blessing(classify / "pipeline" / "metadata.sqlite")
    properties = {k: v.int_value or v.string_value for k, v in infra.custom_properties.items()}
    assert properties["blessed"] == 1, properties
    assert properties["requests_checked"] == 4 and properties["model_server"] == "serving.server"
    assert sorted(os.listdir(infra.uri)) == ["INFRA_BLESSED", "model_server.log"]
    pipeline_helpers.pushed_model(classify / "serving" / CLASSIFY_MODEL)


def dev_examples(root) -> list:
    return glue.get_processor("text_classification").get_dev_examples(root / "polarity")


@pytest.fixture(scope="module")
def dev_predictions(classify, pipeline_helpers) -> dict:
    """The pushed classifier's `serving_default` answers for the dev sentences, raw text in,
    in a fresh process: `probabilities` [60, 2], `labels` (label names) and the signature's
    `inputs` (single-sentence data: `text_a` alone)."""
    texts = [e.text_a for e in dev_examples(classify)]
    return pipeline_helpers.serve_in_fresh_process(
        pipeline_helpers.pushed_model(classify / "serving" / CLASSIFY_MODEL),
        f"""
        serve = signatures["serving_default"]
        out = serve(text_a=tf.constant({texts!r}))
        print(json.dumps({{"probabilities": out["probabilities"].numpy().tolist(),
                          "labels": [l.decode() for l in out["label"].numpy()],
                          "inputs": sorted(serve.structured_input_signature[1])}}))
        """,
    )


def test_pushed_classifier_answers_raw_text_in_a_fresh_process(dev_predictions):
    assert dev_predictions["inputs"] == ["text_a"]  # trained on single sentences
    probabilities = np.array(dev_predictions["probabilities"])
    assert probabilities.shape == (60, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    # Class 1 is "pos" (the label order F1/MCC's class 1 refers to).
    assert dev_predictions["labels"] == [["neg", "pos"][i] for i in probabilities.argmax(axis=1)]


def test_bulk_inferrer_scores_the_unlabelled_file_like_the_pushed_model(
    classify, dev_predictions, pipeline_helpers
):
    """BulkInferrer's output examples: each test.tsv sentence with the blessed model's class
    names and probabilities, equal to the pushed SavedModel's on the same raw text."""
    texts = [e.text_a for e in dev_examples(classify)]
    pipeline_helpers.check_scored_examples(
        classify / "pipeline/BulkInferrer/output_examples/*/Split-test/*.gz",
        dict(zip(texts, dev_predictions["probabilities"], strict=True)),
    )


def test_the_tuner_chose_the_better_learning_rate_and_the_trainer_used_it(
    classify, pipeline_helpers
):
    """--tune with two learning rates: both tried on the dev sentences (accuracy), the one that
    trains is chosen, and the Trainer trains with it."""
    pipeline_helpers.check_local_tuning(classify / "pipeline")


def test_the_pipelines_trainer_learned(classify):
    """The Trainer's log: its loss fell, and it fits its training batches far beyond chance."""
    (log_file,) = glob.glob(str(classify / "pipeline/Trainer/model_run/*/training_log.json"))
    history = json.loads(Path(log_file).read_text())["history"]
    assert [entry["step"] for entry in history] == list(range(10, 61, 10))
    assert history[-1]["loss"] < 0.5 * history[0]["loss"], history
    assert history[-1]["accuracy"] >= MIN_TRAIN_ACCURACY, history


def test_tfma_metrics_blessed_the_classifier(classify, dev_predictions, pipeline_helpers):
    import tensorflow_model_analysis as tfma
    from sklearn import metrics

    assert pipeline_helpers.blessings(classify / "pipeline" / "metadata.sqlite") == [1]
    (evaluation,) = glob.glob(str(classify / "pipeline/Evaluator/evaluation/*"))
    values_by_name = {
        kv.key.name: kv.value.double_value.value
        for m in tfma.load_metrics(evaluation)
        for kv in m.metric_keys_and_values
    }
    # The task's official metric (accuracy) and, as it has two classes, F1 and MCC of class 1
    # ("pos"): TFMA's numbers on the exported `classify` signature equal sklearn's on the pushed
    # model's `serving_default` predictions.
    labels = [e.label == "pos" for e in dev_examples(classify)]
    predicted = [label == "pos" for label in dev_predictions["labels"]]
    expected = {
        "sparse_categorical_accuracy": metrics.accuracy_score(labels, predicted),
        "f1_score": metrics.f1_score(labels, predicted),
        "matthews_correlation_coefficient": metrics.matthews_corrcoef(labels, predicted),
    }
    assert values_by_name["example_count"] == 60
    for name, value in expected.items():
        assert values_by_name[name] == pytest.approx(value, abs=1e-4), name
    assert values_by_name["sparse_categorical_accuracy"] >= MIN_DEV_ACCURACY

    # The blessing is TFMA's validation of the threshold on the main metric (accuracy): the
    # evaluation's config holds it, and it was checked on the one (overall) slice.
    config = tfma.load_eval_result(evaluation).config
    thresholds = {
        m.class_name: m.threshold
        for spec in config.metrics_specs
        for m in spec.metrics
        if m.HasField("threshold")
    }
    assert list(thresholds) == ["SparseCategoricalAccuracy"]
    assert thresholds["SparseCategoricalAccuracy"].value_threshold.lower_bound.value == (
        pytest.approx(MIN_DEV_ACCURACY)
    )
    validation = tfma.load_validation_result(evaluation)
    assert validation.validation_ok
    assert [d.num_matching_slices for d in validation.validation_details.slicing_details] == [1]


def test_data_with_anomalies_stops_at_the_example_validator(
    classify, tmp_path, minilm_dir, pipeline_helpers
):
    """New data checked against the first run's schema (--schema_dir: ImportSchemaGen pins
    SchemaGen's output): an unseen label ("neutral", every tenth row of both splits) stops the
    run at ExampleValidator with a one-line error naming it; nothing after it runs, nothing is
    pushed."""
    (schema_dir,) = glob.glob(str(classify / "pipeline/SchemaGen/schema/*"))
    data = tmp_path / "polarity"
    data.mkdir()
    for name in ("train", "dev"):
        header, *rows = (classify / "polarity" / f"{name}.tsv").read_text().splitlines()
        rows = [r if i % 10 else r.rsplit("\t", 1)[0] + "\tneutral" for i, r in enumerate(rows)]
        (data / f"{name}.tsv").write_text("\n".join([header, *rows]) + "\n")
    pipeline_root, serving = tmp_path / "pipeline", tmp_path / "serving"
    with pytest.raises(SystemExit) as exited:
        pipeline_helpers.run_in_process(
            run,
            *_classify_args(tmp_path, pipeline_root, serving, minilm_dir, pipeline_helpers),
            f"--schema_dir={schema_dir}",
        )
    message = str(exited.value.code)
    assert message.startswith("error: ExampleValidator: 2 anomalies against the schema, the run")
    assert "\n" not in message
    for split in ("train", "eval"):
        assert f"split '{split}', feature 'label': Non-boolean values" in message
    states = pipeline_helpers.node_states(pipeline_root / "metadata.sqlite")[-1]
    assert states["ImportSchemaGen"] == "COMPLETE" and "SchemaGen" not in states
    assert states["ExampleValidator"] == "FAILED"
    assert not {"Transform", "Trainer", "Evaluator", "Pusher"} & set(states)
    assert not list(serving.glob("*/*/saved_model.pb"))


def test_a_worse_classifier_is_rejected_against_the_serving_one(
    classify, tmp_path, minilm_dir, pipeline_helpers
):
    """TFMA's change threshold in a real second run: a copy of the first run's serving folder,
    a new pipeline root, and a Trainer that barely moves the MiniLM weights and the new head
    (one step at a learning rate of 1e-9, where the first run trained 60 at 1e-4). With no
    absolute minimum and the data baseline loosened out of the way (its margin -1), only the
    comparison against the serving model can reject it, and it does: not blessed, not pushed,
    the serving version untouched. This run uses the other local orchestrator, `--runner=beam`
    (TFX's BeamDagRunner)."""
    import tensorflow_model_analysis as tfma

    serving = tmp_path / "serving"
    shutil.copytree(classify / "serving", serving)
    served = pipeline_helpers.pushed_model(serving / CLASSIFY_MODEL)
    pipeline_root = tmp_path / "pipeline"
    pipeline_helpers.run_in_process(
        run,
        *_classify_args(classify, pipeline_root, serving, minilm_dir, pipeline_helpers),
        "--train_steps=1",
        "--learning_rate=1e-9",
        "--min_metric=0",
        "--min_baseline_gain=-1",
        "--runner=beam",
    )
    (log,) = glob.glob(str(pipeline_root / "logs" / "*.log"))
    assert "beam_dag_runner" in Path(log).read_text()
    assert pipeline_helpers.blessings(pipeline_root / "metadata.sqlite") == [0]
    assert pipeline_helpers.pushed_model(serving / CLASSIFY_MODEL) == served
    (evaluation,) = glob.glob(str(pipeline_root / "Evaluator/evaluation/*"))
    validation = tfma.load_validation_result(evaluation)
    assert not validation.validation_ok
    # The one failure is the main metric's difference against the serving model (a "diff"
    # metric key is how TFMA validates a change threshold).
    failed = [f.metric_key for m in validation.metric_validations_per_slice for f in m.failures]
    assert [(k.name, k.is_diff) for k in failed] == [("sparse_categorical_accuracy", True)]
