"""PretrainingExampleGen: a text corpus -> next-sentence pairs as `tf.train.Example`s.

The input is BERT's pretraining text format (one sentence per line, a blank line between
documents). Documents are read, ordered and turned into (document, duplication round) tasks by
the Beam transforms of `create_pretraining_data --runner` (`bert_tf.pretraining_beam`'s
`ReadDocuments(keep_text=True)` and `CorpusTasks`, per output split); pairs are built per task by
`bert_tf.tasks.pretraining.sentence_pairs` (google-research's algorithm, deterministic per
(seed, dupe, document)), with the split's documents as a Beam side input for the random
"next" sentences. Documents, not pairs, are hashed into the output splits, so no document (nor
any random B segment) is shared by train and eval.

Each example holds raw text: `text_a`, `text_b` (sentences joined by spaces), int
`next_sentence_labels` [1] (1 = B is random, google-research's convention) and int
`masking_seed` [2] (the per-instance masking seed `create_pretraining_data` uses). Tokenizing,
packing and masking are Transform's work; the tokenizer is run here only to count tokens, which
sets where documents are cut into pairs.

Example (in a pipeline):

    example_gen = PretrainingExampleGen(
        input_base="/data/corpus", vocab_file="/data/vocab.txt", max_seq_length=128,
        dupe_factor=10)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

import apache_beam as beam
from tfx.components.example_gen import base_example_gen_executor, utils
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import proto_utils

from bert_tf.tasks import pretraining
from bert_tf.tasks.pretraining import beam as pretraining_beam
from bert_tf.text.masking import example_seed
from tfx_pipeline import corpus_split
from tfx_pipeline.components.example_gen_lib import (
    FINGERPRINT_PARAMETER,
    CustomSpecExampleGen,
    bytes_feature,
    input_files,
    ints_feature,
    serialize,
)

Sentence = tuple[str, int]  # (text, WordPiece token count)


class PretrainingExampleGenSpec(ComponentSpec):
    """FileBasedExampleGen's parameters plus create_pretraining_data's pair options."""

    PARAMETERS: ClassVar[dict] = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        **FINGERPRINT_PARAMETER,
        "vocab_file": ExecutionParameter(type=str),
        "do_lower_case": ExecutionParameter(type=int),
        "max_seq_length": ExecutionParameter(type=int),
        "dupe_factor": ExecutionParameter(type=int),
        "short_seq_prob": ExecutionParameter(type=float),
        "seed": ExecutionParameter(type=int),
    }
    INPUTS: ClassVar[dict] = {}
    OUTPUTS: ClassVar[dict] = {"examples": ChannelParameter(type=standard_artifacts.Examples)}


def _pair_examples(
    task: tuple[int, int],
    corpus: list[list[Sentence]],
    max_seq_length: int,
    short_seq_prob: float,
    seed: int,
) -> Iterator[bytes]:
    """The serialized examples of one (document, duplication round)."""
    document_index, dupe_index = task
    rng = pretraining.document_rng(seed, dupe_index, document_index)
    pairs = pretraining.sentence_pairs(
        corpus, document_index, max_seq_length - 3, short_seq_prob, rng, length=lambda s: s[1]
    )
    for i, (sentences_a, sentences_b, is_random_next) in enumerate(pairs):
        masking_seed = example_seed(seed, dupe_index, document_index, i)
        yield serialize(
            {
                "text_a": bytes_feature(" ".join(text for text, _ in sentences_a)),
                "text_b": bytes_feature(" ".join(text for text, _ in sentences_b)),
                "next_sentence_labels": ints_feature([int(is_random_next)]),
                "masking_seed": ints_feature(masking_seed),
            }
        )


@beam.ptransform_fn
def _SentencePairs(documents, split_name: str, options: dict[str, Any]):
    """Keyed documents of one split -> serialized pair examples."""
    tasks, corpus = documents | "CorpusTasks" >> pretraining_beam.CorpusTasks(
        options["dupe_factor"],
        f"split {split_name!r}",
        "give the corpus more documents or change the output_config hash buckets",
    )
    return tasks | "Pairs" >> beam.FlatMap(
        _pair_examples,
        beam.pvalue.AsSingleton(corpus),
        options["max_seq_length"],
        options["short_seq_prob"],
        options["seed"],
    )


def _document_bucket(keyed_document, num_partitions: int, hash_buckets: list[int]) -> int:
    """Output split of a document, from a hash of its text (stable under file reordering)."""
    return corpus_split.bucket_of([sentence for sentence, _ in keyed_document[1]], hash_buckets)


class Executor(base_example_gen_executor.BaseExampleGenExecutor):
    """Builds the splits itself: documents (not examples) are split, then paired per split."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        """One input split's files -> serialized pair examples (used per input split)."""

        @beam.ptransform_fn
        def _InputToExamples(pipeline, exec_properties, split_pattern):
            files = input_files(exec_properties["input_base"], split_pattern)
            return _read(pipeline, files, exec_properties) | "Pairs" >> _SentencePairs(
                split_pattern, exec_properties
            )

        return _InputToExamples

    def GenerateExamplesByBeam(
        self, pipeline: beam.Pipeline, exec_properties: dict[str, Any]
    ) -> dict[str, beam.PCollection]:
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties["input_config"], input_config)
        output_config = example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties["output_config"], output_config)
        split_names = utils.generate_output_split_names(input_config, output_config)
        if not output_config.split_config.splits:
            # Pre-split corpus: one input split per output split.
            return super().GenerateExamplesByBeam(pipeline, exec_properties)
        if len(input_config.splits) != 1:
            raise ValueError("output_config splits need exactly one input split")
        files = input_files(exec_properties["input_base"], input_config.splits[0].pattern)
        buckets = [split.hash_buckets for split in output_config.split_config.splits]
        parts = _read(pipeline, files, exec_properties) | "SplitDocuments" >> beam.Partition(
            _document_bucket, len(buckets), buckets
        )
        return {
            name: part | f"Pairs[{name}]" >> _SentencePairs(name, exec_properties)
            for name, part in zip(split_names, parts, strict=True)
        }


