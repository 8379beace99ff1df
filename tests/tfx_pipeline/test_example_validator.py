"""The ExampleValidator gate (tfx_pipeline/components/example_validator.py) on real TFDV
statistics: clean data passes with TFX's artifacts; an unseen label and a missing column each
fail the execution with the anomaly named, after TFX's anomalies files are written."""

import pandas as pd
import pytest
import tensorflow_data_validation as tfdv
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
    tfdv.write_schema_text(inferred, str(folder / "schema.pbtxt"))
    artifact = standard_artifacts.Schema()
    artifact.uri = str(folder)
    return artifact


def _validate(tmp_path, schema, frames):
    anomalies = standard_artifacts.ExampleAnomalies()
    anomalies.uri = str(tmp_path / "anomalies")
    example_validator.Executor().Do(
        {"statistics": [_statistics(tmp_path, frames)], "schema": [schema]},
        {"anomalies": [anomalies]},
        {"exclude_splits": "[]"},
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
    assert (tmp_path / "anomalies" / "Split-eval" / "SchemaDiff.pb").exists()


def test_a_missing_column_stops_the_run(tmp_path, schema):
    with pytest.raises(
        example_validator.AnomaliesFoundError, match="feature 'text': Column dropped"
    ):
        _validate(tmp_path, schema, {"train": CLEAN[["label"]], "eval": CLEAN})
