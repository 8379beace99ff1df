"""ML Metadata queries: a pipeline's latest run as data (`pipeline_results`).

Each component's state and seconds, the evaluator's metrics against its thresholds and beside
what the eval split's constant predictor scores (our evaluators' `metrics.json`, or TFMA's output
and the Evaluator's `data_baselines.json`), blessed or not, and the pushed folder or why nothing
was pushed. Needs `ml_metadata` only (TFMA for a TFMA evaluation), not TFX; the store is
opened read-only, so a run in progress is not disturbed. `tfx_pipeline.summary` prints it.

Example:

    results = pipeline_results("runs/tfx/metadata.sqlite", "bert-classification", ids)
    print(results.blessed, results.pushed)
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert_tf import fileio

# A Pusher output's custom property with why nothing was pushed
# (`components.serving_baseline.NOT_PUSHED_REASON`; that module imports TFX).
NOT_PUSHED_REASON = "not_pushed_reason"
METRICS_FILE = "metrics.json"  # our evaluators' report (`components.blessing.METRICS_FILE`)
# The TFMA Evaluator's data baselines (`components.tfma_evaluator.DATA_BASELINES_FILE`).
DATA_BASELINES_FILE = "data_baselines.json"


@dataclasses.dataclass
class ComponentResult:
    node: str
    state: str  # ML Metadata's execution state (COMPLETE, CACHED, FAILED, ...), "not run"
    seconds: float | None = None
    started: float | None = None  # epoch seconds


@dataclasses.dataclass
class RunResults:
    """A pipeline run as ML Metadata recorded it."""

    pipeline_name: str
    run_id: str | None
    components: list[ComponentResult]
    evaluator: str | None = None
    evaluation: list[str] = dataclasses.field(default_factory=list)  # readable lines
    blessed: bool | None = None
    failures: list[str] = dataclasses.field(default_factory=list)
    pushed: str | None = None  # the pushed version's folder
    push_note: str = ""  # why nothing was pushed, or that the push is an earlier run's


def _store(metadata_path: str):
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return metadata_store.MetadataStore(config)


def _latest_run(store, pipeline_name: str, since: float | None):
    """(run context, executions) of the pipeline's latest run (created after `since`, epoch
    seconds), or (None, [])."""
    pipeline = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline is None:
        return None, []
    ours = {e.id for e in store.get_executions_by_context(pipeline.id)}
    runs = sorted(
        store.get_contexts_by_type("pipeline_run"),
        key=lambda c: c.create_time_since_epoch,
        reverse=True,
    )
    for run in runs:
        if since is not None and run.create_time_since_epoch < (since - 1) * 1000:
            break
        executions = [e for e in store.get_executions_by_context(run.id) if e.id in ours]
        if executions:
            return run, sorted(executions, key=lambda e: e.id)
    return None, []


def _node_id(store, execution) -> str:
    node_type = store.get_context_type("node")
    name = next(
        c.name for c in store.get_contexts_by_execution(execution.id) if c.type_id == node_type.id
    )
    return name.split(".", 1)[1]


def _outputs(store, execution) -> dict[str, list]:
    from ml_metadata.proto import metadata_store_pb2

    keys = {
        e.artifact_id: e.path.steps[0].key
        for e in store.get_events_by_execution_ids([execution.id])
        if e.type == metadata_store_pb2.Event.OUTPUT and e.path.steps
    }
    outputs: dict[str, list] = {}
    for artifact in store.get_artifacts_by_id(list(keys)):
        outputs.setdefault(keys[artifact.id], []).append(artifact)
    return outputs


def _property(artifact, name: str, default: Any = None) -> Any:
    if name not in artifact.custom_properties:
        return default
    value = artifact.custom_properties[name]
    return getattr(value, value.WhichOneof("value"))


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _data_baseline(predictor: str | None, score: float) -> str:
    """What the summary says beside a metric about the eval split's constant predictor."""
    return f"; {predictor or 'a constant predictor'} scores {_number(score)}"


