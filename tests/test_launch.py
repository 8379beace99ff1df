"""bert_tf.launch: multi-worker training on loopback, fail-fast, resume after a killed worker;
run_pretraining and run_classifier with multi_worker_mirrored.

Equivalence: 2 workers (one replica each) with global batch 8 compute each step's gradient as
the mean of two 4-example halves, summed across workers. The single-worker run with the same
global batch, seed and split is one device with `--gradient_accumulation_steps=2`; with dropout
off and every record holding the same number of masked-LM predictions (so each half's weighted
mean loss is its share of the global one) the two are the same computation, and they agree to
float rounding. Measured (tiny model, lr 5e-3, 40 steps, killed and resumed): losses equal to
7 digits, weights within 3e-7. Tolerances: 1e-5. (Against one device on the unsplit batch of 8,
summation order alone drifts the loss by 1.6e-3 relative and the weights by 4e-3 after 40 Adam
steps, and so does the accumulation run; Keras' clipping of each replica's partial gradient,
which `Trainer` replaces, moved the loss by 2.2%.)
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import launch, run_classifier, run_pretraining, training
from bert_tf.data import corpora

SEQ, PRED, BATCH, STEPS = 32, 5, 8, 40
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-5
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="module")
def data_dir(tiny_pretraining_data):
    data = tiny_pretraining_data(
        documents=3,
        dupe_factor=2,
        max_seq_length=SEQ,
        max_predictions_per_seq=PRED,
        config="no_dropout",
    )
    weights = [
        sum(tf.train.Example.FromString(r).features.feature["masked_lm_weights"].float_list.value)
        for r in tf.data.TFRecordDataset(str(data.input_file)).as_numpy_iterator()
    ]
    # The equivalence premise (see the module docstring).
    assert len(weights) >= 4 * BATCH and set(weights) == {PRED}
    return data


def _flags(data_dir, output_dir: Path, **overrides) -> list[str]:
    values = {
        "train_batch_size": BATCH,
        "learning_rate": 5e-3,
        "num_train_steps": STEPS,
        "num_warmup_steps": 5,
        "save_checkpoints_steps": 10,
        "log_steps": 10,
        "iterations_per_loop": 5,
        **overrides,
    }
    return data_dir.argv(output_dir, **values)


def _launch_command(data_dir: Path, output_dir: Path, **overrides) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bert_tf.launch",
        "--num_workers=2",
        "--",
        "bert_tf.run_pretraining",
        *_flags(data_dir, output_dir, distribution_strategy="multi_worker_mirrored", **overrides),
    ]


def _history(output_dir: Path) -> list[dict]:
    return json.loads((output_dir / training.LOG_FILE).read_text())["history"]


def _model_weights(checkpoint: Path) -> dict[str, np.ndarray]:
    """The model's trainable variables, by checkpoint key (the optimizer tracks them all)."""
    reader = tf.train.load_checkpoint(str(checkpoint))
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(str(checkpoint))
        if name.startswith("optimizer/_trainable_variables/")
    }


def test_worker_command_and_tf_config():
    assert launch.worker_command(["bert_tf.run_pretraining", "--x=1"]) == [
        sys.executable,
        "-m",
        "bert_tf.run_pretraining",
        "--x=1",
    ]
    assert launch.worker_command(["train.py"])[1:] == ["train.py"]
    with pytest.raises(ValueError, match="expected the script after '--'"):
        launch.worker_command([])
    config = json.loads(launch.tf_config(["127.0.0.1:1", "127.0.0.1:2"], 1))
    assert config == {
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        "task": {"type": "worker", "index": 1},
    }


