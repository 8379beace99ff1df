"""The programs behind docs/results.md: fixed splits, baselines, the keras-nlp reference mapping."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import pretraining_data
from bert_tf.configs import BertConfig
from bert_tf.encoder import build_encoder
from bert_tf.glue import TextClassificationProcessor
from experiments import baselines, keras_nlp_reference, prepare_data


def _prepare(run_main, output_dir) -> None:
    run_main(
        prepare_data,
        f"--output_dir={output_dir}",
        "--zh_train_size=300",
        "--zh_dev_size=100",
        "--en_dev_size=40",
    )


def test_splits_are_deterministic_and_disjoint(run_main, tmp_path):
    _prepare(run_main, tmp_path / "a")
    _prepare(run_main, tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert [str(f) for f in files] == [
        "en_polarity/dev.tsv",
        "en_polarity/train.tsv",
        "wiki/heldout.txt",
        "wiki/train.txt",
        "zh/pretrain.txt",
        "zh_sentiment/dev.tsv",
        "zh_sentiment/train.tsv",
    ]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f

    processor = TextClassificationProcessor()
    for task, sizes in (("zh_sentiment", (300, 100)), ("en_polarity", (160, 40))):
        train = processor.get_examples(str(tmp_path / "a" / task), "train")
        dev = processor.get_examples(str(tmp_path / "a" / task), "dev")
        assert (len(train), len(dev)) == sizes
        assert {e.label for e in train} == {"0", "1"}
        assert not {e.text_a for e in train} & {e.text_a for e in dev}

    # Dev sentiment sentences never reach the Chinese pretraining text; articles are held out whole.
    pretrain = set((tmp_path / "a" / "zh" / "pretrain.txt").read_text().splitlines())
    dev_texts = {e.text_a for e in processor.get_examples(str(tmp_path / "a/zh_sentiment"), "dev")}
    assert not pretrain & dev_texts
    wiki = {
        name: (tmp_path / "a" / "wiki" / f"{name}.txt").read_text().strip().split("\n\n")
        for name in ("train", "heldout")
    }
    assert len(wiki["heldout"]) > 5 and not set(wiki["train"]) & set(wiki["heldout"])


def _records(path, masked_ids: list[list[int]], seq: int = 8, pred: int = 3) -> None:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for ids in masked_ids:
            features = {
                "input_ids": np.arange(seq),
                "input_mask": np.ones(seq, np.int64),
                "segment_ids": np.zeros(seq, np.int64),
                "masked_lm_positions": np.array([1, 2, 3][: len(ids)] + [0] * (pred - len(ids))),
                "masked_lm_ids": np.array(ids + [0] * (pred - len(ids))),
                "masked_lm_weights": np.array([1.0] * len(ids) + [0.0] * (pred - len(ids))),
                "next_sentence_labels": np.array([0]),
            }
            writer.write(pretraining_data.to_example(features).SerializeToString())


def test_unigram_baseline_predicts_the_most_frequent_training_token(run_main, tmp_path):
    # Token 7 is the most frequent in training; padding (weight 0, id 0) must not count.
    _records(tmp_path / "train.tfrecord", [[7, 7, 5], [7], [5, 9]])
    _records(tmp_path / "heldout.tfrecord", [[7, 1, 2], [7]])
    run_main(
        baselines,
        "--baseline=unigram",
        f"--train_file={tmp_path / 'train.tfrecord'}",
        f"--eval_file={tmp_path / 'heldout.tfrecord'}",
        "--max_seq_length=8",
        "--max_predictions_per_seq=3",
        f"--output_file={tmp_path / 'unigram.json'}",
    )
    result = json.loads((tmp_path / "unigram.json").read_text())
    assert result["predicted_token_id"] == 7
    assert result["heldout_predictions"] == 4
    assert result["masked_lm_accuracy"] == pytest.approx(0.5)


def test_keras_nlp_backbone_holds_our_weights():
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    encoder = build_encoder(config)
    from bert_tf import checkpoints

    backbone = keras_nlp_reference.keras_nlp_backbone(
        checkpoints.get_google_weights(encoder), config
    )
    ids = tf.constant([[2, 7, 9, 30, 3, 0]])
    mask = tf.constant([[1, 1, 1, 1, 1, 0]])
    types = tf.constant([[0, 0, 0, 1, 1, 0]])
    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": types})
    theirs = backbone({"token_ids": ids, "padding_mask": mask, "segment_ids": types})
    # Only keras-nlp's tanh-approximated GELU separates the two; real tokens only.
    np.testing.assert_allclose(
        theirs["sequence_output"][:, :5], ours["sequence_output"][:, :5], atol=5e-3
    )
    np.testing.assert_allclose(theirs["pooled_output"], ours["pooled_output"], atol=5e-3)
