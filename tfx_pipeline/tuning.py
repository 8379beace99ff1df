"""The fine-tuning search the BERT paper describes, for TFX's Tuner: a KerasTuner grid.

"We select the best learning rate (among 5e-5, 4e-5, 3e-5 and 2e-5) on the Dev set", batch size
{16, 32}, {2, 3, 4} epochs (Devlin et al. 2018, section 4.1 and appendix A.3): the `tune_*`
options (comma-separated values, a flag narrows the grid) span a `keras_tuner.HyperParameters`
space that `GridSearch` walks, one trial per combination, each trial training from the same
warm start and scoring the dev split with the task's official metric. TFX's Tuner executor
writes the best trial's values (`best_hyperparameters.txt`) and every trial's score
(`tuner_results.json`); the Trainer reads the former as `fn_args.hyperparameters`, which
`apply_hyperparameters` lays over its options.

Lives outside `tfx_pipeline/modules/` for the reason trainer_lib does (library code, imported by
the module functions `tuner_fn`).

Example:

    from tfx_pipeline import configs, tuning
    options = configs.ClassificationOptions(tune_learning_rates="5e-5,2e-5")
    space = tuning.search_space(vars(options))
    space.values  # {'learning_rate': 5e-05, 'train_batch_size': 16, 'num_train_epochs': 2.0}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras_tuner
from absl import logging
from tfx.components.tuner.component import TunerFnResult

from tfx_pipeline import tuning_grids


def search_space(options: dict[str, Any]) -> keras_tuner.HyperParameters:
    """The grid of the options' `tune_*` values, each a KerasTuner Choice named as the option
    it sets (learning_rate, train_batch_size, num_train_epochs)."""
    space = keras_tuner.HyperParameters()
    for name, (grid, kind) in tuning_grids.TUNING_GRIDS.items():
        space.Choice(name, tuning_grids.grid_values(options[grid], kind, grid), ordered=True)
    return space


def apply_hyperparameters(
    options: dict[str, Any], hyperparameters: dict[str, Any] | None
) -> dict[str, Any]:
    """`options` with a trial's or the Tuner's best values laid over them; `hyperparameters` is
    a HyperParameters config (TFX's `fn_args.hyperparameters`) or plain values."""
    if not hyperparameters:
        return options
    if "space" in hyperparameters:
        values = keras_tuner.HyperParameters.from_config(hyperparameters).values
    else:
        values = hyperparameters
    unknown = sorted(set(values) - set(tuning_grids.TUNING_GRIDS))
    if unknown:
        raise ValueError(
            f"hyperparameters: unknown {unknown}; expected {sorted(tuning_grids.TUNING_GRIDS)}"
        )
    return {**options, **values}


class GridSearch(keras_tuner.engine.base_tuner.BaseTuner):
    """Every combination of `hyperparameters`, scored by `train_and_score(values, trial_dir)`
    (higher is better; `objective` names the score). A failing trial stops the search (KerasTuner
    would otherwise retry and log it), so a broken configuration is an error, not a lost trial.
    """

    def __init__(
        self,
        train_and_score: Callable[[dict[str, Any], str], float],
        objective: str,
        hyperparameters: keras_tuner.HyperParameters,
        directory: str,
        seed: int = 0,
    ):
        oracle = keras_tuner.oracles.GridSearchOracle(
            objective=keras_tuner.Objective(objective, direction="max"),
            # The whole grid (TFX's executor also reads max_trials to list the trials).
            max_trials=math.prod(len(hp.values) for hp in hyperparameters.space),
            hyperparameters=hyperparameters,
            seed=seed,
        )
        super().__init__(oracle, directory=directory, project_name="grid", overwrite=True)
        self._train_and_score = train_and_score
        self._objective = objective

    def run_trial(self, trial, *args, **kwargs) -> dict[str, float]:
        values = dict(trial.hyperparameters.values)
        try:
            score = float(self._train_and_score(values, self.get_trial_dir(trial.trial_id)))
        except Exception as error:
            raise keras_tuner.errors.FatalError(f"Tuner trial {values}: {error}") from error
        logging.info("Tuner trial %s: %s = %.4f", values, self._objective, score)
        return {self._objective: score}


def tuner_fn_result(
    train_and_score: Callable[[dict[str, Any], str], float],
    objective: str,
    options: dict[str, Any],
    working_dir: str,
) -> TunerFnResult:
    """What a module's `tuner_fn` returns: the grid of the options' `tune_*` values."""
    tuner = GridSearch(
        train_and_score,
        objective,
        search_space(options),
        directory=working_dir,
        seed=int(options["seed"]),
    )
    return TunerFnResult(tuner=tuner, fit_kwargs={})
