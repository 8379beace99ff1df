"""TFX's ExampleValidator, made a gate: a run whose data has anomalies stops there, naming them.

TFX's own ExampleValidator writes the anomalies (TFDV: the statistics of each split against the
schema) and marks its output "not blessed", but nothing downstream reads that mark: Transform
and the Trainer run on the bad data anyway. This one runs TFX's executor (the same `anomalies`
artifact, files and `blessed` property), then fails the execution when any split has an anomaly,
with one line per anomaly (split, feature, TFDV's description): that message, in the run's error
and log, is the record (TFX removes a failed execution's output folder). The pipelines make
Transform (SQuAD: the Trainer) run after it, so nothing is trained, evaluated or pushed.

Two checks beyond TFX's schema check, both written into the same anomalies:

- Drift against the previous span (TFDV's `drift_comparator`): every run that passes copies its
  statistics under `baseline_dir` (with their span); the next run's statistics are compared, per
  split, with the latest accepted ones of an earlier or the same span and other data
  (`tfdv.validate_statistics(..., previous_statistics=...)`). The comparators are the schema's
  (a curated schema may give any feature one); `drift_features` without one get an L-infinity
  (`drift_linf_threshold`) and a Jensen-Shannon (`drift_js_threshold`) comparator, 0 leaving that
  one out. TFDV computes L-infinity on categorical statistics (strings) and Jensen-Shannon on
  numeric ones (the integer labels our ExampleGens write) and categorical ones. TFX's
  ExampleValidator takes no previous statistics, and TFX's way to fetch them (a resolver node
  feeding DistributionValidator) does not run on open-source KFP ("resolver executors not
  implemented"), hence this folder, as `ServingBaseline` does for the serving model.
- Empty texts: with `examples`, a text feature (BYTES without a domain in the schema: not a
  categorical one such as single-sentence tasks' always-empty `text_b`) whose value is "" in
  some example is an anomaly. TFDV cannot say this: its string statistics keep no minimum length,
  and a natural-language domain's `sequence_length_constraints` (with "" excluded) flag nothing
  for one-string features (measured with TFDV 1.16), so this reads the split's examples.

Example (in a pipeline):

    validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"],
        examples=example_gen.outputs["examples"], baseline_dir=f"{root}/ExampleValidator/accepted",
        drift_features=["label"], drift_linf_threshold=0.1, drift_js_threshold=0.1)
    transform.add_upstream_node(validator)
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, ClassVar

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2
from tfx import types
from tfx.components.example_validator import component as tfx_component
from tfx.components.example_validator import executor as tfx_executor
from tfx.components.example_validator import labels
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.components.util import value_utils
from tfx.dsl.components.base import base_component, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import json_utils, writer_utils

ACCEPTED_FILE = "accepted.json"  # in each accepted statistics' folder under baseline_dir
BASELINE_PROPERTY = "drift_baseline"  # the anomalies artifact's: the statistics compared with
EMPTY_TEXTS = "Empty texts"


class AnomaliesFoundError(RuntimeError):
    """The data has anomalies against the schema; the message names each one."""


class ExampleValidatorSpec(ComponentSpec):
    """TFX's ExampleValidatorSpec plus the examples (empty texts) and the drift check."""

    PARAMETERS: ClassVar[dict] = {
        **standard_component_specs.ExampleValidatorSpec.PARAMETERS,
        "baseline_dir": ExecutionParameter(type=str, optional=True),
        "drift_features": ExecutionParameter(type=str, optional=True),  # JSON list
        "drift_linf_threshold": ExecutionParameter(type=float, optional=True),
        "drift_js_threshold": ExecutionParameter(type=float, optional=True),
    }
    INPUTS: ClassVar[dict] = {
        **standard_component_specs.ExampleValidatorSpec.INPUTS,
        "examples": ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS: ClassVar[dict] = standard_component_specs.ExampleValidatorSpec.OUTPUTS


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


def with_drift_comparators(
    schema: schema_pb2.Schema, features: list[str], linf: float, js: float
) -> schema_pb2.Schema:
    """A copy of `schema` where each of `features` without a drift comparator gets one:
    L-infinity `linf` and Jensen-Shannon `js` (0: not that one)."""
    schema = schema_pb2.Schema.FromString(schema.SerializeToString())
    for feature in schema.feature:
        if feature.name not in features or feature.HasField("drift_comparator"):
            continue
        if linf > 0:
            feature.drift_comparator.infinity_norm.threshold = linf
        if js > 0:
            feature.drift_comparator.jensen_shannon_divergence.threshold = js
    return schema


def text_features(schema: schema_pb2.Schema) -> list[str]:
    """Free-text features: BYTES with no domain (a categorical one has a string/bool domain)."""
    return [
        f.name
        for f in schema.feature
        if f.type == schema_pb2.BYTES and not f.WhichOneof("domain_info")
    ]


def count_empty_texts(examples: types.Artifact, split: str, features: list[str]) -> dict[str, int]:
    """Feature -> how many of the split's values are "" (only features with any)."""
    if not features:
        return {}
    files = fileio.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
    if not files:
        return {}
    compression = "GZIP" if all(f.endswith(".gz") for f in files) else ""
    spec = {name: tf.io.VarLenFeature(tf.string) for name in features}
    counts = dict.fromkeys(features, 0)
    records = tf.data.TFRecordDataset(files, compression_type=compression).batch(1024)
    for batch in records:
        parsed = tf.io.parse_example(batch, spec)
        for name in features:
            counts[name] += int(
                tf.reduce_sum(tf.cast(tf.strings.length(parsed[name].values) == 0, tf.int64))
            )
    return {name: n for name, n in counts.items() if n}


def add_empty_text_anomalies(anomalies: anomalies_pb2.Anomalies, empty: dict[str, int]) -> None:
    for name, count in empty.items():
        info = anomalies.anomaly_info[name]
        description = f"{count} example{'s' if count > 1 else ''} with an empty '{name}'"
        reason = info.reason.add(
            type=anomalies_pb2.AnomalyInfo.CUSTOM_VALIDATION,
            short_description=EMPTY_TEXTS,
            description=description,
        )
        info.severity = anomalies_pb2.AnomalyInfo.ERROR
        if info.short_description:  # TFDV found something else too: name both
            info.short_description += f"; {reason.short_description}"
            info.description += f" {description}."
        else:
            info.short_description, info.description = EMPTY_TEXTS, description
        info.path.step[:] = [name]


def previous_statistics(
    baseline_dir: str, statistics: types.Artifact
) -> tuple[str, dict[str, statistics_pb2.DatasetFeatureStatisticsList]] | None:
    """The latest accepted statistics under `baseline_dir` of a span up to `statistics`' span,
    other than `statistics` themselves: (their folder, split -> statistics), or None."""
    span = statistics.span or 0
    candidates = []
    for path in fileio.glob(os.path.join(baseline_dir, "*", ACCEPTED_FILE)):
        with fileio.open(path) as f:
            accepted = json.load(f)
        if accepted["statistics"] != statistics.uri and accepted["span"] <= span:
            candidates.append((accepted["span"], accepted["accepted_ns"], os.path.dirname(path)))
    if not candidates:
        return None
    folder = max(candidates)[2]
    found = {}
    for split_dir in fileio.glob(os.path.join(folder, "Split-*")):
        path = os.path.join(split_dir, stats_artifact_utils.BINARY_PB_BASENAME)
        with fileio.open(path, "rb") as f:
            found[os.path.basename(split_dir).removeprefix("Split-")] = (
                statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read())
            )
    return folder, found


