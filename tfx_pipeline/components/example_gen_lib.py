"""What the custom ExampleGens share: their input files, example encoding and component init."""

from __future__ import annotations

import os
from collections.abc import Iterable

import tensorflow as tf
from tfx import types
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.components.example_gen.driver import FileBasedDriver
from tfx.dsl.components.base import base_component
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.types.component_spec import ExecutionParameter

# The data folder's fingerprint (components.input_fingerprint), an ExampleGen parameter on
# open-source KFP only: the executors ignore it, KFP's cache key includes it.
INPUT_FINGERPRINT = "input_fingerprint"
FINGERPRINT_PARAMETER = {INPUT_FINGERPRINT: ExecutionParameter(type=str, optional=True)}


def input_files(input_base: str, pattern: str, kind: str = "file") -> list[str]:
    """The files matching `pattern` under `input_base`, sorted; an error names the pattern."""
    files = sorted(fileio.glob(os.path.join(input_base, pattern)))
    if not files:
        raise FileNotFoundError(
            f"input_base: no {kind} matches {os.path.join(input_base, pattern)}"
        )
    return files


def bytes_feature(*texts: str) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.encode("utf-8") for t in texts]))


def ints_feature(values: Iterable[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def serialize(features: dict[str, tf.train.Feature]) -> bytes:
    """A `tf.train.Example` of `features`, serialized deterministically (stable cache keys)."""
    example = tf.train.Example(features=tf.train.Features(feature=features))
    return example.SerializeToString(deterministic=True)


class CustomSpecExampleGen(FileBasedExampleGen):
    """A FileBasedExampleGen whose SPEC_CLASS adds parameters to FileBasedExampleGenSpec's.

    Not FileBasedExampleGen.__init__ (it builds the narrower standard spec); still a
    FileBasedExampleGen, which Kubeflow V2 compiles with its span-resolving driver.
    """

    DRIVER_CLASS = FileBasedDriver

    def __init__(
        self,
        input_base: str,
        input_config: example_gen_pb2.Input,
        output_config: example_gen_pb2.Output,
        **parameters,
    ):
        spec = self.SPEC_CLASS(
            input_base=input_base,
            input_config=input_config,
            output_config=output_config,
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            examples=types.Channel(type=standard_artifacts.Examples),
            **parameters,
        )
        base_component.BaseComponent.__init__(self, spec=spec)
