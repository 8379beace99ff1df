"""The ExampleValidator gate (tfx_pipeline/components/example_validator.py) on real TFDV
statistics: clean data passes with TFX's artifacts; an unseen label, a missing column, an empty
text and a label distribution drifting from the previous accepted span each fail the execution
with the anomaly named, after TFX's anomalies files are written. (The same gate in real
pipeline runs: test_validation_runs.py.)"""

import json

import pandas as pd
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.types import artifact_utils, standard_artifacts

from tfx_pipeline.components import example_validator

CLEAN = pd.DataFrame(
    {"text": ["a good film", "a bad film", "fine", "awful"] * 5, "label": ["pos", "neg"] * 10}
)


def _statistics(tmp_path, frames: dict[str, pd.DataFrame]) -> standard_artifacts.ExampleStatistics:
    artifact = standard_artifacts.ExampleStatistics()
    artifact.uri = str(tmp_path / "statistics")
    artifact.split_names = artifact_utils.encode_split_names(list(frames))
    for split, frame in frames.items():
        folder = tmp_path / "statistics" / f"Split-{split}"
        folder.mkdir(parents=True)
        stats = tfdv.generate_statistics_from_dataframe(frame)
        (folder / stats_artifact_utils.BINARY_PB_BASENAME).write_bytes(stats.SerializeToString())
    return artifact


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> standard_artifacts.Schema:
    """The schema the first run infers from clean data (what SchemaGen writes)."""
    folder = tmp_path_factory.mktemp("schema")
    inferred = tfdv.infer_schema(tfdv.generate_statistics_from_dataframe(CLEAN))
    # CLEAN's 4 distinct texts make TFDV infer a string domain; real texts (every one distinct,
    # as in the pipelines' data) get none: a free-text feature.
    tfdv.get_feature(inferred, "text").ClearField("domain")
    domains = [d for d in inferred.string_domain if d.name != "text"]
    del inferred.string_domain[:]
    inferred.string_domain.extend(domains)
    tfdv.write_schema_text(inferred, str(folder / "schema.pbtxt"))
    artifact = standard_artifacts.Schema()
    artifact.uri = str(folder)
    return artifact


def _examples(tmp_path, frames: dict[str, pd.DataFrame]) -> standard_artifacts.Examples:
    """The frames as ExampleGen writes them (gzipped TFRecords of tf.train.Examples)."""
    artifact = standard_artifacts.Examples()
    artifact.uri = str(tmp_path / "examples")
    artifact.split_names = artifact_utils.encode_split_names(list(frames))
    for split, frame in frames.items():
        folder = tmp_path / "examples" / f"Split-{split}"
        folder.mkdir(parents=True)
        with tf.io.TFRecordWriter(str(folder / "data.gz"), options="GZIP") as writer:
            for row in frame.itertuples(index=False):
                feature = {
                    name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(v).encode()]))
                    for name, v in row._asdict().items()
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return artifact


def _validate(tmp_path, schema, frames, examples=False, baseline_dir="", run="run"):
    """The executor on `frames`' statistics (and, with `examples`, their examples) in
    tmp_path/run; drift against the previous accepted statistics in `baseline_dir`."""
    tmp_path = tmp_path / run
    anomalies = standard_artifacts.ExampleAnomalies()
    anomalies.uri = str(tmp_path / "anomalies")
    inputs = {"statistics": [_statistics(tmp_path, frames)], "schema": [schema]}
    if examples:
        inputs["examples"] = [_examples(tmp_path, frames)]
    example_validator.Executor().Do(
        inputs,
        {"anomalies": [anomalies]},
        {
            "exclude_splits": "[]",
            "baseline_dir": str(baseline_dir),
            "drift_features": json.dumps(["label"]),
            "drift_linf_threshold": 0.1,
            "drift_js_threshold": 0.1,
        },
    )
    return anomalies


def test_clean_data_passes(tmp_path, schema):
    anomalies = _validate(tmp_path, schema, {"train": CLEAN, "eval": CLEAN})
    assert anomalies.get_json_value_custom_property("blessed") == {"train": 1, "eval": 1}


