"""run_pretraining on a few Lee news documents: overfitting sanity run, dynamic masking, resume,
flag errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import pretraining, run_pretraining, training
from bert_tf.configs import BertConfig
from bert_tf.data import corpora
from bert_tf.masking import MaskedLmMasker, restore_original_ids
from bert_tf.pretraining_data import create_pretraining_data
from bert_tf.tokenization import SpecialTokenIds, load_vocab

SEQ, PRED = 32, 5
# Dropout off so that a few hundred steps memorise the examples exactly.
TINY = BertConfig(
    vocab_size=30522,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=128,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=64,
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, gensim_dir, minilm_dir) -> Path:
    """A handful of pretraining records from two Lee documents, and the tiny config."""
    folder = tmp_path_factory.mktemp("pretraining")
    docs = list(corpora.lee_documents(gensim_dir / "lee_background.cor"))[:2]
    corpora.write_documents(docs, folder / "corpus.txt")
    count = create_pretraining_data(
        str(folder / "corpus.txt"),
        str(folder / "train.tfrecord"),
        minilm_dir / "vocab.txt",
        max_seq_length=SEQ,
        max_predictions_per_seq=PRED,
        dupe_factor=1,
    )
    assert 8 <= count <= 32
    TINY.to_json_file(folder / "tiny_config.json")
    return folder


def _flags(data_dir: Path, output_dir: Path, **overrides) -> list[str]:
    values = {
        "input_file": data_dir / "train.tfrecord",
        "output_dir": output_dir,
        "bert_config_file": data_dir / "tiny_config.json",
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PRED,
        "train_batch_size": 16,
        "eval_batch_size": 16,
        "learning_rate": 5e-3,
        "num_train_steps": 150,
        "num_warmup_steps": 10,
        "seed": 1,
        **overrides,
    }
    argv = [f"--{k}={v}" for k, v in values.items() if not isinstance(v, bool)]
    return argv + [f"--{'' if v else 'no'}{k}" for k, v in values.items() if isinstance(v, bool)]


def _eval_results(output_dir: Path) -> dict[str, float]:
    lines = (output_dir / "eval_results.txt").read_text().splitlines()
    return {k: float(v) for k, v in (line.split(" = ") for line in lines)}


def test_overfits_a_few_examples(data_dir, tmp_path, run_main):
    """google-research's sanity check: heads, gathers, weights and losses are wired right."""
    run_main(
        run_pretraining,
        *_flags(
            data_dir,
            tmp_path,
            do_train=True,
            do_eval=True,
            save_checkpoints_steps=150,
            iterations_per_loop=50,
            log_steps=50,
        ),
    )
    result = _eval_results(tmp_path)
    assert set(result) == {"global_step", *pretraining.EVAL_KEYS}
    assert result["global_step"] == 150
    assert result["masked_lm_accuracy"] >= 0.95, result
    assert result["next_sentence_accuracy"] >= 0.95, result
    assert result["loss"] == pytest.approx(result["masked_lm_loss"] + result["next_sentence_loss"])
    log = json.loads((tmp_path / training.LOG_FILE).read_text())["history"]
    assert [e["step"] for e in log] == [50, 100, 150]
    assert log[-1]["loss"] < log[0]["loss"]


