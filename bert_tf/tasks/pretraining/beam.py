"""`create_pretraining_data` as an Apache Beam pipeline: the same records, on any Beam runner.

The work is `bert_tf.tasks.pretraining.records`'s, split into Beam transforms that any pipeline can
reuse. The TFX pretraining ExampleGen (`tfx_pipeline/components/pretraining_example_gen.py`) reads,
orders and tasks its corpus (per output split) with `ReadDocuments(keep_text=True)` and
`CorpusTasks`; only its last step, pairs of raw text rather than masked records, differs:

- `ReadDocuments(input_files, vocab_file, do_lower_case)`: text files -> tokenized documents
  keyed by (file index, document index in the file). Files are read in parallel, documents
  are spread over workers and tokenized in batches (`records.tokenize_documents`);
  sentences with no token and then empty documents are dropped, as in `read_documents`.
  `keep_text=True` makes each sentence (text, token count) instead of its ids: what pairs of
  raw text need (the count sets where documents are cut into pairs), and a smaller side input.
- `OrderedCorpus()`: keyed documents -> one element, the list of documents in input order (the
  single-process `read_documents` order). The random "next" sentences of NSP may come from any
  document, so every worker needs the whole corpus: it is a side input (held in memory per
  worker, as the original holds it in one process).
- `DocumentTasks(dupe_factor)`: the corpus -> (document index, duplication round) pairs,
  redistributed over the workers.
- `CorpusTasks(dupe_factor)`: keyed documents -> (tasks, corpus), the two above together: the
  inputs of any per-(document, round) pair building.
- `PretrainingExamples(...)`: tasks + corpus -> serialized `tf.train.Example`s: instances from
  `records.create_instances_from_document`, masked in batches by
  `records.mask_instances`, serialized by `records.to_example`. (The
  ExampleGen instead writes each `records.sentence_pairs` pair as text.)

Every random choice is seeded per (seed, duplication round, document[, instance]) (see
`bert_tf.tasks.pretraining.records`), and masking is stateless per row, so the records do not depend
on the runner, the number of workers or how elements are batched: the pipeline writes exactly the
records of the single-process path, in another order (the shards are unordered).

Example (the script's `--runner` does this):

    from bert_tf.tasks.pretraining import beam as pretraining_beam
    count = pretraining_beam.create_pretraining_data(
        "corpus/*.txt", "out/train.tfrecord", "vocab.txt", num_output_shards=4,
        pipeline_args=["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                       "--direct_num_workers=2"])
    # out/train.tfrecord-00000-of-00004 ... -00003-of-00004
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from absl import logging
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions

from bert_tf.tasks.pretraining import records
from bert_tf.text.masking import MaskedLmMasker
from bert_tf.text.tokenization import BertTokenizer, SpecialTokenIds, load_vocab

NAMESPACE = "bert_tf.tasks.pretraining"
_TOKENIZE_BATCH = 256  # documents per tokenizer call (at most)
_MASK_BATCH = 1024  # instances per masking call (at most), as records
EMPTY_CORPUS = "no document with any token"


def _file_documents(element: tuple[int, str]) -> Iterator[tuple[tuple[int, int], list[str]]]:
    """(file index, path) -> ((file index, document index), sentences) for each document."""
    file_index, path = element
    for document_index, document in enumerate(records.text_documents([path])):
        yield (file_index, document_index), document


class _TokenizeFn(beam.DoFn):
    """A batch of keyed text documents -> keyed tokenized documents (empty ones dropped)."""

    def __init__(self, vocab_file: str, do_lower_case: bool, keep_text: bool):
        self._vocab_file = vocab_file
        self._do_lower_case = do_lower_case
        self._keep_text = keep_text
        self._documents = Metrics.counter(NAMESPACE, "documents")
        self._sentences = Metrics.counter(NAMESPACE, "sentences")

    def setup(self):
        self._tokenizer = BertTokenizer(self._vocab_file, lower_case=self._do_lower_case)

    def process(self, batch: list[tuple[Any, list[str]]]):
        ids = records.tokenize_documents([doc for _, doc in batch], self._tokenizer)
        for (key, sentences), document_ids in zip(batch, ids, strict=True):
            kept = [
                (text, len(tokens)) if self._keep_text else tokens
                for text, tokens in zip(sentences, document_ids, strict=True)
                if tokens
            ]
            if kept:
                self._documents.inc()
                self._sentences.inc(len(kept))
                yield key, kept


@beam.ptransform_fn
def ReadDocuments(
    pipeline: beam.pvalue.PBegin | beam.Pipeline,
    input_files: Sequence[str],
    vocab_file: str | os.PathLike,
    do_lower_case: bool = True,
    keep_text: bool = False,
) -> beam.PCollection:
    """Text files -> ((file index, document index), [sentence ids, ...]); with `keep_text`,
    [(sentence text, token count), ...]. See the module doc."""
    return (
        pipeline
        | "Files" >> beam.Create(list(enumerate(input_files)))
        | "Split" >> beam.FlatMap(_file_documents)
        | "Spread" >> beam.Reshuffle()
        | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=_TOKENIZE_BATCH)
        | "Tokenize" >> beam.ParDo(_TokenizeFn(os.fspath(vocab_file), do_lower_case, keep_text))
    )


def _ordered(keyed_documents: list, what: str, hint: str) -> list:
    if not keyed_documents:
        raise ValueError(f"{what}: {EMPTY_CORPUS}{hint and f'; {hint}'}")
    return [document for _, document in sorted(keyed_documents, key=lambda kv: kv[0])]


@beam.ptransform_fn
def OrderedCorpus(
    keyed_documents: beam.PCollection, what: str = "input_file", hint: str = ""
) -> beam.PCollection:
    """Keyed documents -> a single element: the documents in key (input) order.

    Raises ValueError naming `what` (a flag or split), then `hint`, when there is no document."""
    return (
        keyed_documents
        | "Collect" >> beam.combiners.ToList()
        | "Order" >> beam.Map(_ordered, what, hint)
    )


@beam.ptransform_fn
def DocumentTasks(corpus: beam.PCollection, dupe_factor: int) -> beam.PCollection:
    """The corpus -> (document index, duplication round) for every pair, spread over workers."""
    return (
        corpus
        | "Tasks"
        >> beam.FlatMap(lambda docs: ((d, k) for k in range(dupe_factor) for d in range(len(docs))))
        | "Spread" >> beam.Reshuffle()
    )


@beam.ptransform_fn
def CorpusTasks(
    keyed_documents: beam.PCollection, dupe_factor: int, what: str = "input_file", hint: str = ""
) -> tuple[beam.PCollection, beam.PCollection]:
    """Keyed documents -> (`DocumentTasks`, `OrderedCorpus`): each (document, round) to build
    pairs for, and the corpus to use as their side input."""
    corpus = keyed_documents | "OrderedCorpus" >> OrderedCorpus(what, hint)
    return corpus | "DocumentTasks" >> DocumentTasks(dupe_factor), corpus


class _InstancesFn(beam.DoFn):
    """(document index, round) -> that document's unmasked instances in that round."""

    def __init__(self, options: dict[str, Any], special_ids: SpecialTokenIds):
        self._options = options
        self._special_ids = special_ids
        self._instances = Metrics.counter(NAMESPACE, "instances")

    def process(self, task: tuple[int, int], corpus: list):
        document_index, dupe_index = task
        instances = records.create_instances_from_document(
            corpus,
            document_index,
            dupe_index,
            self._options["max_seq_length"],
            self._options["short_seq_prob"],
            self._options["seed"],
            self._special_ids,
        )
        self._instances.inc(len(instances))
        yield from instances


