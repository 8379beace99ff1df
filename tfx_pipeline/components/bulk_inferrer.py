"""BulkInferrer: TFX's, scoring unlabelled examples with the blessed model's `classify` or
`regress` signature; its output examples are the inputs (`text_a`, `text_b`) with the
predictions added (`predicted_label`: every class name, `predicted_score`: their
probabilities, in the same order; for regression `predicted_value`).

TFX's executor runs the exported SavedModel through tfx_bsl's RunInference, which calls these
signatures the way TF Serving's Classify/Regress APIs do: the export's tf.Example signatures
(`serving.export_lib.export_classifier`) take the ExampleGen's examples unchanged. Ours differs
only in importing tensorflow_text first (the export's tokenizer ops), which TFX's executor
module does not do; in a fresh container process loading the model would otherwise fail.

Example (in a pipeline):

    BulkInferrer(
        examples=unlabelled_example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        regression=False,
    )
"""

from __future__ import annotations

import tensorflow_text  # noqa: F401  (registers the export's tokenizer ops before loading it)
from tfx.components.bulk_inferrer import component as bulk_inferrer_component
from tfx.components.bulk_inferrer import executor as bulk_inferrer_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import bulk_inferrer_pb2

# The split BulkInferrer scores (TextClassificationExampleGen's UNLABELLED_SPLITS).
SPLIT = "test"
LABEL_COLUMN, SCORE_COLUMN, VALUE_COLUMN = "predicted_label", "predicted_score", "predicted_value"


class Executor(bulk_inferrer_executor.Executor):
    """TFX's BulkInferrer executor, in a process that has tensorflow_text's ops."""


def output_example_spec(regression: bool) -> bulk_inferrer_pb2.OutputExampleSpec:
    """The predictions' columns in the output examples."""
    if regression:
        column = bulk_inferrer_pb2.OutputColumnsSpec(
            regress_output=bulk_inferrer_pb2.RegressOutput(value_column=VALUE_COLUMN)
        )
    else:
        column = bulk_inferrer_pb2.OutputColumnsSpec(
            classify_output=bulk_inferrer_pb2.ClassifyOutput(
                label_column=LABEL_COLUMN, score_column=SCORE_COLUMN
            )
        )
    return bulk_inferrer_pb2.OutputExampleSpec(output_columns_spec=[column])


class BulkInferrer(bulk_inferrer_component.BulkInferrer):
    """TFX's BulkInferrer on the `test` split through the export's `classify` (or `regress`)
    signature, writing output examples (see the module docstring)."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples, model, model_blessing, regression: bool):
        super().__init__(
            examples=examples,
            model=model,
            model_blessing=model_blessing,
            data_spec=bulk_inferrer_pb2.DataSpec(example_splits=[SPLIT]),
            model_spec=bulk_inferrer_pb2.ModelSpec(
                model_signature_name=["regress" if regression else "classify"]
            ),
            output_example_spec=output_example_spec(regression),
        )
