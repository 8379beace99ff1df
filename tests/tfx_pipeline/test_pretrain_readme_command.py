"""The README's pretrain command as shown (a tiny BERT from scratch, its defaults) on a user's
own corpus (40 Wikipedia articles): it must beat the eval split's constant predictor and be
pushed. Then the same command with fewer steps is killed in its Trainer and rerun: it completes
from ML Metadata's cache, and its worse model is rejected.

A file of its own (not test_pipelines.py's): `make test` hands whole files to its workers, and
the two files' pipeline runs take about the same time.
"""

import glob
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from ml_metadata.proto import metadata_store_pb2

from bert_tf.data import corpora
from tfx_pipeline import configs, run

# Each fixture runs a whole pipeline (5-10 min on a loaded 2-core machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# The README's pretrain command (tiny preset from scratch, 300 steps, its defaults otherwise)
# on the first 40 sentences of the first 40 articles.
README_ARTICLES, README_SENTENCES = 40, 40


class ReadmeRun(NamedTuple):
    args: list[str]
    pipeline_root: Path
    metadata: Path
    model_base_path: Path
    output_dir: Path
    # Read right after the run: the other test runs the pipeline again (tests run in any order).
    blessings: list[int]
    report: dict


@pytest.fixture(scope="module")
def readme_pretrain(tmp_path_factory, gensim_dir, minilm_dir, pipeline_helpers) -> ReadmeRun:
    """The README's pretrain command as shown (corpus/ is 40 Wikipedia articles, runs/tfx and
    runs/serving the test's folders), Beam in this process."""
    root = tmp_path_factory.mktemp("readme_pretrain")
    documents = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))
    corpora.write_documents(
        [d[:README_SENTENCES] for d in documents[:README_ARTICLES]], root / "corpus" / "wiki.txt"
    )
    paths = {"corpus": root / "corpus", "runs/tfx": root / "tfx", "runs/serving": root / "serving"}
    args = [*pipeline_helpers.readme_pipeline_args("pretrain", paths, minilm_dir)]
    pipeline_helpers.run_in_process(run, *args)
    names = [a.partition("=")[2] for a in args if a.startswith("--model_name=")]
    model_name = names[-1] if names else "bert"  # tfx_pipeline.run's default
    (report,) = glob.glob(str(root / "tfx" / "PretrainingEvaluator/evaluation/*/*.json"))
    return ReadmeRun(
        args,
        root / "tfx",
        root / "tfx" / "metadata.sqlite",
        root / "serving" / model_name,
        root,
        pipeline_helpers.blessings(root / "tfx" / "metadata.sqlite"),
        json.loads(Path(report).read_text()),
    )


def test_readme_pretrain_command_from_scratch_beats_the_constant_predictor(
    readme_pretrain, pipeline_helpers
):
    """Its defaults learn: the tiny preset's learning rate (configs.PRETRAINING_LEARNING_RATES)
    beats the eval split's constant predictor by the default margin, and it is pushed."""
    assert not any(a.startswith("--learning_rate") for a in readme_pretrain.args)
    assert readme_pretrain.blessings == [1]
    report = readme_pretrain.report
    mlm = report["candidate"]["masked_lm_accuracy"]
    constant = report["data_baselines"]["masked_lm_accuracy"]
    assert mlm >= constant + configs.PretrainingOptions().min_masked_lm_gain, report
    assert report["starting_checkpoint"] is None  # from scratch
    pipeline_helpers.pushed_model(readme_pretrain.model_base_path)


