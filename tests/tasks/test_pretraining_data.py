"""create_pretraining_data: record layout, NSP balance, determinism, reader, errors, script."""

import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.tasks import pretraining
from bert_tf.text.tokenization import SpecialTokenIds, load_vocab

SEQ, PRED = 64, 10
OPTIONS = {"max_seq_length": SEQ, "max_predictions_per_seq": PRED, "dupe_factor": 2}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, lee_corpus):
    """Two files of Lee news documents in BERT's format (one sentence per line)."""
    return lee_corpus(tmp_path_factory.mktemp("corpus"), a=20, b=10)


@pytest.fixture(scope="module")
def records(tmp_path_factory, corpus, vocab_file):
    out = tmp_path_factory.mktemp("out")
    outputs = [str(out / "train-0.tfrecord"), str(out / "train-1.tfrecord")]
    count = pretraining.create_pretraining_data(
        f"{corpus}/*.txt", ",".join(outputs), vocab_file, **OPTIONS
    )
    return outputs, count


def raw_examples(path):
    return [
        tf.train.Example.FromString(r)
        for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()
    ]


def values(example, name):
    feature = example.features.feature[name]
    return list(getattr(feature, feature.WhichOneof("kind")).value)


def test_record_layout_matches_google_research(records, vocab_file):
    outputs, count = records
    special = SpecialTokenIds.from_vocab(load_vocab(vocab_file))
    per_file = [raw_examples(path) for path in outputs]
    assert sum(map(len, per_file)) == count > 100
    assert abs(len(per_file[0]) - len(per_file[1])) <= 1  # round-robin
    lengths = {
        "input_ids": SEQ,
        "input_mask": SEQ,
        "segment_ids": SEQ,
        "masked_lm_positions": PRED,
        "masked_lm_ids": PRED,
        "masked_lm_weights": PRED,
        "next_sentence_labels": 1,
    }
    for example in per_file[0] + per_file[1]:
        features = example.features.feature
        assert set(features) == set(lengths)
        for name, length in lengths.items():
            kind = "float_list" if name == "masked_lm_weights" else "int64_list"
            assert features[name].WhichOneof("kind") == kind
            assert len(values(example, name)) == length
        ids, mask = np.array(values(example, "input_ids")), np.array(values(example, "input_mask"))
        n = int(mask.sum())
        np.testing.assert_array_equal(mask, np.arange(SEQ) < n)
        assert ids[0] == special.cls and ids[n - 1] == special.sep and not ids[n:].any()
        assert (ids[:n] == special.sep).sum() == 2
        segments = np.array(values(example, "segment_ids"))
        first_sep = int(np.argmax(ids == special.sep))
        np.testing.assert_array_equal(segments[:n], np.arange(n) > first_sep)
        assert not segments[n:].any()
        weights = np.array(values(example, "masked_lm_weights"))
        k = int(weights.sum())
        assert set(weights[:k]) == {1.0} and not weights[k:].any()
        positions = np.array(values(example, "masked_lm_positions"))
        assert np.all(np.diff(positions[:k]) > 0) and np.all(positions[:k] < n)
        assert not positions[k:].any() and not np.array(values(example, "masked_lm_ids")[k:]).any()


def test_next_sentence_labels_are_balanced(records):
    labels = [values(e, "next_sentence_labels")[0] for p in records[0] for e in raw_examples(p)]
    assert set(labels) == {0, 1}
    assert 0.4 < np.mean(labels) < 0.65  # 50/50, plus one-sentence chunks that are always random


def test_same_seed_same_bytes_other_seed_differs(tmp_path, corpus, vocab_file):
    def run(name, seed):
        path = tmp_path / name
        pretraining.create_pretraining_data(
            f"{corpus}/a.txt", str(path), vocab_file, seed=seed, **OPTIONS
        )
        return path.read_bytes()

    first = run("a.tfrecord", 1)
    assert run("b.tfrecord", 1) == first
    assert run("c.tfrecord", 2) != first
    assert not list(tmp_path.glob(".*tmp*"))  # temp files renamed away


def test_truncate_seq_pair_trims_longer_side_to_fit():
    a, b = list(range(10)), list(range(100, 104))
    pretraining.truncate_seq_pair(a, b, 9, random.Random(0))
    assert len(a) + len(b) == 9 and b == [100, 101, 102, 103]
    assert a == sorted(a) and set(a) <= set(range(10))


