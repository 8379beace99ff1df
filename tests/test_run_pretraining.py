"""run_pretraining on a few Lee news documents: overfitting sanity run, dynamic masking, resume,
flag errors."""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_tf import convert_checkpoint, run_pretraining, training
from bert_tf.tasks import pretraining
from bert_tf.text.masking import MaskedLmMasker, restore_original_ids
from bert_tf.text.tokenization import SpecialTokenIds, load_vocab

SEQ, PRED = 32, 5


@pytest.fixture(scope="module")
def data_dir(tiny_pretraining_data):
    """A handful of pretraining records from two Lee documents, and a tiny config without
    dropout (so that a few hundred steps memorise the examples exactly)."""
    data = tiny_pretraining_data(
        max_seq_length=SEQ, max_predictions_per_seq=PRED, config="no_dropout"
    )
    assert 8 <= data.count <= 32
    return data


def _flags(data_dir, output_dir: Path, **overrides) -> list[str]:
    values = {
        "train_batch_size": 16,
        "eval_batch_size": 16,
        "learning_rate": 5e-3,
        "num_train_steps": 150,
        "num_warmup_steps": 10,
        **overrides,
    }
    return data_dir.argv(output_dir, **values)


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
    files = str(data_dir.input_file)
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
        ({"num_warmup_steps": -1}, "--num_warmup_steps: expected >= 0, got -1"),
        ({"init_checkpoint": "/nonexistent/ckpt"}, "--init_checkpoint=/nonexistent/ckpt: no such"),
        (
            {"bert_config_file": "", "init_checkpoint": "/nonexistent/ckpt"},
            "--bert_config_file: not given and no bert_config.json/config.json beside "
            "--init_checkpoint=/nonexistent/ckpt",
        ),
    ],
)
def test_bad_flags_exit_with_clear_errors(data_dir, tmp_path, run_main, overrides, message):
    argv = _flags(data_dir, tmp_path, **{"do_train": True, **overrides})
    with pytest.raises(SystemExit, match=f"error: .*{message}"):
        run_main(run_pretraining, *argv)


def test_use_xla_compiles_the_training_step_and_trains_the_same(
    data_dir, tmp_path, run_main, monkeypatch
):
    """--use_xla: the Trainer's forward/backward pass is an XLA cluster (its HLO exists), and
    three steps end at the losses of the same run without XLA (float32, within rounding)."""
    trainers = []
    make_trainer = training.make_trainer

    def recording_make_trainer(*args, **kwargs):
        trainers.append(make_trainer(*args, **kwargs))
        return trainers[-1]

    monkeypatch.setattr(training, "make_trainer", recording_make_trainer)
    losses = {}
    for use_xla in (False, True):
        output_dir = tmp_path / f"xla_{use_xla}"
        run_main(
            run_pretraining,
            *_flags(data_dir, output_dir, do_train=True, num_train_steps=3, log_steps=1,
                    iterations_per_loop=1, use_xla=use_xla),
        )  # fmt: skip
        history = json.loads((output_dir / training.LOG_FILE).read_text())["history"]
        losses[use_xla] = [e["loss"] for e in history]
    assert [t.jit_compile for t in trainers] == [False, True]
    batch = next(
        iter(pretraining.read_pretraining_dataset(str(data_dir.input_file), SEQ, PRED, 16))
    )
    hlo = trainers[1]._gradients_fn.experimental_get_compiler_ir(batch)(stage="hlo")
    assert "HloModule" in hlo
    assert len(losses[True]) == 3
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_config_and_vocab_default_to_the_files_beside_init_checkpoint(data_dir, tmp_path):
    # The model-source flags are every script's (bert_tf.options.ModelSourceOptions), and so is
    # what they default to.
    (tmp_path / "bert_config.json").write_text(data_dir.config_file.read_text())
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    flag_values = flags.FlagValues()
    run_pretraining.define_flags(flag_values)
    flag_values(["run_pretraining", f"--init_checkpoint={tmp_path}", "--dynamic_masking"])
    config, path = run_pretraining._config(flag_values)
    assert (config, path) == (data_dir.config, str(tmp_path / "bert_config.json"))
    assert run_pretraining._vocab_file(flag_values) == str(tmp_path / "vocab.txt")


