"""The ExampleValidator gate in real runs of the classify pipeline (the README's classify command
on the local runner, tiny flags): clean data passes it; data with an unseen label, with empty
texts, or (in the same pipeline root, the next span) with a label distribution drifting beyond
the Jensen-Shannon threshold from the span it accepted stops the run there with the anomaly
named, and nothing after it runs or is pushed.

The clean run stops after ExampleValidator (a partial run, `to_nodes`): what it checks ends
there, and Transform, the Trainer and the Evaluator on clean data are test_pipelines.py's. The
others are whole runs of `python -m tfx_pipeline.run` in this process: they must stop at
ExampleValidator by themselves.
"""

import glob
import json
import random
from pathlib import Path
from typing import NamedTuple

import pytest
from absl import flags
from google.protobuf import json_format

from bert_tf.data import corpora
from tfx_pipeline import run
from tfx_pipeline.runners import build, checks, run_flags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

AFTER_VALIDATOR = {"Transform", "Trainer", "ServingBaseline", "Evaluator", "Pusher"}


def _write_task(folder: Path, rows: dict[str, list[tuple[str, str]]]) -> Path:
    """A text_classification task folder: train.tsv / dev.tsv of (text, label) rows."""
    folder.mkdir(parents=True)
    for name, split_rows in rows.items():
        lines = ["text\tlabel"] + [f"{text}\t{label}" for text, label in split_rows]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _args(data: Path, root: Path, minilm_dir: Path, pipeline_helpers, *extra: str) -> list[str]:
    """The README's classify command on `data`, pipeline root and serving folder under `root`."""
    paths = {"data": data, "runs/tfx_cls": root / "pipeline", "runs/serving": root / "serving"}
    return [
        *pipeline_helpers.readme_pipeline_args("classify", paths, minilm_dir),
        "--max_seq_length=32",
        *extra,
    ]


def _run_to_validator(args: list[str]) -> None:
    """`python -m tfx_pipeline.run <args>`'s pipeline on the local runner, up to ExampleValidator."""
    from tfx import v1 as tfx
    from tfx.orchestration import pipeline as tfx_pipeline

    flag_values = flags.FlagValues()
    run_flags.define_flags(flag_values)
    flag_values(["tfx_pipeline.run", *args])
    checks.check_flags(flag_values)
    built = build.build_pipeline(flag_values)
    options = tfx_pipeline.RunOptions(to_nodes=["ExampleValidator"])
    tfx.orchestration.LocalDagRunner().run(built, run_options=options)


def _stopped_at_validator(args: list[str], root: Path, pipeline_helpers) -> str:
    """Runs the whole pipeline, which must stop at ExampleValidator with nothing after it run
    and nothing pushed; returns the one-line error."""
    with pytest.raises(SystemExit) as exited:
        pipeline_helpers.run_in_process(run, *args)
    message = str(exited.value.code)
    assert message.startswith("error: ExampleValidator: ") and "\n" not in message
    assert "the run stops before Transform: " in message
    states = pipeline_helpers.node_states(root / "pipeline" / "metadata.sqlite")[-1]
    assert states["ExampleValidator"] == "FAILED"
    assert not AFTER_VALIDATOR & set(states), states
    assert not list((root / "serving").glob("*/*/saved_model.pb"))
    return message


@pytest.fixture(scope="module")
def polarity(gensim_dir) -> list[tuple[str, str]]:
    """gensim's Pang & Lee polarity sample (200 sentences, half positive) as (text, label)."""
    examples = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    random.Random(0).shuffle(examples)
    return [(text, "pos" if label else "neg") for text, label in examples]


class CleanRun(NamedTuple):
    root: Path
    # Read right after the run: the drift test runs the next span in the same pipeline root
    # (another SchemaGen output, statistics, a failed run; tests run in any order).
    states: dict[str, str]
    anomalies: list  # ML Metadata's ExampleAnomalies artifacts
    statistics: list  # its ExampleStatistics artifacts
    accepted: list[str]  # accepted_statistics/*/accepted.json
    schema_dirs: list[str]  # SchemaGen/schema/*


