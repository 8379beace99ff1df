"""SquadExampleGen: SQuAD v1.1/v2.0 JSON files -> `tf.train.Example`s.

`input_base` holds the SQuAD JSON files: `train*.json` becomes the train split, `dev*.json` the
eval split.

- train: one example per doc-stride window, built by `bert_tf.tasks.squad` exactly as
  google-research `run_squad.py` builds its training features (`read_squad_examples`,
  `convert_examples_to_features` with the in-graph WordPiece tokenizer): int64
  `input_word_ids`, `input_mask`, `input_type_ids` [max_seq_length] (zero-padded) and
  `start_positions`, `end_positions` [1] (0, [CLS], when the answer is not in the window).
- eval: one example per dev question, raw as the exported model and the official scoring take
  it: `id`, `question`, `context` (bytes [1]) and `answers` (the gold answer texts, bytes [n];
  none for an unanswerable v2.0 question).

Example (in a pipeline):

    example_gen = SquadExampleGen(input_base="/data/squad", vocab_file="/data/vocab.txt",
                                  max_seq_length=384, doc_stride=128, max_query_length=64)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tfx.components.example_gen import base_example_gen_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from bert_tf.tasks import squad
from bert_tf.text.tokenization import BertTokenizer
from tfx_pipeline.components.example_gen_lib import (
    FINGERPRINT_PARAMETER,
    CustomSpecExampleGen,
    bytes_feature,
    input_files,
    ints_feature,
    serialize,
)

# Output split -> file pattern under input_base.
SPLITS = {"train": "train*.json", "eval": "dev*.json"}
WINDOW_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")
POSITIONS = ("start_positions", "end_positions")


class SquadExampleGenSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        **FINGERPRINT_PARAMETER,
        "vocab_file": ExecutionParameter(type=str),
        "do_lower_case": ExecutionParameter(type=int),
        "max_seq_length": ExecutionParameter(type=int),
        "doc_stride": ExecutionParameter(type=int),
        "max_query_length": ExecutionParameter(type=int),
        "version_2_with_negative": ExecutionParameter(type=int),
    }
    INPUTS: ClassVar[dict] = {}
    OUTPUTS: ClassVar[dict] = {"examples": ChannelParameter(type=standard_artifacts.Examples)}


def window_feature_spec(max_seq_length: int) -> dict[str, tf.io.FixedLenFeature]:
    """How to parse the train split's window examples."""
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in WINDOW_FEATURES}
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in POSITIONS})
    return spec


def training_windows(path: str, options: dict[str, Any]) -> Iterator[bytes]:
    """The doc-stride training windows of one SQuAD file, as serialized examples."""
    examples = squad.read_squad_examples(
        path, training=True, version_2_with_negative=bool(options["version_2_with_negative"])
    )
    if not examples:
        raise ValueError(f"{path}: no usable training questions")
    features = squad.convert_examples_to_features(
        examples,
        BertTokenizer(options["vocab_file"], lower_case=bool(options["do_lower_case"])),
        max_seq_length=options["max_seq_length"],
        doc_stride=options["doc_stride"],
        max_query_length=options["max_query_length"],
        training=True,
    )
    arrays = squad.feature_arrays(features, options["max_seq_length"])
    for row in range(len(features)):
        yield serialize(
            {
                name: ints_feature(np.atleast_1d(arrays[name][row]).tolist())
                for name in WINDOW_FEATURES + POSITIONS
            }
        )


def dev_questions(path: str, options: dict[str, Any]) -> Iterator[bytes]:
    """One raw example per question of one SQuAD file: id, question, context, gold answers."""
    # Validates every field first, with errors naming the question.
    squad.read_squad_examples(path, False, bool(options["version_2_with_negative"]))
    for article in squad.read_squad_json(path):
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield serialize(
                    {
                        "id": bytes_feature(str(qa["id"])),
                        "question": bytes_feature(qa["question"]),
                        "context": bytes_feature(paragraph["context"]),
                        "answers": bytes_feature(*(a["text"] for a in qa.get("answers", []))),
                    }
                )


class Executor(base_example_gen_executor.BaseExampleGenExecutor):
    """Windows the train files and lists the dev questions, one Beam element per file (a SQuAD
    file is one JSON document, read whole, as the original run_squad does)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        @beam.ptransform_fn
        def _SquadFileToExamples(pipeline, exec_properties, split_pattern):
            convert = training_windows if split_pattern == SPLITS["train"] else dev_questions
            files = input_files(exec_properties["input_base"], split_pattern, "SQuAD JSON file")
            return (
                pipeline
                | "Files" >> beam.Create(files, reshuffle=False)
                | "ToTFExamples" >> beam.FlatMap(convert, exec_properties)
            )

        return _SquadFileToExamples

    def GenerateExamplesByBeam(
        self, pipeline: beam.Pipeline, exec_properties: dict[str, Any]
    ) -> dict[str, beam.PCollection]:
        to_examples = self.GetInputSourceToExamplePTransform()
        return {
            name: pipeline | f"InputToRecord[{name}]" >> to_examples(exec_properties, pattern)
            for name, pattern in SPLITS.items()
        }


class SquadExampleGen(CustomSpecExampleGen):
    """ExampleGen over a folder of SQuAD JSON files (see the module docstring).

    Args:
        input_base: folder with `train*.json` and `dev*.json` (SQuAD v1.1 or v2.0 format).
        vocab_file: WordPiece vocab of the model to train.
        do_lower_case, max_seq_length, doc_stride, max_query_length, version_2_with_negative:
            as `bert_tf.run_squad`'s flags.
        input_fingerprint: open-source KFP: `InputFingerprint.value()` (its cache key).
    """

    SPEC_CLASS = SquadExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        input_base: str,
        vocab_file: str,
        do_lower_case: bool = True,
        max_seq_length: int = 384,
        doc_stride: int = 128,
        max_query_length: int = 64,
        version_2_with_negative: bool = False,
        input_fingerprint=None,
    ):
        if max_seq_length <= max_query_length + 3 or doc_stride <= 0:
            raise ValueError(
                f"SquadExampleGen: need max_seq_length ({max_seq_length}) > max_query_length "
                f"({max_query_length}) + 3 and doc_stride ({doc_stride}) > 0"
            )
        # The train and dev files, so the driver's fingerprint (the cache key) covers them.
        input_config = example_gen_pb2.Input(
            splits=[
                example_gen_pb2.Input.Split(name=name, pattern=pattern)
                for name, pattern in SPLITS.items()
            ]
        )
        super().__init__(
            input_base,
            input_config,
            example_gen_pb2.Output(),
            vocab_file=os.fspath(vocab_file),
            do_lower_case=int(do_lower_case),
            max_seq_length=max_seq_length,
            doc_stride=doc_stride,
            max_query_length=max_query_length,
            version_2_with_negative=int(version_2_with_negative),
            input_fingerprint=input_fingerprint,
        )
