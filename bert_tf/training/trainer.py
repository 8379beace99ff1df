"""A custom training loop shared by the fine-tuning and pre-training scripts.

`Trainer` runs `loss_fn(model, batch) -> (loss, metrics)` under a `tf.distribute` strategy:

- `steps_per_loop` optimizer steps per call of one `tf.function` (a `tf.range` loop over a
  distributed iterator, no Python per step), the forward/backward pass optionally XLA-compiled;
- gradient accumulation: each global batch is split into `gradient_accumulation_steps`
  micro-batches whose gradients are averaged before one optimizer step (same update as the
  whole batch at once, less memory);
- mixed precision: `mixed_float16` wraps the optimizer in `LossScaleOptimizer`, `mixed_bfloat16`
  needs no loss scaling;
- several replicas: one gradient all-reduce per step (bucketed; `all_reduce_dtype` may halve
  its bytes), then the clip of the summed gradient, the one-replica update;
- checkpoints `output_dir/ckpt-<step>` every `save_checkpoints_steps` (`checkpointing`: what
  they hold; a crash mid-write or a damaged latest one leaves the one before). Rerunning with the same
  `output_dir` resumes weights, optimizer, step and input position (the dataset skips the
  `step` batches already consumed: `tf.distribute` iterators cannot be checkpointed);
  `init_checkpoint` only initialises weights (any format `load_pretrained` reads). A resume
  must be the same run: `run_settings` (the seed, the optimizer) and the global batch size are
  kept in `training_log.json`, and other values are refused (`training_log`);
- multi-worker (`MultiWorkerMirroredStrategy`, cluster from `TF_CONFIG`, e.g. set by
  `bert_tf.launch`): every worker runs the same loop on its share of each global batch (the
  dataset is sharded by data, so the batches are those of a one-worker run); only the chief
  writes checkpoints, logs and summaries into `output_dir`, the others save into a temporary
  folder (saving takes part in collective ops, so every worker must save) that they delete at
  the end; every worker resumes from the chief's latest checkpoint in `output_dir`;
- a non-finite loss stops training with `FloatingPointError` before anything is saved;
- logs (absl) every `log_steps`: step, learning rate, loss, metrics, examples/s, ETA
  (`progress`); the same go to TensorBoard (`output_dir`), `training_log.json` and
  `training_curve.png` (`training_log`), rewritten on each checkpoint and at the end
  (atomically, through `bert_tf.fileio`);
- every file in `output_dir` gets the permissions a plain `open()` gives (0666 minus the umask;
  TF writes the checkpoints that way too), so a model server running as another user can read it.

Example:

```python
import keras, tensorflow as tf
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.training.optimization import create_optimizer
from bert_tf.training import Trainer, get_strategy

def loss_fn(model, batch):
    features, labels = batch
    logits = model(features, training=True)
    loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return tf.reduce_mean(loss), {}

strategy = get_strategy("one_device")
with strategy.scope():
    model = BertClassifier(build_encoder(BertConfig.from_preset("tiny")), num_classes=2)
    optimizer = create_optimizer(1e-4, num_train_steps=100, num_warmup_steps=10)
ids = tf.fill([64, 16], 1037)
features = {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids * 0}
data = tf.data.Dataset.from_tensor_slices((features, tf.zeros([64], tf.int32)))
trainer = Trainer(model, optimizer, loss_fn, "/tmp/run", strategy, save_checkpoints_steps=50)
trainer.train(data.repeat().batch(8, drop_remainder=True), num_train_steps=100)
```
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from bert_tf import checkpoints, fileio
from bert_tf.options import ALL_REDUCE_DTYPES, TrainingLoopOptions
from bert_tf.training import checkpointing, training_log
from bert_tf.training.optimization import create_optimizer, recipe_options
from bert_tf.training.progress import Progress

# Gradient buckets of the step's all-reduce (tf.distribute's `bytes_per_pack` hint, PyTorch
# DDP's 25 MB in spirit): each bucket is one collective that starts once its gradients exist,
# beside the backward pass still computing the others, instead of one concatenation of all.
ALL_REDUCE_PACK_BYTES = 32 << 20

LossFn = Callable[[keras.Model, Any], "tuple[tf.Tensor, dict[str, tf.Tensor]]"]


def make_trainer(
    model: keras.Model,
    loss_fn: LossFn,
    output_dir: str | os.PathLike,
    strategy: tf.distribute.Strategy,
    loop: TrainingLoopOptions,
    *,
    num_train_steps: int,
    num_warmup_steps: int,
    steps_per_loop: int,
    jit_compile: bool = False,
) -> Trainer:
    """The `Trainer` of every training script and of the pipelines' Trainer: the optimizer of
    `loop` (`create_optimizer`: warmup, then linear decay over `num_train_steps`) built under
    `strategy`, with `loop`'s checkpoint/log cadence and gradient accumulation. `model` must
    have been built under the same strategy; seed and precision are set before building it
    (`runtime.set_seed`, `runtime.set_precision`)."""
    with strategy.scope():
        optimizer = create_optimizer(
            loop.learning_rate,
            num_train_steps,
            num_warmup_steps,
            loop.optimizer,
            **recipe_options(loop.optimizer_recipe, loop.optimizer),
        )
    return Trainer(
        model,
        optimizer,
        loss_fn,
        output_dir,
        strategy,
        run_settings={
            "seed": loop.seed,
            "optimizer": loop.optimizer,
            "optimizer_recipe": loop.optimizer_recipe,
        },
        gradient_accumulation_steps=loop.gradient_accumulation_steps,
        all_reduce_dtype=loop.all_reduce_dtype,
        steps_per_loop=steps_per_loop,
        save_checkpoints_steps=loop.save_checkpoints_steps,
        log_steps=loop.log_steps,
        keep_checkpoint_max=loop.keep_checkpoint_max,
        jit_compile=jit_compile,
        head_learning_rate_multiplier=loop.head_learning_rate_multiplier,
    )


def _batch_size(dataset: tf.data.Dataset) -> int | None:
    """The static batch size of any component of the dataset's elements, if known."""
    sizes = {spec.shape[0] for spec in tf.nest.flatten(dataset.element_spec)} - {None}
    return sizes.pop() if len(sizes) == 1 else None