class _MaskFn(beam.DoFn):
    """A batch of instances -> their serialized records (masked with each instance's seed)."""

    def __init__(self, vocabulary: Sequence[str], options: dict[str, Any]):
        self._vocabulary = list(vocabulary)
        self._options = options

    def setup(self):
        self._masker = MaskedLmMasker.from_vocab(
            self._vocabulary,
            whole_word_mask=self._options["do_whole_word_mask"],
            max_predictions_per_seq=self._options["max_predictions_per_seq"],
            masked_lm_prob=self._options["masked_lm_prob"],
        )

    def process(self, batch: list[records.TrainingInstance]):
        for features in records.mask_instances(
            batch, self._masker, self._options["max_seq_length"]
        ):
            # deterministic=True: equal records are equal bytes, whichever path wrote them.
            yield records.to_example(features).SerializeToString(deterministic=True)


@beam.ptransform_fn
def PretrainingExamples(
    tasks: beam.PCollection,
    corpus: beam.PCollection,
    vocabulary: Sequence[str],
    do_whole_word_mask: bool = False,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    seed: int = 12345,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
) -> beam.PCollection:
    """`DocumentTasks` + `OrderedCorpus` -> serialized pretraining records (bytes)."""
    options = {
        "do_whole_word_mask": do_whole_word_mask,
        "max_seq_length": max_seq_length,
        "max_predictions_per_seq": max_predictions_per_seq,
        "seed": seed,
        "masked_lm_prob": masked_lm_prob,
        "short_seq_prob": short_seq_prob,
    }
    special_ids = SpecialTokenIds.from_vocab(vocabulary)
    return (
        tasks
        | "Instances"
        >> beam.ParDo(_InstancesFn(options, special_ids), beam.pvalue.AsSingleton(corpus))
        | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=_MASK_BATCH)
        | "Mask" >> beam.ParDo(_MaskFn(vocabulary, options))
    )


