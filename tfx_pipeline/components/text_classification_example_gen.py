"""TextClassificationExampleGen: a GLUE task folder (or generic text-classification files) ->
`tf.train.Example`s with `text_a`, `text_b` ("" for single-sentence tasks) and `label`.

Files are read with `bert_tf.tasks.glue`'s processors (official GLUE TSV layouts, or `train`/`dev`
`.tsv`/`.csv` with a header for `text_classification`): `train` becomes the train split and
`dev` the eval split. `label` is the class index in `processor.get_labels(input_base)` (int64),
or the float score for regression (STS-B). The names `text_a`/`text_b` are those the exported
model's `classify` signature parses, so TFMA can feed eval examples to it unchanged.

Example (in a pipeline):

    example_gen = TextClassificationExampleGen(input_base="glue_data/MRPC", task_name="mrpc")
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import apache_beam as beam
import tensorflow as tf
from tfx import types
from tfx.components.example_gen import base_example_gen_executor
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.components.example_gen.driver import FileBasedDriver
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from bert_tf.tasks import glue
from tfx_pipeline.components.example_gen_lib import FINGERPRINT_PARAMETER

# Output split -> the task's file split.
SPLITS = {"train": glue.TRAIN, "eval": glue.DEV}
# The unlabelled split that BulkInferrer scores (GLUE's test.tsv, or a text_classification
# folder's test.tsv/.csv without a label column).
UNLABELLED_SPLITS = {"test": glue.TEST}


class TextClassificationExampleGenSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {
        **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
        **FINGERPRINT_PARAMETER,
        "task_name": ExecutionParameter(type=str),
        # {output split: the task's file split}, as JSON; default SPLITS.
        "splits": ExecutionParameter(type=str, optional=True),
    }
    INPUTS: ClassVar[dict] = {}
    OUTPUTS: ClassVar[dict] = {"examples": ChannelParameter(type=standard_artifacts.Examples)}


def to_example(example: glue.InputExample, labels: list[str]) -> bytes:
    """One task example as a serialized tf.Example (label index, or float for regression; no
    label feature for an unlabelled example)."""
    feature = {
        "text_a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[example.text_a.encode()])),
        "text_b": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[(example.text_b or "").encode()])
        ),
    }
    if example.label is not None:
        feature["label"] = (
            tf.train.Feature(int64_list=tf.train.Int64List(value=[labels.index(example.label)]))
            if labels
            else tf.train.Feature(float_list=tf.train.FloatList(value=[float(example.label)]))
        )
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


class Executor(base_example_gen_executor.BaseExampleGenExecutor):
    """Reads each split with the task's processor (GLUE files are read whole, as the original
    run_classifier does), then converts the examples in Beam."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        @beam.ptransform_fn
        def _TaskSplitToExamples(pipeline, exec_properties, split_pattern):
            processor = glue.get_processor(exec_properties["task_name"])
            data_dir = exec_properties["input_base"]
            labels = processor.get_labels(data_dir)
            examples = processor.get_examples(data_dir, split_pattern)
            return (
                pipeline
                | "Examples" >> beam.Create(examples, reshuffle=False)
                | "ToTFExample" >> beam.Map(to_example, labels)
            )

        return _TaskSplitToExamples

    def GenerateExamplesByBeam(
        self, pipeline: beam.Pipeline, exec_properties: dict[str, Any]
    ) -> dict[str, beam.PCollection]:
        to_examples = self.GetInputSourceToExamplePTransform()
        splits = json.loads(exec_properties.get("splits") or "null") or SPLITS
        return {
            name: pipeline | f"InputToRecord[{name}]" >> to_examples(exec_properties, split)
            for name, split in splits.items()
        }


class TextClassificationExampleGen(FileBasedExampleGen):
    """ExampleGen over one text-classification task's folder (see the module docstring).

    Args:
        input_base: the task's data folder (GLUE `train.tsv`, `dev.tsv`, ...).
        task_name: a `bert_tf.tasks.glue` task name (`sst-2`, `mrpc`, ..., `text_classification`).
        splits: {output split: the task's file split}; default `SPLITS` (train and eval),
            `UNLABELLED_SPLITS` for the test file.
        input_fingerprint: open-source KFP: `InputFingerprint.value()` (its cache key).
    """

    SPEC_CLASS = TextClassificationExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
    DRIVER_CLASS = FileBasedDriver

    def __init__(
        self,
        input_base: str,
        task_name: str,
        splits: dict[str, str] | None = None,
        input_fingerprint=None,
    ):
        glue.get_processor(task_name)  # fail at pipeline construction on an unknown task
        splits = splits or SPLITS
        # The splits' files, so the driver's fingerprint (the cache key) covers them.
        input_config = example_gen_pb2.Input(
            splits=[
                example_gen_pb2.Input.Split(name=name, pattern=f"{split}*")
                for name, split in splits.items()
            ]
        )
        spec = TextClassificationExampleGenSpec(
            input_base=input_base,
            input_config=input_config,
            output_config=example_gen_pb2.Output(),
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            task_name=task_name,
            splits=json.dumps(splits, sort_keys=True),
            input_fingerprint=input_fingerprint,
            examples=types.Channel(type=standard_artifacts.Examples),
        )
        # Not FileBasedExampleGen.__init__ (it builds the narrower standard spec); still a
        # FileBasedExampleGen, which Kubeflow V2 compiles with its span-resolving driver.
        base_component.BaseComponent.__init__(self, spec=spec)
