"""The Tuner's grid (tfx_pipeline.tuning) and options, without a pipeline: the grid search walks
every combination and picks the best, failures stop it, bad grids are named. The pipelines'
Tuner runs in test_pipelines.py (classify) and test_squad_pipeline.py."""

from __future__ import annotations

import json
import re

import keras_tuner
import numpy as np
import pytest
from PIL import Image
from tfx.components.tuner import executor as tuner_executor
from tfx.types import standard_artifacts

from tfx_pipeline import configs, tuning, tuning_grids
from tfx_pipeline.components.tuner import plot_results

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def test_search_space_is_the_papers_grid_narrowed_by_the_options():
    space = tuning.search_space(vars(configs.ClassificationOptions()))
    assert {hp.name: list(hp.values) for hp in space.space} == {
        "learning_rate": [5e-5, 4e-5, 3e-5, 2e-5],
        "train_batch_size": [16, 32],
        "num_train_epochs": [2.0, 3.0, 4.0],
    }
    narrowed = configs.ClassificationOptions(tune_learning_rates="1e-4", tune_train_batch_sizes="8")
    space = tuning.search_space(vars(narrowed))
    assert [list(hp.values) for hp in space.space] == [[1e-4], [8], [2.0, 3.0, 4.0]]


def test_grid_search_tries_every_combination_and_keeps_the_best(tmp_path):
    options = vars(
        configs.SquadOptions(tune_learning_rates="5e-5,3e-5,2e-5", tune_num_train_epochs="2,3")
    )
    tried = []

    def train_and_score(values, trial_dir):
        lr, batch, epochs = (values[k] for k in tuning_grids.TUNING_GRIDS)
        tried.append((lr, batch, epochs, trial_dir))
        # Best at lr 3e-5, batch 32, 3 epochs: each value counts.
        return -abs(lr - 3e-5) * 1e4 - abs(epochs - 3) + 0.1 * (batch == 32)

    result = tuning.tuner_fn_result(train_and_score, "dev_f1", options, str(tmp_path))
    result.tuner.search(**result.fit_kwargs)
    assert sorted(t[:3] for t in tried) == sorted(
        (lr, b, e) for lr in (5e-5, 3e-5, 2e-5) for b in (16, 32) for e in (2.0, 3.0)
    )
    assert len({d for *_, d in tried}) == 12  # a folder per trial
    # What TFX's Tuner executor writes from it: the best values, every trial's score.
    outputs = {"best_hyperparameters": standard_artifacts.HyperParameters()}
    outputs["tuner_results"] = standard_artifacts.TunerResults()
    for key, artifact in outputs.items():
        artifact.uri = str(tmp_path / key)
    tuner_executor.write_best_hyperparameters(result.tuner, {k: [a] for k, a in outputs.items()})
    written = json.loads((tmp_path / "best_hyperparameters/best_hyperparameters.txt").read_text())
    assert written["values"] == {
        "learning_rate": 3e-5,
        "train_batch_size": 32,
        "num_train_epochs": 3.0,
    }
    trials = json.loads((tmp_path / "tuner_results/tuner_results.json").read_text())
    assert len(trials) == 12 and max(t["score"] for t in trials) == trials[0]["score"]
    best = result.tuner.get_best_hyperparameters()[0]
    assert best.values == {"learning_rate": 3e-5, "train_batch_size": 32, "num_train_epochs": 3.0}
    # What the Trainer then trains with: TFX hands it the best config as fn_args.hyperparameters.
    trained = tuning.apply_hyperparameters(options, json.loads(json.dumps(best.get_config())))
    assert (trained["learning_rate"], trained["num_train_epochs"]) == (3e-5, 3.0)
    assert tuning.apply_hyperparameters(options, None) is options


def test_a_failing_trial_stops_the_search_naming_it(tmp_path):
    options = vars(configs.ClassificationOptions(tune_learning_rates="5e-5,2e-5"))

    def train_and_score(values, trial_dir):
        raise FileNotFoundError("no transformed examples match ['x/*']")

    result = tuning.tuner_fn_result(train_and_score, "dev_accuracy", options, str(tmp_path))
    with pytest.raises(keras_tuner.errors.FatalError, match=r"Tuner trial .*learning_rate.*x/"):
        result.tuner.search()


def test_unknown_hyperparameters_are_an_error():
    with pytest.raises(ValueError, match="unknown \\['dropout'\\]"):
        tuning.apply_hyperparameters({}, {"dropout": 0.1})


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("tune_learning_rates", "5e-5,,x", "--tune_learning_rates: expected comma-separated"),
        ("tune_learning_rates", "", "--tune_learning_rates: expected comma-separated"),
        ("tune_train_batch_sizes", "16,0", "--tune_train_batch_sizes: expected .* integers"),
        ("tune_train_batch_sizes", "16.5", "--tune_train_batch_sizes: expected .* integers"),
        ("tune_num_train_epochs", "2,2", "--tune_num_train_epochs: expected comma-separated"),
        ("tune_num_train_epochs", "2,inf", "--tune_num_train_epochs: expected comma-separated"),
    ],
)
def test_bad_grids_are_named(field, value, expected):
    options = configs.ClassificationOptions(tune=True, **{field: value})
    (error,) = configs.check_options("classify", options)
    assert error.startswith(expected.split(" ")[0])
    assert re.match(expected, error), error
    with pytest.raises(ValueError, match=expected):
        tuning.search_space(vars(options))
    # Not checked without --tune (the grid is unused then).
    assert configs.check_options("classify", configs.ClassificationOptions(**{field: value})) == []


def test_epochs_to_tune_need_an_epoch_length():
    options = configs.SquadOptions(tune=True, train_steps=5, tune_num_train_epochs="2,3")
    assert configs.check_options("squad", options) == [
        "--tune_num_train_epochs: '2,3' has no effect with --train_steps=5 (a fixed length): "
        "give one value, or --train_steps=0"
    ]
    options.tune_num_train_epochs = "2"
    assert configs.check_options("squad", options) == []


def test_results_plot_marks_the_best_trial(tmp_path):
    results = [
        {"trial_id": "0", "score": 0.61, "learning_rate": 5e-5, "train_batch_size": 16},
        {"trial_id": "1", "score": 0.74, "learning_rate": 2e-5, "train_batch_size": 16},
    ]
    path = tmp_path / "tuner_results.png"
    path.write_bytes(plot_results(results, "dev_accuracy"))
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    # tab:orange (the best bar) and tab:blue (the other) both drawn.
    for rgb in ((255, 127, 14), (31, 119, 180)):
        assert (np.abs(image - rgb).sum(axis=-1) < 30).sum() > 100, rgb
