"""Training: the custom loop every script and the pipelines' Trainer share.

- `runtime`: before the model is built: the `tf.distribute` strategy (`--distribution_strategy`,
  google's TPU flags), the Keras precision policy, seeds and op determinism;
- `optimization`: AdamW / LAMB with warmup + linear decay and global-norm clipping;
- `trainer`: `Trainer` (steps per loop, gradient accumulation, mixed precision, XLA, resume, the
  NaN guard) and `make_trainer`, the one way scripts and pipelines build it;
- `checkpointing`: the `Trainer`'s `ckpt-<step>` checkpoints, and `restore_latest` for evaluation;
- `training_log`: `training_log.json` (history, run settings, the same-run check on resume) and
  `training_curve.png` (`plot_history`);
- `progress`: the log lines and TensorBoard scalars every `log_steps`;
- `evaluation`: `predict` and `write_eval_results`.
"""

from bert_tf.training.checkpointing import restore_latest
from bert_tf.training.evaluation import EVAL_RESULTS_FILE, predict, write_eval_results
from bert_tf.training.runtime import (
    PRECISIONS,
    get_strategy,
    seed_and_precision,
    set_precision,
    set_seed,
    strategy_from_flags,
)
from bert_tf.training.trainer import LossFn, Trainer, make_trainer
from bert_tf.training.training_log import CURVE_FILE, LOG_FILE, plot_history

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
    "seed_and_precision",
    "set_precision",
    "set_seed",
    "strategy_from_flags",
    "write_eval_results",
]