def test_a_failing_worker_stops_the_others_at_once(tmp_path):
    """No TensorFlow: worker 1 fails at once, worker 0 would sleep for a minute."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import json, os, sys, time\n"
        "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
        "print('hello from', index, flush=True)\n"
        "if index == 1:\n"
        "    sys.exit(3)\n"
        "time.sleep(3600)\n"
    )
    # Worker 0 sleeps an hour: the run ends within the timeout only if the launcher stops it
    # (a deadline, not a speed assertion).
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.launch", "--num_workers=2", "--", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 3, result.stdout
    assert "[worker 0] hello from 0" in result.stdout
    assert "[worker 1] hello from 1" in result.stdout
    assert "[launch] worker 1 exited with status 3: stopping the other workers" in result.stdout


def test_a_port_taken_before_a_worker_binds_it_means_new_ports(tmp_path, monkeypatch, capfd):
    """The race between picking a free port and the worker binding it, made to happen: worker
    0's first port is already bound by another socket. TensorFlow's worker fails to start its
    gRPC server; the launcher starts both workers again on new ports, and their all-reduce
    runs."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import tensorflow as tf\n"
        "strategy = tf.distribute.MultiWorkerMirroredStrategy()\n"
        "total = strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None)\n"
        "print('replicas summed:', float(total), flush=True)\n"
    )
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    picks = iter([port])
    real_free_port = launch.free_port
    monkeypatch.setattr(launch, "free_port", lambda host: next(picks, None) or real_free_port(host))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        cluster = launch.Cluster(launch.worker_command([str(script)]), num_workers=2)
        code = cluster.wait()
    finally:
        taken.close()
    out = capfd.readouterr().out
    assert code == 0, out
    assert cluster.restarts == 1
    assert f"worker 0 could not bind 127.0.0.1:{port}" in out
    assert "starting the workers again on new ports (1/3)" in out
    assert out.count("replicas summed: 2.0") == 2, out


