"""Pretraining step throughput and memory: ours against keras-nlp, plus the scaling table.

Ours is exactly what `run_pretraining` runs: `BertPretrainer` + `pretraining.pretraining_loss` +
`optimization.create_optimizer` inside `training.Trainer`'s compiled loop (`steps_per_call`
optimizer steps per call of its `tf.function`). The reference is what a keras-nlp user writes for
the same job: `keras_nlp.models.BertBackbone` + a `BertMaskedLM`-style `MaskedLMHead` (tied to the
token embedding) + a `Dense(2)` NSP head, `model.compile(...)` with the same optimizer, sparse
cross-entropy losses (the masked-LM one weighted by the mask weights) and `jit_compile="auto"`,
stepped by Keras' own compiled train function with `steps_per_execution = steps_per_call` (what
`model.fit` runs). Both get the same synthetic full-length batch, already on the device, and keep
their library's activation (ours exact GELU as BERT's configs say, keras-nlp's encoder the tanh
approximation). `scaling(...)` times our step against the sequence length and the layer count.

Model FLOPs per step (for the utilisation) count only the matrix multiplications, forward and
backward (3x forward), as in the PaLM paper: 6 * N * tokens with N the non-embedding weights of
the encoder, plus attention 12 * L * H * S per token, plus the masked-LM head (transform and tied
vocabulary projection) at the masked positions only and the pooler + NSP head per sequence.
The utilisation divides the achieved model FLOP/s by the machine's peak: the best large square
`tf.matmul` in float32 and in the mixed-precision dtype, measured before every preset and at the
end (on a shared machine the best of several is closest to what the hardware can do).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bench import reference, timing
from bert_tf import training
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer
from bert_tf.tasks import pretraining
from bert_tf.training.optimization import create_optimizer

OURS, REFERENCE = "ours", "keras_nlp"


@dataclasses.dataclass(frozen=True)
class Case:
    """One model size and precision to train."""

    preset: str
    precision: str  # a training.PRECISIONS value
    seq_length: int = 128
    batch_size: int = 32
    num_layers: int | None = None  # overrides the preset's

    def bert_config(self) -> BertConfig:
        config = BertConfig.from_preset(self.preset)
        if self.num_layers:
            config = dataclasses.replace(config, num_hidden_layers=self.num_layers)
        return config

    @property
    def num_predictions(self) -> int:
        # google-research's max_predictions_per_seq: 20 at 128, scaled with the length.
        return max(1, round(self.seq_length * 20 / 128))


def mixed_precision_policy() -> str:
    """float16 on a GPU (tensor cores); bfloat16 on CPU, which has no fast float16 path."""
    return "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"


def model_flops_per_step(case: Case) -> float:
    """Matmul FLOPs of one training step (forward + backward), see the module docstring."""
    c = case.bert_config()
    h, f, layers, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    s, b, p = case.seq_length, case.batch_size, case.num_predictions
    per_token = 2 * layers * (4 * h * h + 2 * h * f) + 4 * layers * s * h
    per_prediction = 2 * (h * h + h * v)
    per_sequence = 2 * (h * h + 2 * h)
    return 3.0 * b * (s * per_token + p * per_prediction + per_sequence)


def synthetic_batch(case: Case, seed: int = 0) -> dict[str, tf.Tensor]:
    """A full-length pretraining batch in `bert_tf.tasks.pretraining.records`'s feature layout."""
    rng = np.random.default_rng(seed)
    b, s, p = case.batch_size, case.seq_length, case.num_predictions
    vocab = case.bert_config().vocab_size
    positions = np.sort(
        np.stack([rng.choice(np.arange(1, s - 1), p, replace=False) for _ in range(b)]), axis=1
    )
    type_ids = np.zeros([b, s], np.int32)
    type_ids[:, s // 2 :] = 1
    batch = {
        "input_word_ids": rng.integers(999, vocab, [b, s]),
        "input_mask": np.ones([b, s]),
        "input_type_ids": type_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(999, vocab, [b, p]),
        "masked_lm_weights": np.ones([b, p], np.float32),
        "next_sentence_labels": rng.integers(0, 2, [b, 1]),
    }
    return {
        k: tf.constant(v, tf.float32 if k == "masked_lm_weights" else tf.int32)
        for k, v in batch.items()
    }


def _optimizer() -> keras.optimizers.Optimizer:
    return create_optimizer(1e-4, num_train_steps=1_000_000, num_warmup_steps=10_000)


def trainer_steps(
    build_model: Callable[[], keras.Model],
    loss_fn: training.LossFn,
    precision: str,
    batch,
    steps_per_call: int,
    jit_compile: bool,
    workdir: str,
    strategy: tf.distribute.Strategy | None = None,
) -> Callable[[], float]:
    """`steps_per_call` steps of `Trainer`'s compiled loop on `batch`, every call; returns the
    mean loss. What our training scripts run, for `build_model()` under `precision` (on one
    device, or under `strategy`: `batch` is then the global batch)."""
    training.set_precision(precision)
    strategy = strategy or training.get_strategy("one_device")
    with strategy.scope():
        model = build_model()
        optimizer = _optimizer()
    trainer = training.Trainer(
        model,
        optimizer,
        loss_fn,
        workdir,
        strategy,
        steps_per_loop=steps_per_call,
        jit_compile=jit_compile,
    )
    data = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(data))
    num_steps = tf.constant(steps_per_call)
    keras.mixed_precision.set_global_policy("float32")

    def step() -> float:
        # The loop `Trainer.train` runs between its log/checkpoint points.
        return float(trainer._train_loop(iterator, num_steps)["loss"])

    return step