def test_reader_gives_model_inputs(records):
    outputs, count = records
    dataset = pretraining.read_pretraining_dataset(outputs, SEQ, PRED, batch_size=16)
    batch = next(iter(dataset))
    assert batch["input_word_ids"].shape == (16, SEQ) and batch["input_word_ids"].dtype == tf.int32
    assert batch["input_type_ids"].shape == (16, SEQ)
    assert batch["masked_lm_positions"].shape == (16, PRED)
    assert batch["masked_lm_weights"].dtype == tf.float32
    assert batch["next_sentence_labels"].shape == (16,)
    unbatched = pretraining.read_pretraining_dataset(",".join(outputs), SEQ, PRED)
    assert sum(1 for _ in unbatched) == count


def test_reader_parses_an_original_format_example(tmp_path):
    # A record built the way google-research's write_instance_to_example_files builds it.
    ints = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))  # noqa: E731
    ids = [101, 7592, 103, 102, 2088, 102] + [0] * (SEQ - 6)
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "input_ids": ints(ids),
                "input_mask": ints([1] * 6 + [0] * (SEQ - 6)),
                "segment_ids": ints([0, 0, 0, 0, 1, 1] + [0] * (SEQ - 6)),
                "masked_lm_positions": ints([2] + [0] * (PRED - 1)),
                "masked_lm_ids": ints([2088] + [0] * (PRED - 1)),
                "masked_lm_weights": tf.train.Feature(
                    float_list=tf.train.FloatList(value=[1.0] + [0.0] * (PRED - 1))
                ),
                "next_sentence_labels": ints([1]),
            }
        )
    )
    path = str(tmp_path / "original.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(example.SerializeToString())
    (parsed,) = pretraining.read_pretraining_dataset(path, SEQ, PRED)
    np.testing.assert_array_equal(parsed["input_word_ids"], ids)
    np.testing.assert_array_equal(parsed["input_type_ids"][:6], [0, 0, 0, 0, 1, 1])
    assert parsed["masked_lm_positions"][0] == 2 and parsed["masked_lm_ids"][0] == 2088
    assert parsed["masked_lm_weights"].numpy().sum() == 1.0
    assert parsed["next_sentence_labels"] == 1


def test_corrupt_and_mismatched_files_are_named(tmp_path, records):
    good = records[0][0]
    with open(good, "rb") as f:
        data = f.read()
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"truncated\.tfrecord: corrupt or truncated"):
        pretraining.check_pretraining_file(str(truncated), SEQ, PRED)
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(b"this is not a tfrecord file at all")
    with pytest.raises(ValueError, match=r"garbage\.tfrecord: corrupt or truncated"):
        pretraining.read_pretraining_dataset(str(garbage), SEQ, PRED)
    with pytest.raises(ValueError, match=r"train-0\.tfrecord record 1: feature 'input_ids' has"):
        pretraining.read_pretraining_dataset(good, 128, PRED)
    wrong_type = raw_examples(good)[0]
    wrong_type.features.feature["masked_lm_weights"].CopyFrom(
        tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * PRED))
    )
    missing = raw_examples(good)[0]
    del missing.features.feature["next_sentence_labels"]
    for example, message in [
        (wrong_type, "feature 'masked_lm_weights' is a int64_list, expected float_list"),
        (missing, "feature 'next_sentence_labels' is missing"),
    ]:
        path = tmp_path / "bad.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            writer.write(example.SerializeToString())
        with pytest.raises(ValueError, match=rf"bad\.tfrecord record 1: {message}"):
            pretraining.read_pretraining_dataset(str(path), SEQ, PRED)


def test_bad_inputs_raise_clear_errors(tmp_path, vocab_file):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    out = str(tmp_path / "out.tfrecord")
    with pytest.raises(ValueError, match="no document with any token"):
        pretraining.create_pretraining_data(str(empty), out, vocab_file)
    with pytest.raises(FileNotFoundError, match="no file matches"):
        pretraining.create_pretraining_data(str(tmp_path / "nope*.txt"), out, vocab_file)
    with pytest.raises(ValueError, match="max_seq_length must be >= 5"):
        pretraining.create_pretraining_data(str(empty), out, vocab_file, max_seq_length=4)
    with pytest.raises(ValueError, match="masked_lm_prob"):
        pretraining.create_pretraining_data(str(empty), out, vocab_file, masked_lm_prob=1.5)


def test_script_runs_as_a_subprocess(tmp_path, corpus, vocab_file):
    output = tmp_path / "script.tfrecord"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.create_pretraining_data",
            f"--input_file={corpus}/a.txt",
            f"--output_file={output}",
            f"--vocab_file={vocab_file}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--dupe_factor=1",
            "--do_whole_word_mask",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "*** Example ***" in result.stderr and "Wrote" in result.stderr
    assert pretraining.check_pretraining_file(str(output), 64, 10) > 0