def accept(baseline_dir: str, statistics: types.Artifact, splits: list[str]) -> str:
    """Copies the validated splits' statistics to a new folder under `baseline_dir`, written
    last its ACCEPTED_FILE (span, source); returns the folder."""
    stamp = time.time_ns()
    folder = os.path.join(baseline_dir, str(stamp))
    for split in splits:
        source = os.path.join(
            artifact_utils.get_split_uri([statistics], split),
            stats_artifact_utils.BINARY_PB_BASENAME,
        )
        target = os.path.join(folder, f"Split-{split}")
        fileio.makedirs(target)
        fileio.copy(source, os.path.join(target, stats_artifact_utils.BINARY_PB_BASENAME))
    with fileio.open(os.path.join(folder, ACCEPTED_FILE), "w") as f:
        json.dump(
            {"span": statistics.span or 0, "statistics": statistics.uri, "accepted_ns": stamp}, f
        )
    return folder


class Executor(tfx_executor.Executor):
    """TFX's ExampleValidator executor with the drift and empty-text checks, then a failure
    listing the anomalies it found; data that passes becomes the next run's drift baseline."""

    def _Validate(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> anomalies_pb2.Anomalies:
        # The split is only in the output folder's name (TFX: `.../Split-<name>`).
        output = outputs[labels.SCHEMA_DIFF_PATH]
        split = os.path.basename(os.path.normpath(output)).removeprefix("Split-")
        schema = value_utils.GetSoleValue(inputs, standard_component_specs.SCHEMA_KEY)
        previous = self._previous and self._previous[1].get(split)
        anomalies = tfdv.validate_statistics(
            statistics=value_utils.GetSoleValue(inputs, standard_component_specs.STATISTICS_KEY),
            schema=with_drift_comparators(schema, *self._drift) if previous else schema,
            previous_statistics=previous or None,
            custom_validation_config=value_utils.GetSoleValue(
                inputs, standard_component_specs.CUSTOM_VALIDATION_CONFIG_KEY
            ),
        )
        if self._examples is not None:
            empty = count_empty_texts(self._examples, split, text_features(schema))
            add_empty_text_anomalies(anomalies, empty)
        writer_utils.write_anomalies(
            os.path.join(output, tfx_executor.DEFAULT_FILE_NAME), anomalies
        )
        self._found += describe(split, anomalies)
        self._validated.append(split)
        return anomalies

    def Do(self, input_dict, output_dict, exec_properties):
        self._found: list[str] = []
        self._validated: list[str] = []
        (statistics,) = input_dict[standard_component_specs.STATISTICS_KEY]
        self._examples = (input_dict.get("examples") or [None])[0]
        baseline_dir = exec_properties.get("baseline_dir") or ""
        self._drift = (
            json_utils.loads(exec_properties.get("drift_features") or "[]"),
            float(exec_properties.get("drift_linf_threshold") or 0),
            float(exec_properties.get("drift_js_threshold") or 0),
        )
        self._previous = baseline_dir and previous_statistics(baseline_dir, statistics)
        if self._previous:
            (anomalies,) = output_dict[standard_component_specs.ANOMALIES_KEY]
            anomalies.set_string_custom_property(BASELINE_PROPERTY, self._previous[0])
        result = super().Do(input_dict, output_dict, exec_properties)
        if self._found:
            raise AnomaliesFoundError(
                f"ExampleValidator: {len(self._found)} anomal"
                f"{'y' if len(self._found) == 1 else 'ies'} against the schema"
                + (f" and the previous span ({self._previous[0]})" if self._previous else "")
                + ", the run stops before Transform: "
                + "; ".join(self._found)
            )
        if baseline_dir:
            accept(baseline_dir, statistics, self._validated)
        return result


class ExampleValidator(tfx_component.ExampleValidator):
    """TFX's ExampleValidator (same inputs, outputs and parameters) with the failing executor,
    and: `examples` (empty texts), `baseline_dir` and the drift options (see the module doc)."""

    SPEC_CLASS = ExampleValidatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        statistics: types.BaseChannel,
        schema: types.BaseChannel,
        examples: types.BaseChannel | None = None,
        exclude_splits: list[str] | None = None,
        baseline_dir: str = "",
        drift_features: list[str] = (),
        drift_linf_threshold: float = 0.0,
        drift_js_threshold: float = 0.0,
    ):
        spec = ExampleValidatorSpec(
            statistics=statistics,
            schema=schema,
            examples=examples,
            exclude_splits=json_utils.dumps(exclude_splits or []),
            baseline_dir=baseline_dir,
            drift_features=json_utils.dumps(list(drift_features)),
            drift_linf_threshold=drift_linf_threshold,
            drift_js_threshold=drift_js_threshold,
            anomalies=types.Channel(type=standard_artifacts.ExampleAnomalies),
        )
        # Not tfx_component.ExampleValidator.__init__ (it builds the narrower standard spec).
        base_component.BaseComponent.__init__(self, spec=spec)