def ours_step(
    case: Case,
    batch: dict,
    steps_per_call: int,
    jit_compile: bool,
    workdir: str,
    strategy: tf.distribute.Strategy | None = None,
) -> Callable[[], float]:
    """`steps_per_call` steps of `run_pretraining`'s compiled loop; returns the mean loss."""
    return trainer_steps(
        lambda: BertPretrainer(build_encoder(case.bert_config())),
        pretraining.pretraining_loss,
        case.precision,
        batch,
        steps_per_call,
        jit_compile,
        workdir,
        strategy,
    )


def reference_model(config: BertConfig) -> keras.Model:
    """keras-nlp `BertBackbone` + `BertMaskedLM`'s head + an NSP `Dense(2)`, same sizes."""
    import keras_nlp

    backbone = reference.keras_nlp_backbone(config)
    initializer = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
    # As keras_nlp.models.BertMaskedLM builds its head.
    mlm_head = keras_nlp.layers.MaskedLMHead(
        vocabulary_size=config.vocab_size,
        token_embedding=backbone.token_embedding,
        intermediate_activation="gelu",
        kernel_initializer=initializer,
        dtype=backbone.dtype_policy,
        name="mlm_head",
    )
    nsp_head = keras.layers.Dense(2, kernel_initializer=initializer, name="nsp_head")
    inputs = {
        **backbone.input,
        "mask_positions": keras.Input(shape=(None,), dtype="int32", name="mask_positions"),
    }
    outputs = backbone(backbone.input)
    return keras.Model(
        inputs,
        {
            "mlm": mlm_head(outputs["sequence_output"], inputs["mask_positions"]),
            "nsp": nsp_head(outputs["pooled_output"]),
        },
    )


def reference_step(case: Case, batch: dict, steps_per_call: int) -> Callable[[], float]:
    """`steps_per_call` steps of Keras' compiled train function (what `model.fit` runs)."""
    keras.mixed_precision.set_global_policy(case.precision)
    model = reference_model(case.bert_config())
    model.compile(
        optimizer=_optimizer(),
        loss={
            "mlm": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "nsp": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        },
        weighted_metrics={"mlm": [keras.metrics.SparseCategoricalAccuracy()]},
        metrics={"nsp": [keras.metrics.SparseCategoricalAccuracy()]},
        steps_per_execution=steps_per_call,
    )
    x = {
        "token_ids": batch["input_word_ids"],
        "segment_ids": batch["input_type_ids"],
        "padding_mask": batch["input_mask"],
        "mask_positions": batch["masked_lm_positions"],
    }
    y = {"mlm": batch["masked_lm_ids"], "nsp": batch["next_sentence_labels"]}
    weights = {"mlm": batch["masked_lm_weights"], "nsp": tf.ones([case.batch_size])}
    keras.mixed_precision.set_global_policy("float32")
    # Builds the model, optimizer and metrics the way fit does, then hands over to the same
    # compiled function fit calls with a dataset iterator.
    model.train_on_batch(x, y, weights)
    iterator = iter(tf.data.Dataset.from_tensors((x, y, weights)).repeat())

    def step() -> float:
        return float(model.train_function(iterator)["loss"])

    return step


