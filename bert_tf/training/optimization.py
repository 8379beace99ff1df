"""BERT's optimizer: AdamW (or LAMB) on a linear-warmup, linear-decay learning-rate schedule.

As google-research/bert `optimization.py`: the learning rate rises linearly from 0 to its peak
over `num_warmup_steps`, then falls linearly to 0 at `num_train_steps`; Adam with beta1 0.9,
beta2 0.999, epsilon 1e-6, decoupled weight decay 0.01 scaled by the learning rate and not applied
to LayerNorm parameters or biases, and gradients clipped to global norm 1.0.

AdamW is `BertAdamW`, Keras 3's `keras.optimizers.AdamW` with two switches; LAMB is
`BertLamb`, Keras' `keras.optimizers.Lamb`. Both make embedding gradients dense first: Keras
miscounts their repeated ids in the clipping norm and in Adam's second moment. BERT's
exclusions go through `exclude_from_weight_decay`, which matches the variables' short names
(`gamma`/`beta` of LayerNorm, `bias`, the MLM head's `output_bias`): the same parameters as
HF's `["bias", "LayerNorm.weight"]` groups.

Where google-research's recipe (ours by default) and HF transformers' (`torch.optim.AdamW` with
`get_linear_schedule_with_warmup`) differ, `create_optimizer` has an option (docs/hf_parity.md
measures each one's effect; with all of them set HF's way, 200 steps of MiniLM fine-tuning match
HF's loss step by step):

| option | ours (default) | HF |
|---|---|---|
| `epsilon` | 1e-6 (google-research) | 1e-8 (torch, HF `Trainer`) |
| `epsilon_after_bias_correction` | False: Keras adds epsilon to the uncorrected `sqrt(v)` (the paper's "epsilon hat") | True: torch adds it to `sqrt(v / (1 - beta2^t))` |
| `decay_from_warmup_end` | False: `lr * (1 - step / num_train_steps)` after warmup (google-research) | True: `lr * (T - step) / (T - warmup)` |
| `bias_correction` | True (Keras, TF Model Garden, torch) | True; False is google-research's own Adam |
| `weight_decay_exclusions` | LayerNorm and biases | the same |

Example:

```python
from bert_tf.training.optimization import create_optimizer

optimizer = create_optimizer(2e-5, num_train_steps=1000, num_warmup_steps=100)
float(optimizer.learning_rate)  # 0.0 before the first step
```
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf
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

    `decay_from_warmup_end=True` is HF's `get_linear_schedule_with_warmup` instead: after warmup
    `learning_rate * (num_train_steps - step) / (num_train_steps - num_warmup_steps)`, which
    starts at the peak rather than at `1 - num_warmup_steps / num_train_steps` of it. Both
    give step `s` (counted from 0) the rate at `s`, so the first step's is 0 with warmup and the
    last one's is `learning_rate / num_train_steps` (google) or `/ (T - warmup)` (HF), never 0.

    Example:

        schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
        float(schedule(5)), float(schedule(10)), float(schedule(55))  # 5e-5, 9e-5, 4.5e-5
    """

    def __init__(
        self,
        learning_rate: float,
        num_train_steps: int,
        num_warmup_steps: int = 0,
        decay_from_warmup_end: bool = False,
    ):
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
        # Above num_train_steps is fine (the warmup branch then never ends; no division by 0).
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.decay_from_warmup_end = decay_from_warmup_end

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.decay_from_warmup_end:
            # HF's get_linear_schedule_with_warmup: from the peak at the warmup's end to 0.
            span = max(1, self.num_train_steps - self.num_warmup_steps)
            fraction = (self.num_train_steps - step) / span
        else:
            fraction = 1.0 - step / self.num_train_steps
        decayed = self.learning_rate * ops.maximum(fraction, 0.0)
        if not self.num_warmup_steps:
            return decayed
        warmup = self.learning_rate * step / self.num_warmup_steps
        return ops.where(step < self.num_warmup_steps, warmup, decayed)

    def get_config(self) -> dict:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "decay_from_warmup_end": self.decay_from_warmup_end,
        }