@tf.autograph.experimental.do_not_convert
def _log_untrained(paths: list[str]) -> None:
    """Logged while the step is traced; not converted, so the log line names this file (a
    converted call would be attributed to AutoGraph's api.py)."""
    logging.info("no gradient from the loss, not trained: %s", ", ".join(paths))


class Trainer:
    """Trains `model` with `optimizer` on `loss_fn`; see the module docstring.

    Args:
        model: a `bert_tf.modeling.models` task model (or `BertEncoder`), built under
            `strategy.scope()`.
        optimizer: e.g. `bert_tf.training.optimization.create_optimizer(...)`, built under the
            same scope; wrapped in a `LossScaleOptimizer` when the global policy is `mixed_float16`.
        loss_fn: `(model, batch) -> (loss, metrics)`: a scalar mean loss over the (micro-)batch
            of one replica, and a dict of scalar metrics averaged the same way. It must call the
            model with `training=True`.
        output_dir: checkpoints, TensorBoard events, `training_log.json`, `training_curve.png`.
        strategy: a `tf.distribute` strategy (default: the current one).
        gradient_accumulation_steps: micro-batches per optimizer step; must divide the
            per-replica batch size.
        all_reduce_dtype: with several replicas, the dtype of the step's one gradient
            all-reduce (float32, or bfloat16/float16: half the bytes; cast back to float32
            before the clip and the update). Optimizers of `optimization` only; any other
            Keras optimizer gets Keras' own all-reduce after a first one for the clip.
        steps_per_loop: optimizer steps per `tf.function` call (bounded by log/save points).
        save_checkpoints_steps: checkpoint every this many steps (and at the end).
        log_steps: log/summarise every this many steps (and at the end).
        keep_checkpoint_max: checkpoints kept in `output_dir`.
        head_learning_rate_multiplier: the learning-rate factor of the variables an
            `init_checkpoint` lacks (task heads, pre-training heads of an encoder-only
            checkpoint); the optimizer must take per-variable factors
            (`optimization.BertAdamW` / `BertLamb`) unless it is 1.
        jit_compile: XLA-compile the forward and backward pass.
        run_settings: flag values that fix the run's course (`make_trainer`: seed, optimizer,
            optimizer_recipe), kept in `training_log.json`; resuming `output_dir` with another
            value raises ValueError (None, an unseeded run, matches any).
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss_fn: LossFn,
        output_dir: str | os.PathLike,
        strategy: tf.distribute.Strategy | None = None,
        *,
        gradient_accumulation_steps: int = 1,
        all_reduce_dtype: str = "float32",
        steps_per_loop: int = 100,
        save_checkpoints_steps: int = 1000,
        log_steps: int = 100,
        keep_checkpoint_max: int = 5,
        jit_compile: bool = False,
        head_learning_rate_multiplier: float = 1.0,
        run_settings: dict[str, Any] | None = None,
    ):
        if not head_learning_rate_multiplier > 0:
            raise ValueError(
                "head_learning_rate_multiplier must be positive, got "
                f"{head_learning_rate_multiplier}"
            )
        for name, value in (
            ("gradient_accumulation_steps", gradient_accumulation_steps),
            ("steps_per_loop", steps_per_loop),
            ("save_checkpoints_steps", save_checkpoints_steps),
            ("log_steps", log_steps),
            ("keep_checkpoint_max", keep_checkpoint_max),
        ):
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value}")
        self.model = model
        self.loss_fn = loss_fn
        self.output_dir = os.fspath(output_dir)  # not a Path: it would fold gs:// into gs:/
        self.strategy = strategy or tf.distribute.get_strategy()
        self.gradient_accumulation_steps = gradient_accumulation_steps
        if all_reduce_dtype not in ALL_REDUCE_DTYPES:
            raise ValueError(
                f"all_reduce_dtype: expected one of {', '.join(ALL_REDUCE_DTYPES)}, "
                f"got {all_reduce_dtype!r}"
            )
        self.all_reduce_dtype = tf.as_dtype(all_reduce_dtype)
        self.steps_per_loop = steps_per_loop
        self.save_checkpoints_steps = save_checkpoints_steps
        self.log_steps = log_steps
        self.keep_checkpoint_max = keep_checkpoint_max
        self.jit_compile = jit_compile
        self.head_learning_rate_multiplier = head_learning_rate_multiplier
        self.run_settings = dict(run_settings or {})
        with self.strategy.scope():
            if keras.mixed_precision.global_policy().name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            inner = getattr(optimizer, "inner_optimizer", optimizer)
            self._global_clipnorm = inner.global_clipnorm
            # One all-reduce per step, ours, before Keras clips: the optimizers of
            # `optimization` then apply the sums without reducing them again.
            self._aggregates = self.strategy.num_replicas_in_sync > 1 and hasattr(
                inner, "gradients_aggregated"
            )
            if self._aggregates:
                inner.gradients_aggregated = True
            # Built now so that a restore fills the slots at once instead of deferring.
            self.optimizer.build(model.trainable_variables)
        # A plain host variable (outside the scope, so `int()` reads it under any strategy):
        # it is only updated outside `strategy.run`, identically on every worker.
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # The trainable variables the loss reaches, set when the step is first traced.
        self._trained_variables: list | None = None
        self._gradients_fn = (
            tf.function(self._gradients, jit_compile=True) if jit_compile else self._gradients
        )
        self._train_loop = self._make_train_loop()

    # --- the compiled step --------------------------------------------------------------------

    def _gradients(self, batch):
        """(loss, metrics, gradients) of one replica's (micro-)batch."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss, metrics = self.loss_fn(self.model, batch)
            # The optimizer sums gradients over replicas: scale so that the sum is the mean.
            scaled = loss / self.strategy.num_replicas_in_sync
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
                scaled = self.optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        if self._trained_variables is None:  # once, while tracing: the loss's variables
            self._trained_variables = [
                v for v, g in zip(variables, grads, strict=True) if g is not None
            ]
            unused = [v.path for v, g in zip(variables, grads, strict=True) if g is None]
            if unused:
                # E.g. the pooler under a SQuAD loss. Left unchanged, as google-research's
                # optimizer leaves a variable without a gradient (Keras would warn per step).
                _log_untrained(unused)
        return loss, metrics, [g for g in grads if g is not None]

    def _replica_step(self, batch):
        gradients_fn = self._gradients_fn
        steps = self.gradient_accumulation_steps
        if steps == 1:
            loss, metrics, grads = gradients_fn(batch)
        else:
            size = tf.nest.flatten(batch)[0].shape[0]
            if size is not None and size % steps:
                raise ValueError(
                    f"gradient_accumulation_steps={steps} must divide the per-replica batch "
                    f"size {size}"
                )
            micro = tf.nest.map_structure(lambda t: tf.reshape(t, [steps, -1, *t.shape[1:]]), batch)

            def micro_step(i):
                loss, metrics, grads = gradients_fn(tf.nest.map_structure(lambda t: t[i], micro))
                # Dense: IndexedSlices (embedding gradients) cannot be loop-carried sums.
                return loss, metrics, [tf.convert_to_tensor(g) for g in grads]

            loss, metrics, grads = micro_step(0)
            for i in tf.range(1, steps):
                more = micro_step(i)
                loss, metrics, grads = tf.nest.map_structure(tf.add, (loss, metrics, grads), more)
            loss, metrics, grads = tf.nest.map_structure(
                lambda t: t / steps, (loss, metrics, grads)
            )
        if self._aggregates:
            # Keras clips the sum, the one-replica update (clipping each replica's part first,
            # as Keras would, is not).
            grads = self._all_reduce(grads)
        elif self.strategy.num_replicas_in_sync > 1 and self._global_clipnorm:
            grads = self._clip_across_replicas(grads)
        self.optimizer.apply(grads, self._trained_variables)
        return {"loss": loss, **metrics}

    def _all_reduce(self, grads):
        """The replicas' gradient sum (each replica's loss is already divided by their
        number), in one all-reduce: packed into buckets of `ALL_REDUCE_PACK_BYTES` that
        tf.distribute's collectives launch as they fill, in `all_reduce_dtype`."""
        context = tf.distribute.get_replica_context()
        dense = [tf.convert_to_tensor(g) for g in grads]  # embedding IndexedSlices included
        dtypes = [g.dtype for g in dense]
        if self.all_reduce_dtype != tf.float32:
            dense = [tf.cast(g, self.all_reduce_dtype) for g in dense]
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=ALL_REDUCE_PACK_BYTES
        )
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, dense, options=options)
        return [tf.cast(g, dtype) for g, dtype in zip(total, dtypes, strict=True)]

    def _clip_across_replicas(self, grads):
        """Another Keras optimizer: each replica's share of the clipped gradient sum (the
        optimizer's own all-reduce gives it back exactly for power-of-two replica counts)."""
        total = self._all_reduce(grads)
        clip_norm = self._global_clipnorm
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            clip_norm = clip_norm * self.optimizer.dynamic_scale  # grads are still loss-scaled
        clipped, _ = tf.clip_by_global_norm(total, clip_norm)
        return [g / self.strategy.num_replicas_in_sync for g in clipped]

    def _make_train_loop(self):
        strategy = self.strategy

        # A function of its own: traced once and called twice below (the peeled first step and
        # the loop body) instead of being traced and optimised twice inline (halves warm-up).
        @tf.function
        def step(iterator):
            values = strategy.run(self._replica_step, args=(next(iterator),))
            return {
                k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
                for k, v in values.items()
            }

        @tf.function
        def train_loop(iterator, num_steps):
            """Runs `num_steps` optimizer steps; returns the mean loss and metrics."""
            values = step(iterator)
            for _ in tf.range(num_steps - 1):
                values = tf.nest.map_structure(tf.add, values, step(iterator))
            self.global_step.assign_add(tf.cast(num_steps, tf.int64))
            return {k: v / tf.cast(num_steps, v.dtype) for k, v in values.items()}

        return train_loop

    # --- the outer loop -----------------------------------------------------------------------

    def _learning_rate(self) -> float:
        optimizer = self.optimizer
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            optimizer = optimizer.inner_optimizer
        rate = optimizer.learning_rate
        # A constant rate is a Keras variable; under a strategy its value is a MirroredVariable,
        # which float() refuses (a schedule's rate is a tensor).
        return float(tf.convert_to_tensor(getattr(rate, "value", rate)))

    def train(
        self,
        dataset: tf.data.Dataset,
        num_train_steps: int,
        init_checkpoint: str | os.PathLike | None = None,
    ) -> dict[str, float]:
        """Trains until `num_train_steps`; returns the last logged values (empty if none ran).

        `dataset` yields global batches (the per-step batch over all replicas, before
        accumulation splits it), batched with `drop_remainder=True`, repeated, in the same
        order on every run (seeded shuffles) so that a resumed run continues where the saved
        one was by skipping the batches already trained on.
        """
        batch_size = _batch_size(dataset)
        if batch_size is None:
            raise ValueError(
                "the training dataset needs a static batch size: batch it with drop_remainder=True"
            )
        # Checked before tracing: raised inside the compiled step it comes wrapped in a trace.
        steps = self.gradient_accumulation_steps
        per_replica, uneven = divmod(batch_size, self.strategy.num_replicas_in_sync)
        if steps > 1 and (uneven or per_replica % steps):
            raise ValueError(
                f"gradient_accumulation_steps={steps} must divide the "
                f"per-replica batch size {batch_size / self.strategy.num_replicas_in_sync:g}"
            )
        fileio.makedirs(self.output_dir)
        # Only the chief writes into output_dir; the other workers' files go to a temp folder.
        is_chief = self.strategy.extended.should_checkpoint
        save_dir = self.output_dir if is_chief else tempfile.mkdtemp(prefix="bert_tf-worker-")
        try:
            return self._train(dataset, num_train_steps, init_checkpoint, save_dir, is_chief)
        finally:
            if not is_chief:
                shutil.rmtree(save_dir, ignore_errors=True)

    def _train(
        self,
        dataset: tf.data.Dataset,
        num_train_steps: int,
        init_checkpoint: str | os.PathLike | None,
        save_dir: str,
        is_chief: bool,
    ) -> dict[str, float]:
        batch_size = _batch_size(dataset)
        checkpoint, manager = checkpointing.training_state(
            self.model,
            self.optimizer,
            self.global_step,
            save_dir,
            max_to_keep=self.keep_checkpoint_max if is_chief else 1,
        )
        # Every worker resumes from the chief's checkpoint.
        if latest := checkpoints.restore_newest_readable(checkpoint, self.output_dir):
            training_log.check_same_run(self.output_dir, self.run_settings, batch_size)
            logging.info("resumed from %s at step %d", latest, int(self.global_step))
            if int(self.global_step) >= num_train_steps:
                logging.info("already trained %d steps: nothing to train", num_train_steps)
        elif init_checkpoint:
            checkpoints.load_pretrained(self.model, init_checkpoint, fresh_heads=True)
            logging.info("initialised weights from %s", init_checkpoint)
        if init_checkpoint and self.head_learning_rate_multiplier != 1:
            # Again on a resume: the factors are not part of the checkpoint.
            checkpointing.scale_fresh_learning_rates(
                self.model, self.optimizer, init_checkpoint, self.head_learning_rate_multiplier
            )
        step = int(self.global_step)
        # Shard by data, not files: each worker takes its replicas' part of every global batch,
        # so a multi-worker run trains on the batches of a one-worker run and `skip` resumes it.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        dataset = dataset.skip(step).with_options(options)
        iterator = iter(self.strategy.experimental_distribute_dataset(dataset))
        history = training_log.read_history(self.output_dir, step)
        writer = (
            tf.summary.create_file_writer(self.output_dir)
            if is_chief
            else tf.summary.create_noop_writer()
        )
        progress = Progress(step, num_train_steps, batch_size, writer)
        while step < num_train_steps:
            boundary = min(
                num_train_steps,
                (step // self.log_steps + 1) * self.log_steps,
                (step // self.save_checkpoints_steps + 1) * self.save_checkpoints_steps,
            )
            num_steps = min(self.steps_per_loop, boundary - step)
            values = {
                k: float(v) for k, v in self._train_loop(iterator, tf.constant(num_steps)).items()
            }
            if not all(math.isfinite(v) for v in values.values()):
                raise FloatingPointError(
                    f"non-finite training values {values} in steps {step + 1}..{step + num_steps}; "
                    f"stopped without saving (last checkpoint: {manager.latest_checkpoint})"
                )
            step += num_steps
            progress.add(values, num_steps)
            if step % self.log_steps == 0 or step == num_train_steps:
                history.append(progress.report(step, self._learning_rate()))
            if step % self.save_checkpoints_steps == 0 or step == num_train_steps:
                # The log first: a kill between the two leaves a log ahead of the last
                # checkpoint, which a resume trims (`read_history`), never one behind it.
                if is_chief:
                    self._write_log(history, num_train_steps, batch_size)
                path = manager.save(checkpoint_number=step)
                if is_chief:
                    logging.info("saved %s", path)
        writer.flush()
        if is_chief:
            self._write_log(history, num_train_steps, batch_size)
        return progress.last

    def _write_log(self, history: list[dict], num_train_steps: int, batch_size: int) -> None:
        training_log.write_log(
            self.output_dir,
            history,
            num_train_steps=num_train_steps,
            batch_size=batch_size,
            run_settings=self.run_settings,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
        )