def report_lines(report: dict) -> list[str]:
    """Our evaluators' metrics.json (PretrainingEvaluator, SquadEvaluator) as lines."""
    thresholds = report.get("thresholds")
    if thresholds is None and "min_f1" in report:
        thresholds = {"f1": report["min_f1"]}
    thresholds = thresholds or {}
    max_decrease = report.get("max_decrease", report.get("max_f1_decrease"))
    candidate, baseline = report.get("candidate") or {}, report.get("baseline")
    data, predictors = report.get("data_baselines") or {}, report.get("baseline_predictors") or {}
    starting = report.get("starting_checkpoint") or {}  # with fresh heads where it had none
    lines = []
    for name, minimum in thresholds.items():
        line = f"{name} {_number(candidate.get(name))} (threshold >= {_number(minimum)}"
        if name in data:
            line += _data_baseline(predictors.get(name), data[name])
        if starting and name in starting:
            line += f"; the starting checkpoint {_number(starting[name])}"
        if baseline and name in baseline:
            line += (
                f"; the serving model's {_number(baseline[name])}, at most "
                f"{_number(max_decrease)} below it"
            )
        lines.append(line + ")")
    others = [f"{k} {_number(v)}" for k, v in candidate.items() if k not in thresholds]
    if others:
        lines.append("also " + ", ".join(others))
    note = report.get("baseline_model")
    if isinstance(note, dict) and "version" in note:
        lines.append(f"compared with serving version {note['version']} ({note.get('source')})")
    elif isinstance(note, str):
        lines.append(note)
    return lines


def _label(name: str, class_id: int | None, class_names: list[str]) -> str:
    """A TFMA metric's name, with the class of a binarized one by its name ('f1_score ("pos")';
    "class 1" when the name is unknown)."""
    if class_id is None:
        return name
    if class_id < len(class_names):
        return f'{name} ("{class_names[class_id]}")'
    return f"{name} (class {class_id})"


def _class_id(key) -> int | None:
    sub_key = key.sub_key if key.HasField("sub_key") else None
    return sub_key.class_id.value if sub_key and sub_key.HasField("class_id") else None


def _failure(failure, class_names: list[str]) -> str:
    """A TFMA validation failure as the custom evaluators word theirs."""
    key = failure.metric_key
    name = _label(key.name, _class_id(key), class_names)
    value = _number(failure.metric_value.double_value.value)
    threshold = failure.metric_threshold
    if failure.metric_key.is_diff:
        from tensorflow_model_analysis.proto import config_pb2

        change = threshold.change_threshold
        higher = change.direction == config_pb2.MetricDirection.HIGHER_IS_BETTER
        return (
            f"{name} changed by {value} from the serving model's, needs "
            f"{'at least' if higher else 'at most'} {_number(change.absolute.value)}"
        )
    bound = threshold.value_threshold
    if bound.HasField("lower_bound"):
        return f"{name} {value} < threshold {_number(bound.lower_bound.value)}"
    return f"{name} {value} > threshold {_number(bound.upper_bound.value)}"