def test_dynamic_masking_remasks_each_read_and_eval_keeps_static_masks(data_dir, minilm_dir):
    vocab = load_vocab(minilm_dir / "vocab.txt")
    special = SpecialTokenIds.from_vocab(vocab)
    masker = MaskedLmMasker.from_vocab(vocab, max_predictions_per_seq=PRED)
    files = str(data_dir / "train.tfrecord")
    stored = next(iter(pretraining.pretraining_dataset(files, SEQ, PRED, 64, training=False)))
    count = len(stored["input_word_ids"])
    # Batches of the whole file: batch k is the k-th read of every record.
    reads = list(
        pretraining.pretraining_dataset(
            files, SEQ, PRED, count, training=True, seed=3, masker=masker
        ).take(2)
    )

    def originals(batch):
        return restore_original_ids(
            batch["input_word_ids"],
            batch["masked_lm_positions"],
            batch["masked_lm_ids"],
            batch["masked_lm_weights"],
        ).numpy()

    def by_record(batch):  # training shuffles; key rows by their unmasked tokens
        return {row.tobytes(): i for i, row in enumerate(originals(batch))}

    stored_rows = by_record(stored)
    first, second = reads
    assert set(by_record(first)) == set(by_record(second)) == set(stored_rows)
    changed = 0
    for key, i in by_record(first).items():
        j, s = by_record(second)[key], stored_rows[key]
        positions = [
            set(b["masked_lm_positions"][k].numpy()[b["masked_lm_weights"][k].numpy() > 0])
            for b, k in ((first, i), (second, j), (stored, s))
        ]
        changed += positions[0] != positions[1]
        ids = np.frombuffer(key, dtype=np.int32)
        for read, row in ((first, i), (second, j)):
            chosen = read["masked_lm_positions"][row].numpy()[
                read["masked_lm_weights"][row].numpy() > 0
            ]
            # Labels are the original tokens; specials and padding are never chosen.
            np.testing.assert_array_equal(
                read["masked_lm_ids"][row].numpy()[: len(chosen)], ids[chosen]
            )
            assert not np.isin(ids[chosen], [special.cls, special.sep, special.pad]).any()
    assert changed >= count // 2
    # Evaluation reads the stored masks untouched.
    again = next(iter(pretraining.pretraining_dataset(files, SEQ, PRED, 64, training=False)))
    for key in stored:
        np.testing.assert_array_equal(again[key], stored[key])
    raw = tf.data.TFRecordDataset(files).take(1).get_single_element()
    first_positions = tf.train.Example.FromString(raw.numpy()).features.feature
    np.testing.assert_array_equal(
        stored["masked_lm_positions"][0], first_positions["masked_lm_positions"].int64_list.value
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"do_train": False}, "at least one of --do_train or --do_eval"),
        ({"input_file": "/nonexistent/*.tfrecord"}, "--input_file: no file matches"),
        ({"max_seq_length": 100}, "--max_seq_length: expected 3..64"),
        ({"max_seq_length": 48}, "feature 'input_ids' has 32 values, expected 48"),
        ({"max_predictions_per_seq": 7}, "'masked_lm_positions' has 5 values, expected 7"),
        ({"bert_config_file": ""}, "exactly one of --bert_config_file or --preset"),
        ({"preset": "tiny"}, "exactly one of --bert_config_file or --preset"),
        ({"dynamic_masking": True}, "--dynamic_masking needs --vocab_file"),
        ({"num_warmup_steps": 500}, "--num_warmup_steps: expected 0..150"),
        ({"init_checkpoint": "/nonexistent/ckpt"}, "--init_checkpoint=/nonexistent/ckpt: no such"),
    ],
)
def test_bad_flags_exit_with_clear_errors(data_dir, tmp_path, run_main, overrides, message):
    argv = _flags(data_dir, tmp_path, **{"do_train": True, **overrides})
    with pytest.raises(SystemExit, match=f"error: .*{message}"):
        run_main(run_pretraining, *argv)


@pytest.mark.slow
def test_sigkill_mid_training_then_rerun_finishes(data_dir, minilm_dir, tmp_path):
    """Resume with --dynamic_masking: the re-masking seeds replay, the step log is continuous."""
    command = [
        sys.executable,
        "-m",
        "bert_tf.run_pretraining",
        *_flags(
            data_dir,
            tmp_path,
            do_train=True,
            dynamic_masking=True,
            vocab_file=minilm_dir / "vocab.txt",
            num_train_steps=60,
            save_checkpoints_steps=20,
            log_steps=20,
            iterations_per_loop=5,
        ),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "checkpoint"
    deadline = time.monotonic() + 600
    while first.poll() is None and time.monotonic() < deadline:
        if state.exists() and "ckpt-20" in state.read_text():
            first.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    assert first.wait() == -signal.SIGKILL, "training ended before it could be killed"
    assert not (tmp_path / "ckpt-60.index").exists()
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stderr and (tmp_path / "ckpt-60.index").exists()
    steps = [e["step"] for e in json.loads((tmp_path / training.LOG_FILE).read_text())["history"]]
    assert steps == [20, 40, 60]