def _constant_predictor_accuracy(files: str, seq: int, pred: int) -> float:
    """Masked-LM accuracy of always predicting the most frequent masked token of `files`."""
    counts: dict[int, float] = {}
    for batch in pretraining.pretraining_dataset(files, seq, pred, 256, training=False):
        ids, weights = batch["masked_lm_ids"].numpy(), batch["masked_lm_weights"].numpy()
        for token, weight in zip(ids.ravel(), weights.ravel(), strict=True):
            counts[int(token)] = counts.get(int(token), 0.0) + float(weight)
    return max(counts.values()) / sum(counts.values())


def test_continued_pretraining_from_the_minilm_folder_learns(
    gensim_dir, minilm_dir, tmp_path, run_main
):
    """Domain-adaptive pretraining of a released encoder-only checkpoint (all-MiniLM-L6-v2's HF
    folder: no pre-training heads): config and vocab from the folder, the heads start fresh
    and learn at --head_learning_rate_multiplier x the rate; after 60 steps the held-out
    masked-LM accuracy is above the eval data's constant predictor, which the starting
    checkpoint with its fresh heads is far below. The folder converted to google's
    bert_model.ckpt starts the same."""
    from bert_tf.data import corpora

    documents = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))
    seq, pred = 64, 10
    for split, docs in (("train", documents[:30]), ("eval", documents[-6:])):
        corpora.write_documents([d[:60] for d in docs], tmp_path / f"{split}.txt")
        pretraining.create_pretraining_data(
            str(tmp_path / f"{split}.txt"),
            str(tmp_path / f"{split}.tfrecord"),
            minilm_dir / "vocab.txt",
            max_seq_length=seq,
            max_predictions_per_seq=pred,
            dupe_factor=1,
        )
    common = [
        f"--init_checkpoint={minilm_dir}",
        f"--max_seq_length={seq}",
        f"--max_predictions_per_seq={pred}",
        "--eval_batch_size=64",
        "--seed=1",
    ]
    start = tmp_path / "start"
    run_main(
        run_pretraining,
        f"--input_file={tmp_path / 'eval.tfrecord'}",
        f"--output_dir={start}",
        "--do_eval",
        *common,
    )
    # The same model as google's checkpoint (convert_checkpoint's bert_model.ckpt, no cls/
    # heads either): the run that failed with "missing in checkpoint (7)" before; with the
    # same seed its fresh heads are the same, and so is its score.
    convert_checkpoint.convert(str(minilm_dir), str(tmp_path / "google"))
    google = [f"--init_checkpoint={tmp_path / 'google' / 'bert_model.ckpt'}", *common[1:]]
    start_google = tmp_path / "start_google"
    run_main(
        run_pretraining,
        f"--input_file={tmp_path / 'eval.tfrecord'}",
        f"--output_dir={start_google}",
        "--do_eval",
        *google,
    )
    assert _eval_results(start_google) == _eval_results(start)
    output = tmp_path / "continued"
    run_main(
        run_pretraining,
        f"--input_file={tmp_path / 'train.tfrecord'}",
        f"--output_dir={output}",
        "--do_train",
        "--train_batch_size=32",
        "--num_train_steps=60",
        "--num_warmup_steps=6",
        "--learning_rate=2e-4",
        "--head_learning_rate_multiplier=25",
        "--iterations_per_loop=30",
        *common,
    )
    run_main(
        run_pretraining,
        f"--input_file={tmp_path / 'eval.tfrecord'}",
        f"--output_dir={output}",
        "--do_eval",
        *common,
    )
    constant = _constant_predictor_accuracy(str(tmp_path / "eval.tfrecord"), seq, pred)
    before, after = _eval_results(start), _eval_results(output)
    assert json.loads((output / "bert_config.json").read_text())["hidden_size"] == 384
    assert before["masked_lm_accuracy"] < constant
    assert after["global_step"] == 60
    assert after["masked_lm_accuracy"] > constant + 0.02, (after, constant)
