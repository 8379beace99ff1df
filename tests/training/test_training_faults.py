"""Training faults on run_pretraining: kill -9 at random points, a checkpoint write that
crashes midway, checkpoint files damaged afterwards, and poisoned (NaN) data.

Each ends in a run that finishes at the planned step with a continuous training log, or stops
with a clear error and nothing poisoned on disk. (tests/training/test_training.py covers the Trainer's
exact-resume and NaN stop on a toy model; tests/test_run_pretraining.py the script's resume
semantics.)
"""

import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import functional_saver

from bert_tf import checkpoints, run_pretraining, training
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.tasks import pretraining


@pytest.fixture(scope="module")
def data(tiny_pretraining_data):
    """Pretraining records of two Lee news documents, and a tiny config."""
    return tiny_pretraining_data()


def _argv(data, output_dir: Path, **overrides) -> list[str]:
    values = {
        "train_batch_size": 4,
        "learning_rate": 1e-3,
        "num_train_steps": 6,
        "num_warmup_steps": 1,
        "save_checkpoints_steps": 2,
        "log_steps": 2,
        "iterations_per_loop": 2,
        "keep_checkpoint_max": 10,
        **overrides,
    }
    return data.argv(output_dir, **values)


def _latest_step(output_dir: Path) -> int:
    latest = tf.train.latest_checkpoint(str(output_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _assert_readable_and_finite(prefix: str) -> None:
    """Every tensor of the checkpoint reads back, and the float ones are finite."""
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
        value = reader.get_tensor(name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.isfinite(value).all(), f"{prefix}: {name} is not finite"


def _logged_steps(output_dir: Path) -> list[int]:
    return [e["step"] for e in json.loads((output_dir / training.LOG_FILE).read_text())["history"]]


@pytest.mark.slow
def test_kill_9_at_random_points_then_rerun_finishes(data, minilm_dir, tmp_path):
    """Three SIGKILLs at seeded random moments (mid-training or mid-save once a run has made
    progress, and once anywhere in a run's first seconds), each followed by a restart: the
    latest checkpoint reads back after every kill, and the last run finishes at the planned
    step with a continuous training log, and with the final weights and losses of the same
    run never interrupted. With --dynamic_masking, so the re-masking seeds replay from the
    restored input position too."""
    steps, every = 60, 5
    command = [
        sys.executable,
        "-m",
        "bert_tf.run_pretraining",
        *_argv(
            data,
            tmp_path,
            train_batch_size=8,
            num_train_steps=steps,
            save_checkpoints_steps=every,
            log_steps=every,
            iterations_per_loop=every,
            keep_checkpoint_max=3,
            dynamic_masking=True,
            vocab_file=minilm_dir / "vocab.txt",
        ),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    rng = random.Random(20261129)
    resumed_at = []
    for kill in range(3):
        log = tmp_path / f"run-{kill}.log"
        with open(log, "w") as stderr:
            process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            if kill == 1:  # right after the restore (a named point, not a guessed delay)
                deadline = time.monotonic() + 600
                while "resumed from" not in log.read_text() and time.monotonic() < deadline:
                    assert process.poll() is None, log.read_text()[-3000:]
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 0.2))
            else:  # after this run saved one to three checkpoints, 0-0.2 s later
                target = min(_latest_step(tmp_path) + every * rng.randint(1, 3), steps - 2 * every)
                deadline = time.monotonic() + 600
                while _latest_step(tmp_path) < target and time.monotonic() < deadline:
                    assert process.poll() is None, log.read_text()[-3000:]
                    time.sleep(0.01)
                time.sleep(rng.uniform(0.0, 0.2))
            process.send_signal(signal.SIGKILL)
            assert process.wait() == -signal.SIGKILL, "the run ended before it was killed"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if latest := tf.train.latest_checkpoint(str(tmp_path)):
            _assert_readable_and_finite(latest)
        resumed_at.append(_latest_step(tmp_path))
    assert resumed_at == sorted(resumed_at) and 0 < resumed_at[-1] < steps, resumed_at
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr[-3000:]
    step = resumed_at[-1]
    assert re.search(rf"resumed from \S+ckpt-{step} at step {step}", final.stderr)
    assert _latest_step(tmp_path) == steps
    _assert_readable_and_finite(tf.train.latest_checkpoint(str(tmp_path)))
    assert _logged_steps(tmp_path) == list(range(every, steps + 1, every))
    history = json.loads((tmp_path / training.LOG_FILE).read_text())["history"]
    assert all(np.isfinite(e["loss"]) for e in history)
    assert history[-1]["loss"] < history[0]["loss"]

    # The same command never interrupted: the same final weights and losses, because a resume
    # restores the weights, optimizer, step, dropout RNG state and input position (and, with
    # --dynamic_masking, the masks follow from the position).
    reference_dir = tmp_path / "uninterrupted"
    reference = [a if not a.startswith("--output_dir=") else f"--output_dir={reference_dir}"
                 for a in command]  # fmt: skip
    done = subprocess.run(reference, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    reference_history = json.loads((reference_dir / training.LOG_FILE).read_text())["history"]
    assert [e["loss"] for e in history] == pytest.approx(
        [e["loss"] for e in reference_history], rel=1e-5
    )
    resumed = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
    uninterrupted = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(reference_dir)))
    names = sorted(uninterrupted.get_variable_to_shape_map())
    assert names == sorted(resumed.get_variable_to_shape_map())
    for name in names:
        value = uninterrupted.get_tensor(name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            np.testing.assert_allclose(resumed.get_tensor(name), value, atol=1e-6, err_msg=name)


class SimulatedCrash(BaseException):
    """A crash that no `except Exception` in the code under test can swallow."""


def test_crash_while_writing_a_checkpoint_leaves_latest_on_the_previous_one(
    data, tmp_path, run_main, monkeypatch
):
    """The process dies while ckpt-4 is being written (its files half there): the state file
    still names ckpt-2, and the rerun resumes from it and finishes."""
    save = functional_saver.MultiDeviceSaver.save

    def crash_while_writing_ckpt_4(self, file_prefix, options=None):
        result = save(self, file_prefix, options)
        prefix = file_prefix.numpy().decode() if hasattr(file_prefix, "numpy") else file_prefix
        if prefix.endswith("ckpt-4"):
            for path in Path(prefix).parent.glob("ckpt-4.*"):
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
            raise SimulatedCrash(prefix)
        return result

    monkeypatch.setattr(functional_saver.MultiDeviceSaver, "save", crash_while_writing_ckpt_4)
    with pytest.raises(SimulatedCrash):
        run_main(run_pretraining, *_argv(data, tmp_path))
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
    assert (tmp_path / "ckpt-4.index").exists()  # the broken files are there, unreferenced
    monkeypatch.setattr(functional_saver.MultiDeviceSaver, "save", save)
    run_main(run_pretraining, *_argv(data, tmp_path))
    assert _latest_step(tmp_path) == 6
    for step in (2, 4, 6):
        _assert_readable_and_finite(str(tmp_path / f"ckpt-{step}"))
    assert _logged_steps(tmp_path) == [2, 4, 6]


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(data, tmp_path, run_main, caplog):
    """ckpt-6 is damaged after it was written (a half-copied folder, a disk fault): loading
    the latest checkpoint takes ckpt-4 with a warning, and training resumes from it and
    rewrites ckpt-6."""
    caplog.set_level(logging.INFO, logger="absl")
    run_main(run_pretraining, *_argv(data, tmp_path / "run"))
    expected = BertPretrainer(build_encoder(data.config))
    checkpoints.training_checkpoint(expected).restore(
        str(tmp_path / "run" / "ckpt-4")
    ).expect_partial()
    for damage in ("truncated_data", "empty_index", "missing_data"):
        folder = tmp_path / damage
        shutil.copytree(tmp_path / "run", folder)
        data_file, index = folder / "ckpt-6.data-00000-of-00001", folder / "ckpt-6.index"
        if damage == "truncated_data":
            data_file.write_bytes(data_file.read_bytes()[: data_file.stat().st_size // 3])
        elif damage == "empty_index":
            index.write_bytes(b"")
        else:
            data_file.unlink()
        model = BertPretrainer(build_encoder(data.config))
        assert training.restore_latest(model, folder) == str(folder / "ckpt-4")
        for a, b in zip(model.weights, expected.weights, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert caplog.text.count("skipping unreadable checkpoint") == 3
    folder = tmp_path / "truncated_data"
    run_main(run_pretraining, *_argv(data, folder, num_train_steps=8))
    assert re.search(r"resumed from \S+ckpt-4 at step 4", caplog.text)
    assert _latest_step(folder) == 8
    for step in (4, 6, 8):
        _assert_readable_and_finite(str(folder / f"ckpt-{step}"))
    assert _logged_steps(folder) == [2, 4, 6, 8]


def test_nan_in_the_data_stops_training_before_a_poisoned_checkpoint(data, tmp_path, run_main):
    """A record whose masked-LM weight is NaN makes the loss NaN at the step that reads it:
    training stops there with a message naming the steps and the last good checkpoint, and
    every checkpoint on disk is finite."""
    records = list(tf.data.TFRecordDataset(str(data.input_file)).as_numpy_iterator())
    # The script's own (seeded) input order: poison a record of the third batch.
    training.set_seed(1)
    order = pretraining.pretraining_dataset(
        str(data.input_file),
        data.max_seq_length,
        data.max_predictions_per_seq,
        4,
        training=True,
        seed=1,
    )
    third = list(order.take(3))[-1]["input_word_ids"][0].numpy()
    poisoned_index = next(
        i
        for i, record in enumerate(records)
        if np.array_equal(
            tf.train.Example.FromString(record).features.feature["input_ids"].int64_list.value,
            third,
        )
    )
    example = tf.train.Example.FromString(records[poisoned_index])
    example.features.feature["masked_lm_weights"].float_list.value[0] = float("nan")
    records[poisoned_index] = example.SerializeToString()
    poisoned = tmp_path / "poisoned.tfrecord"
    with tf.io.TFRecordWriter(str(poisoned)) as writer:
        for record in records:
            writer.write(record)

    output_dir = tmp_path / "out"
    argv = _argv(
        data,
        output_dir,
        input_file=poisoned,
        save_checkpoints_steps=1,
        log_steps=1,
        iterations_per_loop=1,
    )
    with pytest.raises(SystemExit) as exit_info:
        run_main(run_pretraining, *argv)
    message = str(exit_info.value.code)
    assert re.match(
        r"error: non-finite training values .*'loss': nan.* in steps 3\.\.3; stopped without "
        r"saving \(last checkpoint: \S+ckpt-2\)$",
        message,
    ), message
    assert _latest_step(output_dir) == 2 and not list(output_dir.glob("ckpt-3*"))
    for step in (1, 2):
        _assert_readable_and_finite(str(output_dir / f"ckpt-{step}"))
    assert _logged_steps(output_dir) == [1, 2]