class _DenseGradients:
    """Embedding gradients made dense before Keras clips them or updates with them.

    An embedding lookup's gradient is a `tf.IndexedSlices`: one slice per looked-up id, an id
    as often as it occurs in the batch ([CLS] and [SEP] in every row, one token type
    everywhere). Keras' optimizers treat the slices as if the ids were distinct in two places:
    the global norm `global_clipnorm` clips by adds up the slices' squares (so does TF's
    `tf.linalg.global_norm`), and Adam's `square(gradient)` squares each slice before they are
    summed into the second moment. Neither is the gradient's. Summed into the dense gradient
    first (Adam densifies it anyway), both are: the norm is `torch.nn.utils.clip_grad_norm_`'s
    (and the Trainer's multi-replica clip's), the moments are torch's.
    """

    # Set by `Trainer` when it all-reduces the gradients itself (once, before the clip), so
    # that Keras applies them without reducing them again (Keras 3 has no public switch).
    gradients_aggregated = False

    def _clip_gradients(self, grads):
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if self.gradients_aggregated:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)


class _LearningRateMultipliers:
    """A learning-rate factor per variable: Keras optimizers have one rate for all. Continued
    pretraining from an encoder-only checkpoint needs its fresh masked-LM head to learn faster
    than the loaded encoder under it (`Trainer`'s `fresh_learning_rate_multiplier`). The factor
    scales the scheduled rate of each step (warmup and decay included) in the update; Keras'
    decoupled weight decay keeps the unscaled rate."""

    def set_learning_rate_multiplier(self, variables, multiplier: float) -> None:
        """Every step moves `variables` with `multiplier` x the scheduled learning rate; set
        before the first step is traced."""
        factors = dict(getattr(self, "_learning_rate_multipliers", {}))
        factors.update({self._var_key(v): float(multiplier) for v in variables})
        self._learning_rate_multipliers = factors

    def _scaled_learning_rate(self, variable, learning_rate):
        factor = getattr(self, "_learning_rate_multipliers", {}).get(self._var_key(variable), 1.0)
        return learning_rate if factor == 1.0 else learning_rate * factor


@keras.saving.register_keras_serializable(package="bert_tf")
class BertLamb(_LearningRateMultipliers, _DenseGradients, keras.optimizers.Lamb):
    """`keras.optimizers.Lamb` on dense gradients (`_DenseGradients`), with per-variable
    learning-rate factors (`_LearningRateMultipliers`)."""

    def update_step(self, gradient, variable, learning_rate):
        return super().update_step(
            gradient, variable, self._scaled_learning_rate(variable, learning_rate)
        )