@pytest.fixture(scope="module")
def clean(tmp_path_factory, polarity, minilm_dir, pipeline_helpers) -> CleanRun:
    """The first span: clean data (140 train, 60 dev), run up to ExampleValidator."""
    root = tmp_path_factory.mktemp("clean")
    data = _write_task(root / "span-1", {"train": polarity[:140], "dev": polarity[140:]})
    _run_to_validator(_args(data, root, minilm_dir, pipeline_helpers))
    metadata = root / "pipeline" / "metadata.sqlite"
    store = pipeline_helpers.metadata(metadata)
    return CleanRun(
        root,
        pipeline_helpers.node_states(metadata)[-1],
        store.get_artifacts_by_type("ExampleAnomalies"),
        store.get_artifacts_by_type("ExampleStatistics"),
        glob.glob(str(root / "pipeline/ExampleValidator/accepted_statistics/*/accepted.json")),
        glob.glob(str(root / "pipeline/SchemaGen/schema/*")),
    )


def test_clean_data_passes_the_validator_and_becomes_the_drift_baseline(clean):
    assert clean.states["ExampleValidator"] == "COMPLETE"
    (anomalies,) = clean.anomalies
    blessed = json_format.MessageToDict(anomalies.custom_properties["blessed"].struct_value)
    assert blessed.get("__value__", blessed) == {"train": 1, "eval": 1}
    accepted = clean.accepted
    assert len(accepted) == 1
    (statistics,) = clean.statistics
    assert json.loads(Path(accepted[0]).read_text())["statistics"] == statistics.uri


def test_an_unseen_label_stops_the_run_at_the_validator(
    clean, tmp_path, polarity, minilm_dir, pipeline_helpers
):
    """Against the clean run's schema (--schema_dir): "neutral" in every tenth row."""
    (schema_dir,) = clean.schema_dirs
    rows = [(t, "neutral" if i % 10 == 0 else label) for i, (t, label) in enumerate(polarity)]
    data = _write_task(tmp_path / "data", {"train": rows[:140], "dev": rows[140:]})
    args = _args(data, tmp_path, minilm_dir, pipeline_helpers, f"--schema_dir={schema_dir}")
    message = _stopped_at_validator(args, tmp_path, pipeline_helpers)
    for split in ("train", "eval"):
        assert f"split '{split}', feature 'label': Non-boolean values" in message


def test_empty_texts_stop_the_run_at_the_validator_naming_them(
    clean, tmp_path, polarity, minilm_dir, pipeline_helpers
):
    """Against the clean run's schema: three training sentences are empty."""
    (schema_dir,) = clean.schema_dirs
    rows = [("" if i in (3, 50, 99) else t, label) for i, (t, label) in enumerate(polarity)]
    data = _write_task(tmp_path / "data", {"train": rows[:140], "dev": rows[140:]})
    args = _args(data, tmp_path, minilm_dir, pipeline_helpers, f"--schema_dir={schema_dir}")
    message = _stopped_at_validator(args, tmp_path, pipeline_helpers)
    assert message.startswith("error: ExampleValidator: 1 anomaly against the schema, the run")
    assert message.endswith(
        "split 'train', feature 'text_a': Empty texts (3 examples with an empty 'text_a')"
    )


def test_a_drifting_label_distribution_in_the_next_span_stops_the_run(
    clean, polarity, minilm_dir, pipeline_helpers
):
    """The next span in the clean run's pipeline root: the same sentences, the training labels
    90% "pos" (the first span: 50%). The label is an integer (the class index), so TFDV
    measures Jensen-Shannon divergence on it: 0.147 from the accepted span, above the default
    0.1."""
    shares = [(t, "neg" if i % 10 == 0 else "pos") for i, (t, _) in enumerate(polarity[:140])]
    root = clean.root
    data = _write_task(root / "span-2", {"train": shares, "dev": polarity[140:]})
    message = _stopped_at_validator(
        _args(data, root, minilm_dir, pipeline_helpers), root, pipeline_helpers
    )
    (baseline,) = glob.glob(str(root / "pipeline/ExampleValidator/accepted_statistics/*"))
    assert f"against the schema and the previous span ({baseline})" in message
    assert "split 'train', feature 'label': High approximate Jensen-Shannon divergence" in message
    assert "above the threshold 0.1" in message
    assert "split 'eval'" not in message  # the dev labels did not move