def _row(case: Case, impl: str, xla: bool, samples: timing.Samples, steps: int) -> dict:
    per_step = [s / steps for s in samples.seconds]
    stats = timing.summarize(per_step)
    seconds = stats["median"]
    return {
        "preset": case.preset,
        "precision": case.precision,
        "num_layers": case.bert_config().num_hidden_layers,
        "seq_length": case.seq_length,
        "batch_size": case.batch_size,
        "impl": impl,
        "xla": xla,
        "steps_per_call": steps,
        "step_time_s": stats,
        "sequences_per_s": case.batch_size / seconds,
        "tokens_per_s": case.batch_size * case.seq_length / seconds,
        "model_flops_per_step": model_flops_per_step(case),
        "model_flops_per_s": model_flops_per_step(case) / seconds,
        "step_memory_mb": max(samples.step_memory_mb) if samples.step_memory_mb else None,
        "peak_memory_mb": max(samples.peak_memory_mb) if samples.peak_memory_mb else None,
    }


def compare(
    cases: list[Case],
    rounds: int,
    steps_per_call: int,
    xla_variants: tuple[bool, ...] = (True,),
    measure_memory: bool = True,
    with_reference: bool = True,
) -> list[dict]:
    """Ours (for each XLA setting) and the reference on every case, all alternately in one loop
    (so that a load change on the machine hits every point alike); one row per candidate."""
    with tempfile.TemporaryDirectory(prefix="bench-train-") as workdir:
        candidates: dict[str, Callable] = {}
        keys: dict[str, tuple[Case, str, bool]] = {}
        for i, case in enumerate(cases):
            batch = synthetic_batch(case)
            label = (
                f"{case.preset} L{case.bert_config().num_hidden_layers} S{case.seq_length} "
                f"{case.precision}"
            )
            for xla in xla_variants:
                name = f"{label} {OURS} xla={'on' if xla else 'off'}"
                candidates[name] = ours_step(
                    case, batch, steps_per_call, xla, f"{workdir}/{i}{xla}"
                )
                keys[name] = (case, OURS, xla)
            if with_reference:
                name = f"{label} {REFERENCE}"
                candidates[name] = reference_step(case, batch, steps_per_call)
                keys[name] = (case, REFERENCE, True)
        samples = timing.alternate(
            candidates, rounds=rounds, warmup=1, measure_memory=measure_memory, label="train"
        )
    keras.backend.clear_session()
    return [_row(*keys[name], sample, steps_per_call) for name, sample in samples.items()]


def run(
    presets: list[str],
    full_presets: list[str],
    rounds: dict[str, int],
    steps_per_call: dict[str, int],
    seq_length: int = 128,
    batch_size: int = 32,
    matmul_size: int | None = None,
) -> dict:
    """The train table (see bench.run's flags)."""
    dtypes = ("float32", mixed_precision_policy().removeprefix("mixed_"))
    peaks = dict.fromkeys(dtypes, 0.0)

    def measure_peak() -> None:
        # Before every preset: on a shared machine the best of several is the machine's peak.
        for dtype in dtypes:
            peaks[dtype] = max(peaks[dtype], timing.matmul_peak_flops(dtype, matmul_size))
        logging.info("matmul peak: %s", {k: f"{v / 1e9:.1f} GFLOP/s" for k, v in peaks.items()})

    rows = []
    for preset in presets:
        measure_peak()
        full = preset in full_presets
        precisions = ["float32", mixed_precision_policy()] if full else ["float32"]
        for precision in precisions:
            rows += compare(
                [Case(preset, precision, seq_length, batch_size)],
                rounds[preset],
                steps_per_call[preset],
                xla_variants=(True, False) if full else (True,),
            )
    measure_peak()
    peak = max(peaks.values())
    for row in rows:
        row["mfu"] = row["model_flops_per_s"] / peak
    return {
        "matmul_peak_flops": peaks,
        "machine_peak_flops": peak,
        "memory_kind": timing.memory_kind(),
        "rows": rows,
    }


def scaling(
    preset: str,
    seq_lengths: list[int],
    layers: list[int],
    rounds: int,
    seq_length: int = 128,
    batch_size: int = 32,
    with_reference: bool = False,
) -> dict:
    """Step time (float32, XLA on) against the sequence length, then against the layer count at
    `seq_length`; the points of each sweep are timed alternately."""
    sweeps = {}
    for sweep, cases in (
        ("seq_length", [Case(preset, "float32", n, batch_size) for n in seq_lengths]),
        (
            "num_layers",
            [Case(preset, "float32", seq_length, batch_size, num_layers=n) for n in layers],
        ),
    ):
        sweeps[sweep] = (
            compare(cases, rounds, 1, measure_memory=False, with_reference=with_reference)
            if cases
            else []
        )
    return {"preset": preset, "batch_size": batch_size, **sweeps}