def build_pipeline(
    pipeline: beam.Pipeline,
    input_files: Sequence[str],
    output_prefix: str,
    vocab_file: str | os.PathLike,
    num_output_shards: int = 0,
    do_lower_case: bool = True,
    dupe_factor: int = 10,
    **options: Any,
) -> None:
    """Adds the whole job to `pipeline`: files -> records in `output_prefix-SSSSS-of-NNNNN`.

    `options`: `PretrainingExamples`' keyword arguments. `num_output_shards=0` lets the runner
    choose the number of shards.
    """
    vocabulary = load_vocab(vocab_file)
    documents = pipeline | "ReadDocuments" >> ReadDocuments(input_files, vocab_file, do_lower_case)
    tasks, corpus = documents | "CorpusTasks" >> CorpusTasks(dupe_factor)
    (
        tasks
        | "Examples" >> PretrainingExamples(corpus, vocabulary, **options)
        | "Write"
        >> beam.io.WriteToTFRecord(
            output_prefix,
            num_shards=num_output_shards,
            shard_name_template="-SSSSS-of-NNNNN",
        )
    )


def create_pretraining_data(
    input_file: str | Sequence[str],
    output_file: str,
    vocab_file: str | os.PathLike,
    pipeline_args: Sequence[str] = (),
    num_output_shards: int = 0,
    do_lower_case: bool = True,
    do_whole_word_mask: bool = False,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    seed: int = 12345,
    dupe_factor: int = 10,
    masked_lm_prob: float = 0.15,
    short_seq_prob: float = 0.1,
) -> int:
    """Runs the pipeline (`pipeline_args`: Beam's own flags, e.g. `--runner=DataflowRunner
    --project=...`); returns the number of records written (from the pipeline's counters).

    `output_file` is one path prefix: shards are `output_file-SSSSS-of-NNNNN`. The runner's
    file sink writes them to a temporary folder and renames them at the end.
    """
    records.validate_options(
        max_seq_length, max_predictions_per_seq, dupe_factor, masked_lm_prob, short_seq_prob
    )
    if num_output_shards < 0:
        raise ValueError(f"num_output_shards must be >= 0, got {num_output_shards}")
    if not output_file or "," in output_file:
        raise ValueError(
            f"output_file: with a Beam runner, expected one path prefix (shards are "
            f"<prefix>-SSSSS-of-NNNNN), got {output_file!r}"
        )
    input_files = records.expand_file_patterns(input_file)
    load_vocab(vocab_file)  # fails here, naming the file, rather than inside a worker
    logging.info("Beam pipeline over %d input file(s), args %s", len(input_files), pipeline_args)
    start = time.monotonic()
    pipeline = beam.Pipeline(options=PipelineOptions(list(pipeline_args)))
    build_pipeline(
        pipeline,
        input_files,
        output_file,
        vocab_file,
        num_output_shards=num_output_shards,
        do_lower_case=do_lower_case,
        dupe_factor=dupe_factor,
        do_whole_word_mask=do_whole_word_mask,
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        seed=seed,
        masked_lm_prob=masked_lm_prob,
        short_seq_prob=short_seq_prob,
    )
    try:
        result = pipeline.run()
        result.wait_until_finish()
    except Exception as e:  # runners re-raise a worker's error in their own wrapper
        if EMPTY_CORPUS in str(e):
            raise ValueError(f"input_file: {EMPTY_CORPUS} in {', '.join(input_files)}") from None
        raise
    counts = {
        c.key.metric.name: c.result
        for c in result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))[
            "counters"
        ]
    }
    logging.info(
        "read %d documents, %d sentences; wrote %d instances to %s-*-of-* in %.1f s",
        counts.get("documents", 0),
        counts.get("sentences", 0),
        counts.get("instances", 0),
        output_file,
        time.monotonic() - start,
    )
    return counts.get("instances", 0)