def test_pipeline_killed_in_the_trainer_then_rerun_completes_from_cache(
    readme_pretrain, pipeline_helpers
):
    """Pipeline faults: the README's pretrain command with fewer training steps (so the Trainer
    runs again) is killed (SIGKILL to its process group) as soon as the new Trainer's training loop
    has started; the same command run again completes, reusing ExampleGen..Transform from ML
    Metadata, and ML Metadata stays consistent: the killed execution blocks nothing and its
    outputs feed nothing. The rerun's model (40 steps: the constant predictor) is worse than
    the one serving (the README command's 300 steps): the evaluator rejects it on both of its gates (the
    margin over the eval split's constant predictor, and the comparison with the served
    model); nothing is pushed."""
    args = [
        *(f for f in readme_pretrain.args if not f.startswith("--train_steps")),
        "--train_steps=40",
        "--iterations_per_loop=20",
    ]
    command = [sys.executable, "-m", "tfx_pipeline.run", *args]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    trainer_runs = readme_pretrain.pipeline_root / "Trainer" / "model_run"
    before = set(trainer_runs.iterdir())
    versions = readme_pretrain.model_base_path / "*" / "saved_model.pb"
    pushed_before = set(glob.glob(str(versions)))
    log = readme_pretrain.output_dir / "killed_run.log"
    with open(log, "w") as output:
        killed = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 1200
        # Killed at a named point, not after a guessed delay: the new Trainer's TensorBoard file
        # appears when its training loop starts (its one checkpoint is written at the end).
        while not any(
            list(d.glob("events.out.tfevents.*")) for d in set(trainer_runs.iterdir()) - before
        ):
            assert killed.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the Trainer did not start in 20 minutes"
            time.sleep(0.05)
        os.killpg(killed.pid, signal.SIGKILL)  # the runner and any Beam worker it started
        assert killed.wait() == -signal.SIGKILL, "the pipeline ended before it was killed"
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
    with sqlite3.connect(readme_pretrain.metadata) as db:  # SQLite's own check
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    states = pipeline_helpers.node_states(readme_pretrain.metadata)[-1]
    assert states["Trainer"] == "RUNNING"  # the executor died with the process
    assert "PretrainingEvaluator" not in states and "Pusher" not in states

    # Within the module's 2,400 s with the killed run's 1,200: the rerun trains 40 steps.
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1000)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    killed_run, completed_run = pipeline_helpers.executions(readme_pretrain.metadata)[-2:]
    assert metadata_store_pb2.Execution.State.Name(killed_run["Trainer"].last_known_state) in (
        "RUNNING",
        "FAILED",
        "CANCELED",
    )
    before_trainer = (
        "PretrainingExampleGen",
        "StatisticsGen",
        "SchemaGen",
        "ExampleValidator",
        "Transform",
    )
    from_trainer = ("Trainer", "ServingBaseline", "PretrainingEvaluator", "ServingCheck", "Pusher")
    states = pipeline_helpers.node_states(readme_pretrain.metadata)[-1]
    assert {n: states.get(n) for n in before_trainer} == dict.fromkeys(before_trainer, "CACHED")
    assert {n: states.get(n) for n in from_trainer} == dict.fromkeys(from_trainer, "COMPLETE")
    # The evaluator judged the rerun Trainer's model, never the killed one's outputs, and
    # those were never published as LIVE artifacts.
    store = pipeline_helpers.metadata(readme_pretrain.metadata)
    events = store.get_events_by_execution_ids(
        [killed_run["Trainer"].id, completed_run["PretrainingEvaluator"].id]
    )
    killed_outputs = {
        e.artifact_id
        for e in events
        if e.execution_id == killed_run["Trainer"].id
        and e.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.PENDING_OUTPUT)
    }
    evaluated = {
        e.artifact_id
        for e in events
        if e.execution_id == completed_run["PretrainingEvaluator"].id
        and e.type == metadata_store_pb2.Event.INPUT
        and e.path.steps[0].key == "model"
    }
    assert evaluated and not evaluated & killed_outputs
    for artifact in store.get_artifacts_by_id(list(killed_outputs)):
        assert artifact.state != metadata_store_pb2.Artifact.LIVE, artifact
    # Nothing of the killed run reached the serving folder, nor the rejected rerun's model.
    assert pipeline_helpers.blessings(readme_pretrain.metadata)[-1] == 0
    assert set(glob.glob(str(versions))) == pushed_before

    # The new model was judged against the version serving now, the first run's push.
    (served,) = pushed_before
    served_version = int(Path(served).parent.name)
    baseline_events = store.get_events_by_execution_ids([completed_run["ServingBaseline"].id])
    (baseline,) = store.get_artifacts_by_id(
        [e.artifact_id for e in baseline_events if e.type == metadata_store_pb2.Event.OUTPUT]
    )
    assert baseline.custom_properties["is_candidate"].int_value == 0
    assert baseline.custom_properties["baseline_version"].int_value == served_version
    evaluation_events = store.get_events_by_execution_ids(
        [completed_run["PretrainingEvaluator"].id]
    )
    (evaluation,) = store.get_artifacts_by_id(
        [
            e.artifact_id
            for e in evaluation_events
            if e.type == metadata_store_pb2.Event.OUTPUT and e.path.steps[0].key == "evaluation"
        ]
    )
    report = json.loads((Path(evaluation.uri) / "metrics.json").read_text())
    assert report["baseline_model"]["version"] == served_version
    assert not report["blessed"]
    # Each gate rejects it on masked-LM accuracy: below the constant predictor plus the margin,
    # and more than max_decrease below the served model's score on the same examples.
    mlm = report["candidate"]["masked_lm_accuracy"]
    threshold = report["thresholds"]["masked_lm_accuracy"]
    served_mlm = report["baseline"]["masked_lm_accuracy"]
    assert mlm < threshold and mlm < served_mlm - configs.PretrainingOptions().max_decrease
    assert f"masked_lm_accuracy {mlm:.4f} < threshold {threshold:.4f}" in report["failures"]
    assert any(
        f.startswith("masked_lm_accuracy ") and f.endswith(f"below the baseline's {served_mlm:.4f}")
        for f in report["failures"]
    )
