"""BERT's optimizer: AdamW (or LAMB) on a linear-warmup, linear-decay learning-rate schedule.

As google-research/bert `optimization.py`: the learning rate rises linearly from 0 to its peak
over `num_warmup_steps`, then falls linearly to 0 at `num_train_steps`; Adam with beta1 0.9,
beta2 0.999, epsilon 1e-6, decoupled weight decay 0.01 scaled by the learning rate and not applied
to LayerNorm parameters or biases, and gradients clipped to global norm 1.0.

Both optimizers are Keras 3's own (`keras.optimizers.AdamW`, `keras.optimizers.Lamb`); BERT's
exclusions go through `exclude_from_weight_decay`, which matches the variables' short names
(`gamma`/`beta` of LayerNorm, `bias`, the MLM head's `output_bias`). One difference remains:
google-research's Adam has no bias correction, Keras' (like TF Model Garden's) has; it changes
only the first few hundred steps, which warmup already keeps small.

Example:

```python
from bert_tf.training.optimization import create_optimizer

optimizer = create_optimizer(2e-5, num_train_steps=1000, num_warmup_steps=100)
float(optimizer.learning_rate)  # 0.0 before the first step
```
"""

from __future__ import annotations

import keras
from keras import ops

OPTIMIZERS = ("adamw", "lamb")
# Substrings of the short variable names that get no weight decay (google-research excludes
# "LayerNorm", "layer_norm" and "bias"; Keras names LayerNorm parameters gamma/beta).
WEIGHT_DECAY_EXCLUDED = ("gamma", "beta", "bias")


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `learning_rate` over `num_warmup_steps`, then linear decay to 0.

    `lr(step) = learning_rate * step / num_warmup_steps` while `step < num_warmup_steps`, else
    `learning_rate * (1 - step / num_train_steps)` (google-research's polynomial decay of power 1
    to 0 over all `num_train_steps`), clipped at 0 past the end. Warmup longer than training is
    allowed, as in google-research: the rate then only rises, to
    `learning_rate * num_train_steps / num_warmup_steps` at the last step.

    Example:

        schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
        float(schedule(5)), float(schedule(10)), float(schedule(55))  # 5e-5, 9e-5, 4.5e-5
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int = 0):
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        # Above num_train_steps is fine (the warmup branch then never ends; no division by 0).
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decayed = self.learning_rate * ops.maximum(1.0 - step / self.num_train_steps, 0.0)
        if not self.num_warmup_steps:
            return decayed
        warmup = self.learning_rate * step / self.num_warmup_steps
        return ops.where(step < self.num_warmup_steps, warmup, decayed)

    def get_config(self) -> dict:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
        }


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int,
    optimizer_type: str = "adamw",
    weight_decay: float = 0.01,
    global_clipnorm: float | None = 1.0,
) -> keras.optimizers.Optimizer:
    """BERT's AdamW (or LAMB, You et al. 2019) with `WarmupLinearDecay`.

    Wrap the result in `keras.optimizers.LossScaleOptimizer` for `mixed_float16`
    (`bert_tf.training.Trainer` does).
    """
    if optimizer_type not in OPTIMIZERS:
        raise ValueError(f"optimizer_type must be one of {OPTIMIZERS}, got {optimizer_type!r}")
    schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
    optimizer_class = keras.optimizers.AdamW if optimizer_type == "adamw" else keras.optimizers.Lamb
    optimizer = optimizer_class(
        learning_rate=schedule,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay=weight_decay,
        global_clipnorm=global_clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=list(WEIGHT_DECAY_EXCLUDED))
    return optimizer
