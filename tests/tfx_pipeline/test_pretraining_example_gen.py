"""PretrainingExampleGen's Beam part, run directly (no pipeline): splits and NSP pairs.

Each output split holds the text pairs of its own documents (documents, not pairs, are split by
a hash of their text): create_pretraining_data's pair algorithm over the split's corpus, with
its per-(seed, round, document, pair) masking seeds.
"""

import hashlib

import apache_beam as beam
import pytest
import tensorflow as tf
from tfx.components.example_gen import utils
from tfx.proto import example_gen_pb2
from tfx.utils import proto_utils

from bert_tf.data import corpora
from bert_tf.tasks import pretraining
from bert_tf.text.masking import example_seed
from tfx_pipeline.components.pretraining_example_gen import Executor

OPTIONS = {"max_seq_length": 48, "dupe_factor": 2, "short_seq_prob": 0.2, "seed": 11}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, gensim_dir):
    """Lee news documents over two files; one sentence has no token (dropped)."""
    docs = list(corpora.lee_documents(gensim_dir / "lee_background.cor"))[:24]
    folder = tmp_path_factory.mktemp("corpus")
    corpora.write_documents(docs[:14], folder / "a.txt")
    corpora.write_documents(docs[14:], folder / "b.txt")
    with open(folder / "b.txt", "a", encoding="utf-8") as f:
        f.write("\n\x01\nA last short document.\nIt has two sentences.\n")
    return folder


def _exec_properties(corpus, vocab_file, input_config, output_config) -> dict:
    return {
        "input_base": str(corpus),
        "input_config": proto_utils.proto_to_json(input_config),
        "output_config": proto_utils.proto_to_json(output_config),
        "vocab_file": str(vocab_file),
        "do_lower_case": 1,
        **OPTIONS,
    }


def _generate(exec_properties: dict, output_dir) -> dict[str, list[tf.train.Example]]:
    """Runs the executor's Beam part; its output splits, decoded."""
    with beam.Pipeline() as pipeline:
        splits = Executor().GenerateExamplesByBeam(pipeline, exec_properties)
        for name, records in splits.items():
            _ = records | f"Write[{name}]" >> beam.io.WriteToTFRecord(
                str(output_dir / name), shard_name_template=""
            )
    return {
        name: [
            tf.train.Example.FromString(r)
            for r in tf.data.TFRecordDataset(str(output_dir / name)).as_numpy_iterator()
        ]
        for name in splits
    }


def _documents(files, tokenizer) -> list[tuple[list[str], list[list[int]]]]:
    """(sentence texts, sentence ids) per document, with create_pretraining_data's drops."""
    texts = list(pretraining.text_documents(files))
    ids = pretraining.tokenize_documents(texts, tokenizer)
    documents = []
    for text, document_ids in zip(texts, ids, strict=True):
        kept = [(t, i) for t, i in zip(text, document_ids, strict=True) if i]
        if kept:
            documents.append(([t for t, _ in kept], [i for _, i in kept]))
    return documents


def _assert_pairs_of(examples: list[tf.train.Example], documents) -> None:
    """`examples` are `pretraining_data.sentence_pairs` over `documents` (create_pretraining_data's
    pairs before truncation, which Transform does), seeded as create_pretraining_data seeds."""
    corpus = [[(t, len(i)) for t, i in zip(*document, strict=True)] for document in documents]
    seed = OPTIONS["seed"]
    expected = {}
    for dupe_index in range(OPTIONS["dupe_factor"]):
        for document_index in range(len(corpus)):
            pairs = pretraining.sentence_pairs(
                corpus,
                document_index,
                OPTIONS["max_seq_length"] - 3,
                OPTIONS["short_seq_prob"],
                pretraining.document_rng(seed, dupe_index, document_index),
                length=lambda sentence: sentence[1],
            )
            for i, (a, b, is_random_next) in enumerate(pairs):
                expected[example_seed(seed, dupe_index, document_index, i)] = (
                    " ".join(text for text, _ in a),
                    " ".join(text for text, _ in b),
                    int(is_random_next),
                )
    got = {}
    for example in examples:
        feature = example.features.feature
        got[tuple(feature["masking_seed"].int64_list.value)] = (
            feature["text_a"].bytes_list.value[0].decode(),
            feature["text_b"].bytes_list.value[0].decode(),
            feature["next_sentence_labels"].int64_list.value[0],
        )
    assert len(got) == len(examples) == len(expected) > 50
    assert got == expected
    assert 0.2 < sum(label for _, _, label in got.values()) / len(got) < 0.8  # NSP: both labels


def test_documents_are_split_by_hash_then_paired_per_split(corpus, vocab_file, tokenizer, tmp_path):
    input_config = utils.make_default_input_config()
    output_config = utils.make_default_output_config(input_config)  # train:eval = 2:1 buckets
    splits = _generate(_exec_properties(corpus, vocab_file, input_config, output_config), tmp_path)
    assert sorted(splits) == ["eval", "train"]
    # Each document goes to one split, by a hash of its (kept) sentences.
    by_split = {"train": [], "eval": []}
    for document in _documents(sorted(map(str, corpus.iterdir())), tokenizer):
        digest = hashlib.sha256("\n".join(document[0]).encode()).digest()
        by_split["train" if int.from_bytes(digest[:8], "big") % 3 < 2 else "eval"].append(document)
    assert by_split["train"] and by_split["eval"]
    for name, documents in by_split.items():
        _assert_pairs_of(splits[name], documents)
    # No sentence of one split's documents is in the other's pairs (random B included).
    eval_sentences = {s for texts, _ in by_split["eval"] for s in texts}
    train_text = " ".join(
        e.features.feature[k].bytes_list.value[0].decode()
        for e in splits["train"]
        for k in ("text_a", "text_b")
    )
    assert not [s for s in eval_sentences if len(s) > 40 and s in train_text]


def test_pre_split_input_pairs_each_split_on_its_own(corpus, vocab_file, tokenizer, tmp_path):
    input_config = example_gen_pb2.Input(
        splits=[
            example_gen_pb2.Input.Split(name="train", pattern="a.txt"),
            example_gen_pb2.Input.Split(name="eval", pattern="b.txt"),
        ]
    )
    splits = _generate(
        _exec_properties(corpus, vocab_file, input_config, example_gen_pb2.Output()), tmp_path
    )
    for name, file in (("train", "a.txt"), ("eval", "b.txt")):
        _assert_pairs_of(splits[name], _documents([str(corpus / file)], tokenizer))


def test_a_split_without_documents_is_a_clear_error(vocab_file, tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "one.txt").write_text("Only one document.\nIn the corpus.\n")
    input_config = utils.make_default_input_config()
    properties = _exec_properties(
        tmp_path / "corpus",
        vocab_file,
        input_config,
        utils.make_default_output_config(input_config),
    )
    with pytest.raises(
        Exception,
        match=r"split '(train|eval)': no document with any token; give the corpus more documents",
    ):
        _generate(properties, tmp_path)
