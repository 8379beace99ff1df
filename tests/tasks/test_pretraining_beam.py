"""create_pretraining_data on Apache Beam: the same records as the single-process path."""

import json

import apache_beam as beam
import pytest
import tensorflow as tf
from absl import flags
from apache_beam.testing.util import assert_that, equal_to
from google.protobuf import json_format

from bert_tf import create_pretraining_data
from bert_tf.tasks import pretraining
from bert_tf.tasks.pretraining import beam as pretraining_beam
from bert_tf.text.tokenization import BertTokenizer

OPTIONS = {
    "max_seq_length": 64,
    "max_predictions_per_seq": 10,
    "dupe_factor": 2,
    "do_whole_word_mask": True,
    "seed": 7,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, lee_corpus):
    """Lee news documents over two files; one sentence has no token (dropped by both paths)."""
    folder = lee_corpus(tmp_path_factory.mktemp("corpus"), a=14, b=10)
    with open(folder / "b.txt", "a", encoding="utf-8") as f:
        f.write("\n\x01\nA last short document.\nIt has two sentences.\n")
    return folder


@pytest.fixture(scope="module")
def single_process_records(tmp_path_factory, corpus, vocab_file) -> list[bytes]:
    output = tmp_path_factory.mktemp("single") / "train.tfrecord"
    count = pretraining.create_pretraining_data(
        f"{corpus}/*.txt", str(output), vocab_file, **OPTIONS
    )
    records = list(tf.data.TFRecordDataset(str(output)).as_numpy_iterator())
    assert len(records) == count > 200
    return records


def test_read_documents_and_corpus_order_match_the_single_process_reader(corpus, vocab_file):
    files = pretraining.expand_file_patterns(f"{corpus}/*.txt")
    tokenizer = BertTokenizer(vocab_file)
    expected = pretraining.read_documents(files, tokenizer)
    # keep_text=True (what the NSP-pair ExampleGen needs): the same documents, each sentence
    # as (text, token count).
    documents = list(pretraining.text_documents(files))
    ids = pretraining.tokenize_documents(documents, tokenizer)
    with_text = [
        kept
        for document, document_ids in zip(documents, ids, strict=True)
        if (kept := [(t, len(i)) for t, i in zip(document, document_ids, strict=True) if i])
    ]
    assert [[n for _, n in document] for document in with_text] == [
        [len(i) for i in document] for document in expected
    ]
    with beam.Pipeline() as pipeline:
        ordered = (
            pipeline
            | pretraining_beam.ReadDocuments(files, vocab_file)
            | pretraining_beam.OrderedCorpus()
        )
        assert_that(ordered, equal_to([expected]))
        ordered_with_text = (
            pipeline
            | "WithText" >> pretraining_beam.ReadDocuments(files, vocab_file, keep_text=True)
            | "OrderWithText" >> pretraining_beam.OrderedCorpus()
        )
        assert_that(ordered_with_text, equal_to([with_text]), label="keep_text")


def test_script_with_direct_runner_writes_the_same_records(
    corpus, vocab_file, single_process_records, tmp_path, run_main
):
    """Two DirectRunner worker processes, three shards: the same records (bytes and decoded)."""
    prefix = tmp_path / "beam" / "train.tfrecord"
    run_main(
        create_pretraining_data,
        f"--input_file={corpus}/*.txt",
        f"--output_file={prefix}",
        f"--vocab_file={vocab_file}",
        *(f"--{k}={v}" for k, v in OPTIONS.items()),
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--num_output_shards=3",
    )
    shards = sorted(prefix.parent.iterdir())
    assert [p.name for p in shards] == [f"train.tfrecord-0000{i}-of-00003" for i in range(3)]
    records = list(tf.data.TFRecordDataset([str(p) for p in shards]).as_numpy_iterator())
    assert all(p.stat().st_size > 0 for p in shards)  # the work was spread
    assert sorted(records) == sorted(single_process_records)  # deterministic serialization
    assert _decoded(records) == _decoded(single_process_records)


def _decoded(records: list[bytes]) -> list[str]:
    """The records as sorted JSON of their features (compares content, not bytes)."""
    return sorted(
        json.dumps(json_format.MessageToDict(tf.train.Example.FromString(r)), sort_keys=True)
        for r in records
    )


def test_beam_pipeline_args_pass_through(corpus, vocab_file):
    values = flags.FlagValues()
    create_pretraining_data.define_flags(values)
    values(
        [
            "prog",
            "--input_file=x",
            "--output_file=y",
            "--vocab_file=z",
            "--runner=DataflowRunner",
            "--beam_pipeline_args=--project=p --region=r",
            "--beam_pipeline_args=--experiments=a,b",
        ]
    )
    assert create_pretraining_data.beam_pipeline_args(values) == [
        "--runner=DataflowRunner",
        "--project=p",
        "--region=r",
        "--experiments=a,b",
    ]
    values.runner = "DirectRunner"
    assert create_pretraining_data.beam_pipeline_args(values)[:3] == [
        "--runner=DirectRunner",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--runner=DirectRunner", "--output_file=a,b"], "with a Beam runner, expected one path"),
        (["--beam_pipeline_args=--project=p"], "--beam_pipeline_args and --num_output_shards need"),
        (["--runner=DirectRunner", "--num_output_shards=-1"], "num_output_shards must be >= 0"),
        (["--runner=DirectRunner", "--input_file=/nonexistent/*.txt"], "no file matches"),
    ],
)
def test_bad_flags_exit_with_clear_errors(corpus, vocab_file, tmp_path, run_main, extra, message):
    argv = [
        f"--input_file={corpus}/*.txt",
        f"--output_file={tmp_path}/out.tfrecord",
        f"--vocab_file={vocab_file}",
        *extra,
    ]
    with pytest.raises(SystemExit, match=f"error: .*{message}"):
        run_main(create_pretraining_data, *argv)


def test_a_corpus_without_tokens_is_a_clear_error(vocab_file, tmp_path, run_main):
    (tmp_path / "empty.txt").write_text("\x01\n\n\x02\n")
    with pytest.raises(SystemExit, match="error: input_file: no document with any token in "):
        run_main(
            create_pretraining_data,
            f"--input_file={tmp_path}/empty.txt",
            f"--output_file={tmp_path}/out.tfrecord",
            f"--vocab_file={vocab_file}",
            "--runner=DirectRunner",
            # In this process: the error path is the same, the worker start is saved.
            "--beam_pipeline_args=--direct_running_mode=in_memory",
        )