def tfma_lines(uri: str) -> tuple[list[str], list[str]]:
    """TFMA's output (TFX's Evaluator) and its data baselines: (lines, failures)."""
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.metrics import metric_specs
    from tensorflow_model_analysis.proto import config_pb2
    from tensorflow_model_analysis.writers import eval_config_writer

    gates_file = os.path.join(uri, DATA_BASELINES_FILE)
    gated = json.loads(fileio.read_text(gates_file)) if fileio.exists(gates_file) else {}
    class_names = gated.get("label_names") or []
    gates = {_label(g["metric"], g.get("class_id"), class_names): g for g in gated.get("gates", [])}
    values: dict[tuple[str, bool, str], float] = {}
    for metrics in tfma.load_metrics(uri):
        if metrics.slice_key.single_slice_keys:
            continue  # the overall slice only
        for item in metrics.metric_keys_and_values:
            if item.value.WhichOneof("type") != "double_value":
                continue
            label = _label(item.key.name, _class_id(item.key), class_names)
            key = (label, item.key.is_diff, item.key.model_name)
            values[key] = item.value.double_value.value
    baseline_name = next((m for (_, diff, m) in values if m == "baseline" and not diff), None)
    candidate_name = "candidate" if baseline_name else ""

    def value(name: str, diff: bool = False, model: str | None = None) -> float | None:
        return values.get((name, diff, candidate_name if model is None else model))

    config = eval_config_writer.load_eval_run(uri)[0]
    lines, checked = [], set()
    if config is not None:
        thresholds = metric_specs.metric_thresholds_from_metrics_specs(config.metrics_specs, config)
        for key, slices_and_thresholds in thresholds.items():
            if baseline_name and key.model_name == baseline_name:
                continue  # the baseline's copy of the candidate's thresholds
            for _, threshold in slices_and_thresholds:
                class_id = key.sub_key.class_id if key.sub_key else None
                name = _label(key.name, class_id, class_names)
                checked.add(name)
                if key.is_diff:
                    if baseline_name is None:
                        continue  # nothing serving yet: TFMA skips change thresholds
                    higher = threshold.direction == config_pb2.MetricDirection.HIGHER_IS_BETTER
                    direction = "at least" if higher else "at most"
                    bound = threshold.absolute
                    lines.append(
                        f"{name} {_number(value(name))} vs the serving model's "
                        f"{_number(value(name, model=baseline_name))}: change "
                        f"{_number(value(name, diff=True))} (must be {direction} "
                        f"{_number(bound.value)})"
                    )
                else:
                    bounds = []
                    if threshold.HasField("lower_bound"):
                        bounds.append(f">= {_number(threshold.lower_bound.value)}")
                    if threshold.HasField("upper_bound"):
                        bounds.append(f"<= {_number(threshold.upper_bound.value)}")
                    line = f"{name} {_number(value(name))} (threshold {' and '.join(bounds)}"
                    if name in gates:
                        line += _data_baseline(gates[name]["predictor"], gates[name]["baseline"])
                    lines.append(line + ")")
    others = [
        f"{name} {_number(v)}"
        for (name, diff, model), v in sorted(values.items())
        if not diff and model == candidate_name and name not in checked
    ]
    if others:
        lines.append("also " + ", ".join(others))
    lines = list(dict.fromkeys(lines))  # one line per metric and threshold
    validation = tfma.load_validation_result(uri)
    failures = [
        _failure(f, class_names)
        for per_slice in validation.metric_validations_per_slice
        for f in per_slice.failures
    ]
    if not validation.validation_ok and not failures:
        failures = ["validation failed"]
    return lines, failures


def pipeline_results(
    metadata_path: str,
    pipeline_name: str,
    node_ids: list[str] | None = None,
    since: float | None = None,
) -> RunResults:
    """The latest run of `pipeline_name` in the SQLite ML Metadata at `metadata_path` (one
    created after `since`, epoch seconds, if given); `node_ids`: the pipeline's components in
    order (those that did not run are listed as "not run")."""
    store = _store(metadata_path)
    run, executions = _latest_run(store, pipeline_name, since)
    from ml_metadata.proto import metadata_store_pb2

    results = RunResults(pipeline_name, run.name if run else None, [])
    by_node = {}
    for execution in executions:
        by_node[_node_id(store, execution)] = execution
    for node in [*(node_ids or []), *(n for n in by_node if n not in (node_ids or []))]:
        execution = by_node.get(node)
        if execution is None:
            results.components.append(ComponentResult(node, "not run"))
            continue
        state = metadata_store_pb2.Execution.State.Name(execution.last_known_state)
        seconds = (
            execution.last_update_time_since_epoch - execution.create_time_since_epoch
        ) / 1000
        started = execution.create_time_since_epoch / 1000
        results.components.append(ComponentResult(node, state, seconds, started))
        outputs = _outputs(store, execution)
        if "blessing" in outputs and "evaluation" in outputs:
            results.evaluator = node
            results.blessed = bool(_property(outputs["blessing"][0], "blessed", 0))
            uri = outputs["evaluation"][0].uri
            report_file = os.path.join(uri, METRICS_FILE)
            try:
                if fileio.exists(report_file):  # the pipeline root may be a bucket
                    report = json.loads(fileio.read_text(report_file))
                    results.evaluation = report_lines(report)
                    results.failures = list(report.get("failures") or [])
                else:
                    results.evaluation, results.failures = tfma_lines(uri)
            except Exception as e:  # a summary line, never a failed run
                results.evaluation = [f"(could not read {uri}: {e})"]
        if "pushed_model" in outputs:
            pushed_model = outputs["pushed_model"][0]
            earlier = (
                " (by an earlier run: this run's Pusher was cached)" if state == "CACHED" else ""
            )
            if _property(pushed_model, "pushed", 0):
                results.pushed = _property(pushed_model, "pushed_destination")
                results.push_note = earlier
            else:
                reason = _property(pushed_model, NOT_PUSHED_REASON)
                if not reason:
                    reason = "the model was not blessed" if results.blessed is False else "unknown"
                results.push_note = reason + earlier
    return results
