"""TFX's ExampleValidator, made a gate: a run whose data has anomalies stops there, naming them.

TFX's own ExampleValidator writes the anomalies (TFDV: the statistics of each split against the
schema) and marks its output "not blessed", but nothing downstream reads that mark: Transform
and the Trainer run on the bad data anyway. This one runs TFX's executor unchanged (the same
`anomalies` artifact, files and `blessed` property), then fails the execution when any split has
an anomaly, with one line per anomaly (split, feature, TFDV's description): that message, in the
run's error and log, is the record (TFX removes a failed execution's output folder). The pipelines make
Transform (SQuAD: the Trainer) run after it, so nothing is trained, evaluated or pushed.

Example (in a pipeline):

    validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    transform.add_upstream_node(validator)
"""

from __future__ import annotations

import os
from typing import Any

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.components.example_validator import component as tfx_component
from tfx.components.example_validator import executor as tfx_executor
from tfx.components.example_validator import labels
from tfx.dsl.components.base import executor_spec


class AnomaliesFoundError(RuntimeError):
    """The data has anomalies against the schema; the message names each one."""


def describe(split: str, anomalies: anomalies_pb2.Anomalies) -> list[str]:
    """One readable line per anomaly of one split."""
    found = [
        f"split '{split}', feature '{feature}': {info.short_description or info.description}"
        + (f" ({info.description})" if info.short_description and info.description else "")
        for feature, info in sorted(anomalies.anomaly_info.items())
    ]
    if anomalies.HasField("dataset_anomaly_info"):
        info = anomalies.dataset_anomaly_info
        found.append(f"split '{split}', dataset: {info.short_description or info.description}")
    return found


class Executor(tfx_executor.Executor):
    """TFX's ExampleValidator executor, then a failure listing the anomalies it found."""

    def _Validate(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> anomalies_pb2.Anomalies:
        anomalies = super()._Validate(inputs, outputs)
        # The split is only in the output folder's name (TFX: `.../Split-<name>`).
        split = os.path.basename(os.path.normpath(outputs[labels.SCHEMA_DIFF_PATH]))
        self._found += describe(split.removeprefix("Split-"), anomalies)
        return anomalies

    def Do(self, input_dict, output_dict, exec_properties):
        self._found: list[str] = []
        result = super().Do(input_dict, output_dict, exec_properties)
        if self._found:
            raise AnomaliesFoundError(
                f"ExampleValidator: {len(self._found)} anomal"
                f"{'y' if len(self._found) == 1 else 'ies'} against the schema, the run stops "
                "before Transform: " + "; ".join(self._found)
            )
        return result


class ExampleValidator(tfx_component.ExampleValidator):
    """TFX's ExampleValidator (same inputs, outputs and parameters) with the failing executor."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
