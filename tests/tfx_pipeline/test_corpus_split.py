"""The pretrain pipeline's document split, told before any component runs: `corpus_split` is
the rule PretrainingExampleGen partitions by, and `python -m tfx_pipeline.run` refuses a corpus
that would leave a split without a document in one line (it failed deep inside Beam before)."""

import random

from absl import flags

from bert_tf.data import corpora
from tfx_pipeline import corpus_split
from tfx_pipeline.components import pretraining_example_gen
from tfx_pipeline.runners import checks, run_flags


def _document(rng: random.Random) -> list[str]:
    return [
        " ".join(
            rng.choice(["the", "river", "flows", "a", "city", "of", "stone"]) for _ in range(6)
        )
        + f" {rng.random()}."
        for _ in range(rng.randint(1, 4))
    ]


def test_the_split_is_the_example_gens():
    rng = random.Random(0)
    buckets = list(corpus_split.TRAIN_EVAL_BUCKETS)
    seen = set()
    for index in range(300):
        document = _document(rng)
        keyed = ((0, index), [(sentence, 3) for sentence in document])
        expected = pretraining_example_gen._document_bucket(keyed, len(buckets), buckets)
        assert corpus_split.bucket_of(document, buckets) == expected
        seen.add(expected)
    assert seen == {0, 1}


def test_documents_are_read_as_the_pretraining_reader_reads_them():
    lines = ["  first \n", "second\n", "\n", "\n", "third\n", "   \n", "fourth"]
    assert list(corpora.text_format_documents(lines)) == [
        ["first", "second"],
        ["third"],
        ["fourth"],
    ]


def _check(tmp_path, documents: list[list[str]]) -> str | None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "text.txt").write_text("\n\n".join("\n".join(d) for d in documents) + "\n")
    flag_values = flags.FlagValues()
    run_flags.define_flags(flag_values)
    flag_values(
        [
            "run",
            "--pipeline=pretrain",
            f"--data_root={corpus}",
            f"--pipeline_root={tmp_path / 'root'}",
            f"--serving_model_dir={tmp_path / 'serving'}",
        ]
    )
    try:
        checks.check_flags(flag_values)
    except SystemExit as e:
        return str(e.code)
    return None


def test_a_corpus_without_eval_documents_is_refused_in_one_line(tmp_path):
    rng = random.Random(1)
    buckets = corpus_split.TRAIN_EVAL_BUCKETS
    train_only = []
    while len(train_only) < 3:
        document = _document(rng)
        if corpus_split.bucket_of(document, buckets) == 0:
            train_only.append(document)
    message = _check(tmp_path, train_only)
    assert message is not None and "\n" not in message
    assert message.startswith(f"error: --data_root={tmp_path / 'corpus'}: 3 document(s)")
    assert "none in the eval split" in message and "blank line" in message


def test_a_corpus_with_both_splits_passes(tmp_path):
    rng = random.Random(2)
    documents, splits = [], set()
    while splits != {0, 1}:
        documents.append(_document(rng))
        splits.add(corpus_split.bucket_of(documents[-1], corpus_split.TRAIN_EVAL_BUCKETS))
    assert _check(tmp_path, documents) is None