def test_an_unseen_label_stops_the_run_naming_it(tmp_path, schema):
    bad = CLEAN.assign(label=["pos", "neg", "neutral", "neg"] * 5)
    with pytest.raises(example_validator.AnomaliesFoundError) as error:
        _validate(tmp_path, schema, {"train": CLEAN, "eval": bad})
    message = str(error.value)
    assert "1 anomaly" in message and "the run stops before Transform" in message
    assert "split 'eval', feature 'label': Unexpected string values" in message
    assert "neutral" in message
    # TFX's own anomalies file is written first (the evidence stays on disk).
    assert (tmp_path / "run" / "anomalies" / "Split-eval" / "SchemaDiff.pb").exists()


def test_a_missing_column_stops_the_run(tmp_path, schema):
    with pytest.raises(
        example_validator.AnomaliesFoundError, match="feature 'text': Column dropped"
    ):
        _validate(tmp_path, schema, {"train": CLEAN[["label"]], "eval": CLEAN})


def test_an_empty_text_stops_the_run_naming_it(tmp_path, schema):
    """TFDV's statistics do not single out "" in a text feature: the gate counts them."""
    _validate(tmp_path, schema, {"train": CLEAN}, examples=True, run="clean")
    bad = CLEAN.copy()
    bad.loc[[3, 7], "text"] = ""
    with pytest.raises(
        example_validator.AnomaliesFoundError,
        match=r"1 anomaly .*split 'eval', feature 'text': Empty texts "
        r"\(2 examples with an empty 'text'\)$",
    ):
        _validate(tmp_path, schema, {"train": CLEAN, "eval": bad}, examples=True, run="bad")
    # The anomaly is in TFX's anomalies file too.
    diff = tmp_path / "bad" / "anomalies" / "Split-eval" / "SchemaDiff.pb"
    written = anomalies_pb2.Anomalies.FromString(diff.read_bytes())
    assert written.anomaly_info["text"].short_description == "Empty texts"


def test_a_drifting_label_distribution_stops_the_next_span(tmp_path, schema):
    """A first span passes and becomes the baseline; a next span with the same label shares
    passes against it; one whose label shares move from 50/50 to 90/10 (L-infinity 0.4 and
    Jensen-Shannon divergence 0.147, both above 0.1) stops the run naming the drift."""
    baseline = tmp_path / "accepted"
    first = _validate(tmp_path, schema, {"train": CLEAN}, baseline_dir=baseline, run="first")
    assert first.get_string_custom_property("drift_baseline") == ""  # nothing before it
    (accepted,) = baseline.glob("*/accepted.json")
    assert json.loads(accepted.read_text())["statistics"] == str(tmp_path / "first/statistics")
    same = CLEAN.assign(text=CLEAN.text.str.upper())
    second = _validate(tmp_path, schema, {"train": same}, baseline_dir=baseline, run="second")
    assert second.get_string_custom_property("drift_baseline") == str(accepted.parent)
    drifted = CLEAN.assign(label=["pos"] * 9 + ["neg"] + ["pos"] * 9 + ["neg"])
    with pytest.raises(example_validator.AnomaliesFoundError) as error:
        _validate(tmp_path, schema, {"train": drifted}, baseline_dir=baseline, run="drifted")
    message = str(error.value)
    assert "1 anomaly against the schema and the previous span" in message
    # String labels are categorical: both comparators measure (L-infinity 0.4: "pos" 0.5 -> 0.9).
    assert (
        "split 'train', feature 'label': Multiple errors (The Linfty distance between " in message
    )
    assert (
        "current and previous is 0.4 (up to six significant digits), above the threshold 0.1"
        in (message)
    )
    assert "Jensen-Shannon divergence between current and previous is 0.146793" in message
    # A rejected span is not a baseline: the two accepted ones stay.
    assert len(list(baseline.glob("*/accepted.json"))) == 2
