"""Training: the custom loop every script and the pipelines' Trainer share.

- `runtime`: before the model is built: the `tf.distribute` strategy (`--distribution_strategy`,
  google's TPU flags), the Keras precision policy, seeds and op determinism;
- `optimization`: AdamW / LAMB with warmup + linear decay and global-norm clipping;
- `trainer`: `Trainer` (steps per loop, gradient accumulation, mixed precision, XLA, checkpoints
  and resume, logs and curves) and `make_trainer`, the one way scripts and pipelines build it;
  `predict`, `restore_latest` and `write_eval_results` for evaluation.
"""

from bert_tf.training.runtime import (
    PRECISIONS,
    get_strategy,
    set_precision,
    set_seed,
    strategy_from_flags,
)
from bert_tf.training.trainer import (
    CURVE_FILE,
    EVAL_RESULTS_FILE,
    LOG_FILE,
    LossFn,
    Trainer,
    make_trainer,
    plot_history,
    predict,
    restore_latest,
    write_eval_results,
)

__all__ = [
    "CURVE_FILE",
    "EVAL_RESULTS_FILE",
    "LOG_FILE",
    "PRECISIONS",
    "LossFn",
    "Trainer",
    "get_strategy",
    "make_trainer",
    "plot_history",
    "predict",
    "restore_latest",
    "set_precision",
    "set_seed",
    "strategy_from_flags",
    "write_eval_results",
]