def _read(pipeline, files: list[str], exec_properties: dict[str, Any]):
    """Files -> keyed documents of (text, token count) sentences."""
    return pipeline | "ReadDocuments" >> pretraining_beam.ReadDocuments(
        files,
        exec_properties["vocab_file"],
        bool(exec_properties["do_lower_case"]),
        keep_text=True,
    )


class PretrainingExampleGen(CustomSpecExampleGen):
    """ExampleGen over a BERT pretraining text corpus (see the module docstring).

    Args:
        input_base: folder of the corpus files.
        vocab_file: WordPiece vocab, used to count tokens per sentence.
        do_lower_case, max_seq_length, dupe_factor, short_seq_prob, seed: as
            `create_pretraining_data`'s flags.
        input_config: file patterns under `input_base` (default: every file, one split).
        output_config: output splits by document hash buckets (default train:eval = 2:1).
        input_fingerprint: open-source KFP: `InputFingerprint.value()` (its cache key).
    """

    SPEC_CLASS = PretrainingExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        input_base: str,
        vocab_file: str,
        do_lower_case: bool = True,
        max_seq_length: int = 128,
        dupe_factor: int = 10,
        short_seq_prob: float = 0.1,
        seed: int = 12345,
        input_config: example_gen_pb2.Input | None = None,
        output_config: example_gen_pb2.Output | None = None,
        input_fingerprint=None,
    ):
        input_config = input_config or utils.make_default_input_config()
        output_config = output_config or utils.make_default_output_config(input_config)
        super().__init__(
            input_base,
            input_config,
            output_config,
            vocab_file=os.fspath(vocab_file),
            do_lower_case=int(do_lower_case),
            max_seq_length=max_seq_length,
            dupe_factor=dupe_factor,
            short_seq_prob=short_seq_prob,
            seed=seed,
            input_fingerprint=input_fingerprint,
        )
