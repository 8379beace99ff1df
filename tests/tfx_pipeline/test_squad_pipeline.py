"""The SQuAD pipeline end to end on the local runner (tiny windows, few steps) and its Kubeflow
V2 compilation.

The hand-made SQuAD v1.1 file (29 questions on 10 Wikipedia-style paragraphs) is both the train
and the dev file: MiniLM warm-started and fine-tuned for a few dozen steps learns to answer the
questions it saw, which is enough to show that the windows, the training, the export and the
evaluator's official scoring line up. Windows of 64 tokens with a stride of 24 cut every
context into several windows.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from bert_tf.tasks import squad
from tfx_pipeline import run

# A fixture runs a whole pipeline (10-15 min on a loaded 2-core machine): more than pytest's
# default 900 s per test, which covers fixture setup.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

TESTDATA = Path(__file__).parent.parent / "testdata"
MODEL_NAME = "squad"
# This run (2026-11-29, 60 steps) scored EM 65.5 / F1 73.0 on the 29 questions (loss 3.4 -> 1.0);
# the gate keeps a margin for other machines' float differences.
MIN_F1 = 50.0
COMPONENTS = {
    "SquadExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "pretrained_checkpoint_importer",
    "Tuner",
    "Trainer",
    "ServingBaseline",
    "SquadEvaluator",
    "ServingCheck",
    "Pusher",
}


@pytest.fixture(scope="module")
def squad_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("squad_data")
    shutil.copy(TESTDATA / "squad_v1.1.json", data / "train-v1.1.json")
    shutil.copy(TESTDATA / "squad_v1.1.json", data / "dev-v1.1.json")
    return data


# Appended to the README's command (the last value of a flag wins): tiny windows, few steps.
TINY_FLAGS = [
    "--max_seq_length=64",
    "--doc_stride=24",
    "--max_query_length=24",
    "--train_batch_size=16",
    "--learning_rate=1e-4",
    "--iterations_per_loop=20",
    "--train_steps=60",
    f"--min_f1={MIN_F1}",
    "--max_f1_decrease=1.0",
]


def pipeline_args(data: Path, root: Path, minilm_dir: Path, pipeline_helpers) -> list[str]:
    """The README's squad command as it runs here: squad/ is `data`, runs/tfx_squad is
    `<root>/pipeline` (ML Metadata in it), runs/serving is `<root>/serving`; tiny flags."""
    paths = {"squad": data, "runs/tfx_squad": root / "pipeline", "runs/serving": root / "serving"}
    return [*pipeline_helpers.readme_pipeline_args("squad", paths, minilm_dir), *TINY_FLAGS]


@pytest.fixture(scope="module")
def squad_run(tmp_path_factory, squad_data, minilm_dir, pipeline_helpers) -> Path:
    root = tmp_path_factory.mktemp("squad")
    pipeline_helpers.run_in_process(
        run,
        *pipeline_args(squad_data, root, minilm_dir, pipeline_helpers),
        # The Tuner tries 1e-9 and 1e-4 (each 60 steps); the Trainer trains with the better.
        *pipeline_helpers.tune_flags,
        "--tune_num_train_epochs=1",
    )
    return root


def test_the_tuner_chose_the_better_learning_rate_and_the_trainer_used_it(
    squad_run, pipeline_helpers
):
    """--tune: each trial's export answers the dev questions (official F1), the learning rate
    that trains is chosen and the Trainer trains with it."""
    pipeline_helpers.check_local_tuning(squad_run / "pipeline")


def test_squad_components_all_succeeded(squad_run, pipeline_helpers):
    (states,) = pipeline_helpers.node_states(squad_run / "pipeline" / "metadata.sqlite")
    assert {n: states.get(n) for n in COMPONENTS} == dict.fromkeys(COMPONENTS, "COMPLETE")
    # The Pusher pushed with ServingCheck's blessing: its warmup request (question, context)
    # answered over gRPC and REST as the export in-process.
    infra = pipeline_helpers.pusher_infra_blessing(squad_run / "pipeline" / "metadata.sqlite")
    assert infra.custom_properties["blessed"].int_value == 1
    assert infra.custom_properties["requests_checked"].int_value == 2


def test_example_gen_writes_doc_stride_windows(squad_run, squad_data, pipeline_helpers):
    pipeline = squad_run / "pipeline"
    read_examples, values = pipeline_helpers.read_examples, pipeline_helpers.values
    windows = read_examples(pipeline / "SquadExampleGen/examples/*/Split-train/*")
    questions = read_examples(pipeline / "SquadExampleGen/examples/*/Split-eval/*")
    dataset = squad.read_squad_json(squad_data / "dev-v1.1.json")
    qas = list(squad.iter_questions(dataset))
    assert [values(q, "id")[0].decode() for q in questions] == [qa["id"] for qa in qas]
    # Several 64-token windows per question (contexts are 50-100 tokens long); the answer lies
    # in at least one window of each question.
    assert len(windows) > 2 * len(qas)
    starts = [values(w, "start_positions")[0] for w in windows]
    assert sum(s > 0 for s in starts) >= len(qas)
    for window in windows:
        assert len(values(window, "input_word_ids")) == len(values(window, "input_mask")) == 64


def test_evaluator_scores_the_pushed_model_like_the_official_script(
    squad_run, squad_data, official_squad, pipeline_helpers
):
    (report_file,) = (squad_run / "pipeline/SquadEvaluator/evaluation").glob("*/metrics.json")
    report = json.loads(report_file.read_text(encoding="utf-8"))

    # The pushed model, TF Serving's <serving_model_dir>/<model_name>/<version>/ layout.
    model_dir = pipeline_helpers.pushed_model(squad_run / "serving" / MODEL_NAME)
    assert Path(model_dir).name.isdigit()

    dataset = squad.read_squad_json(squad_data / "dev-v1.1.json")
    questions, contexts, ids = [], [], []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                ids.append(qa["id"])
                questions.append(qa["question"])
                contexts.append(paragraph["context"])
    # The pushed SavedModel alone, in a fresh Python, raw text in.
    answers = pipeline_helpers.serve_in_fresh_process(
        model_dir,
        f"""
        serve = signatures["serving_default"]
        out = serve(question=tf.constant({questions!r}), context=tf.constant({contexts!r}))
        print(json.dumps([a.decode() for a in out["answer_text"].numpy()]))
        """,
    )
    predictions = dict(zip(ids, answers, strict=True))
    assert report["predictions"] == predictions
    expected = squad.squad_v1_metrics(dataset, predictions)
    assert report["candidate"] == pytest.approx(expected)
    scores = official_squad[0].evaluate(dataset, predictions)
    assert expected["exact_match"] == pytest.approx(100 * scores["exact_match"])
    assert expected["f1"] == pytest.approx(100 * scores["final_f1"])

    # Blessed on the F1 threshold, with no baseline yet (first run: nothing served, so
    # ServingBaseline's output is the candidate's copy and the comparison is skipped). The
    # data's own baseline, each context's first word (1: the median answer length), scores 0
    # here: --min_f1 is the threshold.
    assert report["candidate"]["f1"] >= MIN_F1
    assert report["data_baselines"] == {"f1": 0.0}
    assert report["baseline_predictors"] == {
        "f1": "the context's first word (the median answer length)"
    }
    assert report["thresholds"] == {"f1": MIN_F1}
    assert report["min_f1"] == MIN_F1 and report["baseline"] is None
    assert report["baseline_model"] == "no model serving yet: baseline comparison skipped"
    assert report["blessed"] and not report["failures"]
    assert pipeline_helpers.blessings(squad_run / "pipeline" / "metadata.sqlite") == [1]


def test_run_summary_names_the_verdict_and_the_push(squad_run, pipeline_helpers):
    """The end-of-run summary (in the run's log file, as on the console), from ML Metadata."""
    (log_file,) = (squad_run / "pipeline" / "logs").glob("run-*.log")
    text = log_file.read_text()
    summary = text[text.rindex("\nbert-squad run ") :]
    for component in COMPONENTS:
        assert re.search(rf"\n  {component} +COMPLETE +[\d.]+ s\n", summary), component
    assert re.search(
        r"\nSquadEvaluator:\n  f1 [\d.]+ \(threshold >= 50; the context's first word \(the "
        r"median answer length\) scores 0\)\n",
        summary,
    )
    assert "\n  no model serving yet: baseline comparison skipped\n" in summary
    assert "\nblessed: yes\n" in summary
    pushed = pipeline_helpers.pushed_model(squad_run / "serving" / MODEL_NAME)
    assert f"\npushed: {pushed}\n" in summary


def test_a_worse_squad_model_is_rejected_against_the_serving_one(
    squad_run, squad_data, tmp_path, minilm_dir, pipeline_helpers
):
    """The SQuAD evaluator's comparison in a real second run: a copy of the first run's
    serving folder, a new pipeline root, and a Trainer that barely moves MiniLM and the new
    span head (one step at a learning rate of 1e-9). With no F1 minimum and the data baseline
    loosened out of the way (its margin -100 points), only the comparison against the serving
    model (scored on the same questions) can reject it, and it does: not blessed, not pushed,
    the serving version untouched."""
    serving = tmp_path / "serving"
    shutil.copytree(squad_run / "serving", serving)
    served = pipeline_helpers.pushed_model(serving / MODEL_NAME)
    root = tmp_path  # <root>/serving is the copy, <root>/pipeline the new pipeline root
    pipeline_helpers.run_in_process(
        run,
        *pipeline_args(squad_data, root, minilm_dir, pipeline_helpers),
        "--beam_pipeline_args=--direct_running_mode=in_memory,--direct_num_workers=1",
        "--train_steps=1",
        "--learning_rate=1e-9",
        "--min_f1=0",
        "--min_baseline_gain=-100",
    )
    assert pipeline_helpers.blessings(root / "pipeline" / "metadata.sqlite") == [0]
    assert pipeline_helpers.pushed_model(serving / MODEL_NAME) == served
    (report_file,) = (root / "pipeline/SquadEvaluator/evaluation").glob("*/metrics.json")
    report = json.loads(report_file.read_text(encoding="utf-8"))
    assert report["baseline_model"]["version"] == int(Path(served).name)
    assert report["baseline"]["f1"] >= MIN_F1 > report["candidate"]["f1"] + 1.0
    assert not report["blessed"]
    assert [f.split(" is more than ")[0].split()[0] for f in report["failures"]] == ["f1"]
    assert "below the baseline's" in report["failures"][0]


def test_kubeflow_runner_compiles_the_squad_pipeline(
    tmp_path, squad_data, minilm_dir, pipeline_helpers
):
    spec, images = pipeline_helpers.compile_for_kubeflow(
        [
            *pipeline_args(squad_data, tmp_path, minilm_dir, pipeline_helpers),
            *pipeline_helpers.tune_flags,
            "--tune_num_train_epochs=1",
        ],
        tmp_path,
        "registry.example.com/bert-tfx:test",
    )
    assert spec.pipeline_info.name == "bert-squad"
    assert set(spec.root.dag.tasks) >= COMPONENTS
    assert images == {"registry.example.com/bert-tfx:test"}


def test_evaluator_blessing_rules_against_the_baseline():
    from tfx_pipeline.components.blessing import validate

    def squad(candidate, baseline):
        return validate(candidate, baseline, {"f1": 50.0}, max_decrease=1.0, digits=2)

    assert squad({"f1": 70.0}, None) == []
    assert squad({"f1": 70.0}, {"f1": 70.9}) == []
    assert squad({"f1": 70.0}, {"f1": 71.5}) == [
        "f1 70.00 is more than 1.0 below the baseline's 71.50"
    ]
    assert squad({"f1": 40.0}, None) == ["f1 40.00 < threshold 50.00"]
    # Every named metric is checked (the pretraining evaluator's two accuracies).
    minimums = {"masked_lm_accuracy": 0.05, "next_sentence_accuracy": 0.5}
    candidate = {"masked_lm_accuracy": 0.06, "next_sentence_accuracy": 0.45}
    baseline = {"masked_lm_accuracy": 0.08, "next_sentence_accuracy": 0.4}
    assert validate(candidate, baseline, minimums, max_decrease=0.01) == [
        "next_sentence_accuracy 0.4500 < threshold 0.5000",
        "masked_lm_accuracy 0.0600 is more than 0.01 below the baseline's 0.0800",
    ]