class _Output:
    """Collects a process's output lines in the background."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process):
        for line in process.stdout:
            self.lines.append(line)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)

    def worker_pid(self, index: int) -> int | None:
        pattern = re.compile(rf"\[launch\] worker {index}: pid (\d+)")
        return next((int(m[1]) for line in self.lines if (m := pattern.search(line))), None)


@pytest.mark.slow
def test_kill_9_fails_fast_then_the_rerun_resumes_and_matches_one_worker(
    data_dir, tmp_path, run_main
):
    """2 workers; kill -9 of worker 1 after the first checkpoint; the launcher stops at once;
    the same command resumes and finishes; the chief's result equals the one-worker run's."""
    reference = tmp_path / "one_worker"
    run_main(run_pretraining, *_flags(data_dir, reference, gradient_accumulation_steps=2))
    output_dir = tmp_path / "two_workers"
    command = _launch_command(data_dir, output_dir)

    first = subprocess.Popen(
        command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output = _Output(first)
    state = output_dir / "checkpoint"
    deadline = time.monotonic() + 600
    killed_at = None
    while first.poll() is None and time.monotonic() < deadline:
        pid = output.worker_pid(1)
        if pid and state.exists() and "ckpt-10" in state.read_text():
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            break
        time.sleep(0.05)
    try:
        # Worker 0 would wait for worker 1 in its collectives forever: ending within the
        # timeout means the launcher stopped it.
        code = first.wait(timeout=300)
    finally:
        first.kill()
    log = output.text()
    assert killed_at is not None, f"training ended before it could be killed:\n{log[-3000:]}"
    assert code != 0, log[-3000:]
    assert "[launch] worker 1 killed by SIGKILL: stopping the other workers" in log
    assert not (output_dir / f"ckpt-{STEPS}.index").exists()

    second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-5000:]
    for worker in (0, 1):
        assert re.search(rf"\[worker {worker}\] .*resumed from .*ckpt-\d+ at step", second.stdout)
        assert re.search(rf"\[worker {worker}\] .*step {STEPS}/{STEPS}: loss", second.stdout)
    assert "[launch] all workers finished" in second.stdout
    # Only the chief wrote checkpoints and logs, all into output_dir.
    saved = [line for line in second.stdout.splitlines() if re.search(r"\] saved /", line)]
    assert saved and all(line.startswith("[worker 0] ") for line in saved), saved

    ours, theirs = _history(output_dir), _history(reference)
    assert [e["step"] for e in ours] == [e["step"] for e in theirs] == [10, 20, 30, 40]
    for mine, one in zip(ours, theirs, strict=True):
        assert mine["loss"] == pytest.approx(one["loss"], rel=LOSS_RTOL), (mine, one)
        assert mine["masked_lm_accuracy"] == pytest.approx(one["masked_lm_accuracy"], rel=1e-6)
    weights = _model_weights(output_dir / f"ckpt-{STEPS}")
    expected = _model_weights(reference / f"ckpt-{STEPS}")
    assert weights.keys() == expected.keys() and len(weights) > 30
    for name, value in weights.items():
        np.testing.assert_allclose(value, expected[name], rtol=0, atol=WEIGHT_ATOL, err_msg=name)


@pytest.fixture(scope="module")
def polarity_dir(tmp_path_factory, gensim_dir) -> Path:
    """Generic-format TSVs: train 96 / dev 32 labelled polarity sentences."""
    examples = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    random.Random(0).shuffle(examples)
    folder = tmp_path_factory.mktemp("polarity")
    for name, part in (("train", examples[:96]), ("dev", examples[96:128])):
        lines = [f"{text}\t{['neg', 'pos'][label]}\n" for text, label in part]
        (folder / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(lines))
    return folder


@pytest.mark.slow
def test_run_classifier_on_two_workers_matches_one_worker(
    polarity_dir, data_dir, minilm_dir, tmp_path, run_main
):
    """run_classifier with multi_worker_mirrored on 2 launched workers: both train and evaluate;
    the chief's checkpoint, log and eval results equal the one-worker run's (same global batch,
    split in two by accumulation; the per-example mean loss makes the halves exact shares)."""
    values = {
        "task_name": "text_classification",
        "data_dir": polarity_dir,
        "vocab_file": minilm_dir / "vocab.txt",
        "bert_config_file": data_dir.config_file,  # the same tiny model
        "max_seq_length": SEQ,
        "train_batch_size": BATCH,
        "num_train_epochs": 1,  # 12 steps
        "learning_rate": 5e-3,
        "save_checkpoints_steps": 6,
        "log_steps": 6,
        "iterations_per_loop": 3,
        "seed": 1,
    }

    def flags_for(output_dir: Path, **overrides) -> list[str]:
        items = {**values, "output_dir": output_dir, **overrides}.items()
        return [f"--{k}={v}" for k, v in items] + ["--do_train", "--do_eval"]

    reference = tmp_path / "one_worker"
    run_main(run_classifier, *flags_for(reference, gradient_accumulation_steps=2))
    output_dir = tmp_path / "two_workers"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.launch",
            "--num_workers=2",
            "--",
            "bert_tf.run_classifier",
            *flags_for(output_dir, distribution_strategy="multi_worker_mirrored"),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-5000:]
    assert "[launch] all workers finished" in result.stdout
    for worker in (0, 1):
        assert re.search(rf"\[worker {worker}\] .*step 12/12: loss", result.stdout)
        assert re.search(rf"\[worker {worker}\] .*eval eval_accuracy = ", result.stdout)
    ours, theirs = _history(output_dir), _history(reference)
    assert [e["step"] for e in ours] == [e["step"] for e in theirs] == [6, 12]
    for mine, one in zip(ours, theirs, strict=True):
        assert mine["loss"] == pytest.approx(one["loss"], rel=LOSS_RTOL), (mine, one)
    eval_ours, eval_theirs = (
        dict(line.split(" = ") for line in (d / "eval_results.txt").read_text().splitlines())
        for d in (output_dir, reference)
    )
    assert eval_ours.keys() == eval_theirs.keys() == {"eval_accuracy", "eval_loss", "global_step"}
    for key, value in eval_ours.items():
        assert float(value) == pytest.approx(float(eval_theirs[key]), rel=LOSS_RTOL), key
    weights = _model_weights(output_dir / "ckpt-12")
    expected = _model_weights(reference / "ckpt-12")
    assert weights.keys() == expected.keys() and len(weights) > 20
    for name, value in weights.items():
        np.testing.assert_allclose(value, expected[name], rtol=0, atol=WEIGHT_ATOL, err_msg=name)
