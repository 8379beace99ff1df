"""The Tuner's grids (`--tune_learning_rates`, `--tune_train_batch_sizes`,
`--tune_num_train_epochs`): which option each tunes, their parsing and their checks.

Light (standard library only), as `tfx_pipeline.configs`, which checks them with the other
options before TensorFlow or TFX is imported; `tfx_pipeline.tuning` builds the search space
from them.

Example:

    from tfx_pipeline.tuning_grids import grid_values
    grid_values("5e-5,2e-5", float, "tune_learning_rates")  # [5e-05, 2e-05]
"""

from __future__ import annotations

import math

# Option the Tuner tunes -> the option listing its grid values, and the values' type.
TUNING_GRIDS = {
    "learning_rate": ("tune_learning_rates", float),
    "train_batch_size": ("tune_train_batch_sizes", int),
    "num_train_epochs": ("tune_num_train_epochs", float),
}


def grid_values(text: str, kind: type, name: str) -> list:
    """ "5e-5,2e-5" -> [5e-05, 2e-05]; ValueError naming --`name` unless the values are distinct,
    positive and finite."""
    try:
        values = [kind(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0 < v < math.inf for v in values) or len(set(values)) < len(values):
        noun = "integers" if kind is int else "numbers"
        raise ValueError(
            f"--{name}: expected comma-separated distinct positive {noun}, got {text!r}"
        )
    return values


def tuning_errors(options) -> list[str]:
    """The --tune_* grids parse, and the epochs have an effect."""
    errors = []
    for grid, kind in TUNING_GRIDS.values():
        try:
            values = grid_values(getattr(options, grid), kind, grid)
        except ValueError as error:
            errors.append(str(error))
            continue
        if grid == "tune_num_train_epochs" and len(values) > 1 and options.train_steps:
            errors.append(
                f"--{grid}: {getattr(options, grid)!r} has no effect with --train_steps="
                f"{options.train_steps} (a fixed length): give one value, or --train_steps=0"
            )
    return errors