@keras.saving.register_keras_serializable(package="bert_tf")
class BertAdamW(_LearningRateMultipliers, _DenseGradients, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` on dense gradients (`_DenseGradients`), with per-variable
    learning-rate factors (`_LearningRateMultipliers`) and the two switches where Adam
    implementations differ.

    With `m`, `v` the moment estimates after step `t` (counted from 1), `lr` the step's rate and
    `bc1 = 1 - beta_1^t`, `bc2 = 1 - beta_2^t`, the variable moves by

    - `lr * sqrt(bc2) / bc1 * m / (sqrt(v) + epsilon)`: the defaults, exactly Keras' (and TF
      Model Garden's) AdamW;
    - `lr / bc1 * m / (sqrt(v / bc2) + epsilon)` with `epsilon_after_bias_correction=True`:
      `torch.optim.AdamW`, which HF transformers uses. The two differ only in epsilon's weight,
      which is `1 / sqrt(bc2)` times larger in Keras' (31.6x at step 1, 2.3x at step 200);
    - `lr * m / (sqrt(v) + epsilon)` with `bias_correction=False`: google-research/bert's
      `AdamWeightDecayOptimizer` (epsilon's place then does not matter).

    Weight decay is Keras' in every case: `variable -= lr * weight_decay * variable` before the
    Adam step, as torch's `p.mul_(1 - lr * weight_decay)` and google-research's
    `lr * (update + weight_decay * variable)`.
    """

    def __init__(
        self,
        *args,
        bias_correction: bool = True,
        epsilon_after_bias_correction: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if self.amsgrad and (epsilon_after_bias_correction or not bias_correction):
            raise ValueError("amsgrad takes only the default Adam (Keras')")
        self.bias_correction = bias_correction
        self.epsilon_after_bias_correction = epsilon_after_bias_correction

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = self._scaled_learning_rate(variable, learning_rate)
        if self.bias_correction and not self.epsilon_after_bias_correction:
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        if self.bias_correction:  # torch's placement of epsilon
            local_step = ops.cast(self.iterations + 1, dtype)
            bc1 = 1 - ops.power(ops.cast(self.beta_1, dtype), local_step)
            bc2 = 1 - ops.power(ops.cast(self.beta_2, dtype), local_step)
            denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bc2)), self.epsilon)
            step_size = lr / bc1
        else:
            denominator = ops.add(ops.sqrt(v), self.epsilon)
            step_size = lr
        self.assign_sub(variable, ops.divide(ops.multiply(m, step_size), denominator))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "bias_correction": self.bias_correction,
            "epsilon_after_bias_correction": self.epsilon_after_bias_correction,
        }


# `--optimizer_recipe`: create_optimizer's options for each recipe; "google" is its defaults.
RECIPES = {
    "google": {},
    "hf": {"epsilon": 1e-8, "epsilon_after_bias_correction": True, "decay_from_warmup_end": True},
}


def recipe_options(recipe: str, optimizer_type: str = "adamw") -> dict:
    """`create_optimizer`'s keyword options for `recipe` (a key of `RECIPES`). LAMB, which
    torch does not have, takes the recipe's epsilon and schedule."""
    if recipe not in RECIPES:
        raise ValueError(f"optimizer recipe must be one of {tuple(RECIPES)}, got {recipe!r}")
    kwargs = dict(RECIPES[recipe])
    if optimizer_type == "lamb":
        kwargs.pop("epsilon_after_bias_correction", None)  # an AdamW switch
    return kwargs


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int,
    optimizer_type: str = "adamw",
    weight_decay: float = 0.01,
    global_clipnorm: float | None = 1.0,
    *,
    epsilon: float = 1e-6,
    weight_decay_exclusions: Sequence[str] = WEIGHT_DECAY_EXCLUDED,
    decay_from_warmup_end: bool = False,
    bias_correction: bool = True,
    epsilon_after_bias_correction: bool = False,
) -> keras.optimizers.Optimizer:
    """BERT's AdamW (`BertAdamW`; or LAMB, You et al. 2019) with `WarmupLinearDecay`.

    The keyword-only options are where google-research's recipe (the defaults) and HF's differ
    (module docstring); HF's: `epsilon=1e-8, decay_from_warmup_end=True,
    epsilon_after_bias_correction=True`. `weight_decay_exclusions`: substrings of the short
    variable names that get no weight decay (`()`: decay every variable). LAMB takes only
    `epsilon`, `weight_decay_exclusions` and `decay_from_warmup_end`.

    Wrap the result in `keras.optimizers.LossScaleOptimizer` for `mixed_float16`
    (`bert_tf.training.Trainer` does).
    """
    if optimizer_type not in OPTIMIZERS:
        raise ValueError(f"optimizer_type must be one of {OPTIMIZERS}, got {optimizer_type!r}")
    schedule = WarmupLinearDecay(
        learning_rate, num_train_steps, num_warmup_steps, decay_from_warmup_end
    )
    common = {
        "learning_rate": schedule,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": epsilon,
        "weight_decay": weight_decay,
        "global_clipnorm": global_clipnorm,
    }
    if optimizer_type == "adamw":
        optimizer = BertAdamW(
            **common,
            bias_correction=bias_correction,
            epsilon_after_bias_correction=epsilon_after_bias_correction,
        )
    else:
        if not bias_correction or epsilon_after_bias_correction:
            raise ValueError(
                "bias_correction and epsilon_after_bias_correction are AdamW options; "
                "LAMB takes its defaults"
            )
        optimizer = BertLamb(**common)
    if weight_decay_exclusions:
        optimizer.exclude_from_weight_decay(var_names=list(weight_decay_exclusions))
    return optimizer
