"""Fine-tuning and raw-text inference side by side with HF transformers on PyTorch.

**Fine-tuning step**: ours is what `run_classifier` runs: `BertClassifier` on `BertEncoder`,
`classification_loss_fn`, `create_optimizer`'s AdamW (clip 1.0) in `training.Trainer`'s compiled
loop, XLA as `--use_xla` says (off by default; `xla=True` adds the XLA row). HF's is what its
`Trainer` runs (`bench.hf_worker`, in the reference environment `.venv-ref`):
`BertForSequenceClassification`, `torch.optim.AdamW` with its parameter groups, linear schedule,
`clip_grad_norm_`. Both start from a random init of the same shape (`minilm`: all-MiniLM-L6-v2's
config; or a preset such as `base`), train with dropout on and get the same synthetic batch (ids
drawn once here and sent to the worker). bf16 is each library's mixed precision on CPU: ours
`mixed_bfloat16` (bf16 compute, float32 variables), HF's `torch.autocast("cpu", bfloat16)`
around the forward pass and loss (float32 parameters, as `Trainer(bf16=True)`).

**Inference from raw text**: ours is the TF Serving export (`serving.export_lib.export_encoder`:
in-graph normalisation + WordPiece + packing + encoder, padded to the sequence length) loaded in
this process; HF's is `BertTokenizerFast` + `BertModel` under `torch.inference_mode()`
(`bench.hf_worker.Encoding`: padded to the batch's longest). Same Wikipedia sentences, same
vocab, pooled output fetched to numpy; batch-1 latency per call and batch-N throughput.

Each measurement alternates ours and HF's (A B A B ...; `bench.timing.alternate`) after a
discarded warm-up round; the two never run at once. HF's worker uses as many torch threads as
TensorFlow's intra-op pool has (every core). Times are each side's own (the worker times its
steps itself, so the pipe is not counted); memory is each process's RSS high-water mark during
one more, untimed call after the timed rounds, above what was resident before it (`bench.rss`),
plus the absolute peak.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bench import data, timing
from bench.hf_reference import DEFAULT_REFERENCE_PYTHON, HFWorker
from bench.train_suite import trainer_steps
from bert_tf.data import fetch
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier
from bert_tf.tasks.classification import classification_loss_fn
from bert_tf.text.tokenization import BertPreprocessor
from serving.export_lib import export_encoder

OURS, HF = "ours", "hf_transformers"
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}  # -> our Keras policy


def bert_config(model: str) -> BertConfig:
    """`minilm` (all-MiniLM-L6-v2's config from the data cache) or a preset's."""
    if model == "minilm":
        return BertConfig.from_hf_json_file(fetch.path("minilm", "config.json"))
    return BertConfig.from_preset(model)


@dataclasses.dataclass(frozen=True)
class Case:
    """One fine-tuning measurement."""

    model: str
    seq_length: int
    precision: str  # a key of PRECISIONS
    batch_size: int = 32

    @property
    def label(self) -> str:
        return f"{self.model} S{self.seq_length} B{self.batch_size} {self.precision}"


def synthetic_batch(case: Case, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Full-length sentence pairs (ids above the special tokens) and binary labels."""
    rng = np.random.default_rng(seed)
    b, s = case.batch_size, case.seq_length
    type_ids = np.zeros([b, s], np.int32)
    type_ids[:, s // 2 :] = 1
    return {
        "input_ids": rng.integers(999, vocab_size, [b, s]).astype(np.int32),
        "attention_mask": np.ones([b, s], np.int32),
        "token_type_ids": type_ids,
        "labels": rng.integers(0, 2, [b]).astype(np.int32),
    }


@dataclasses.dataclass
class _Calls:
    """One candidate's timed calls (seconds each), then its memory from one untimed call (MB)."""

    seconds: list[float] = dataclasses.field(default_factory=list)
    step_memory_mb: float = 0.0
    peak_memory_mb: float = 0.0


def _ours_candidate(step: Callable[[], float], calls: _Calls) -> Callable[[], None]:
    def run() -> None:
        start = time.perf_counter()
        step()
        calls.seconds.append(time.perf_counter() - start)

    return run


def _row(case: Case, impl: str, calls: _Calls, steps_per_call: int, warmup: int) -> dict:
    seconds = calls.seconds[warmup:]
    per_step = timing.summarize([s / steps_per_call for s in seconds])
    per_second = timing.summarize([case.batch_size * steps_per_call / s for s in seconds])
    return {
        **dataclasses.asdict(case),
        "impl": impl,
        "steps_per_call": steps_per_call,
        "step_time_s": per_step,
        "sequences_per_s": per_second,
        "step_memory_mb": calls.step_memory_mb,
        "peak_memory_mb": calls.peak_memory_mb,
    }


def finetune_case(
    case: Case,
    worker: HFWorker,
    rounds: int,
    steps_per_call: int,
    xla: bool,
    workdir: str,
    seed: int = 0,
) -> list[dict]:
    """Ours (XLA off, and on with `xla`) and HF's on one case, alternately; a row each."""
    config = bert_config(case.model)
    batch = synthetic_batch(case, config.vocab_size, seed)
    features = {
        "input_word_ids": tf.constant(batch["input_ids"]),
        "input_mask": tf.constant(batch["attention_mask"]),
        "input_type_ids": tf.constant(batch["token_type_ids"]),
    }
    labels = tf.constant(batch["labels"])
    calls = {}
    candidates = {}
    steps = {}
    built = []

    def build_model() -> keras.Model:
        built.append(BertClassifier(build_encoder(config), num_classes=2))
        return built[-1]

    for jit in (False, True) if xla else (False,):
        name = f"{OURS} xla" if jit else OURS
        step = trainer_steps(
            build_model,
            classification_loss_fn(2),
            PRECISIONS[case.precision],
            (features, labels),
            steps_per_call,
            jit,
            os.path.join(workdir, f"{case.label}-{name}".replace(" ", "_")),
        )
        calls[name] = _Calls()
        steps[name] = step
        candidates[name] = _ours_candidate(step, calls[name])
    hf_model = worker.request(
        "train",
        config=config.to_hf_config(),
        batch={k: v.tolist() for k, v in batch.items()},
        precision=case.precision,
        steps_per_call=steps_per_call,
        seed=seed,
    )
    calls[HF] = _Calls()

    def hf() -> None:
        calls[HF].seconds.append(worker.request("train_steps")["seconds"])

    candidates[HF] = hf
    timing.alternate(candidates, rounds=rounds, warmup=1, label=f"finetune {case.label}")
    # Memory from one more call each, untimed (timing.alternate's `measure_memory` says why).
    for name, step in steps.items():
        calls[name].step_memory_mb, calls[name].peak_memory_mb = timing.peak_memory_of(step)
    reply = worker.request("train_steps", memory=True)
    calls[HF].step_memory_mb, calls[HF].peak_memory_mb = (
        reply["step_memory_mb"],
        reply["peak_memory_mb"],
    )
    rows = [_row(case, name, c, steps_per_call, warmup=1) for name, c in calls.items()]
    for row in rows:
        row["parameters"] = hf_model["parameters"] if row["impl"] == HF else built[0].count_params()
    hf = rows[-1]["sequences_per_s"]["median"]
    for row in rows[:-1]:
        row["ratio_vs_hf"] = row["sequences_per_s"]["median"] / hf
    return rows


def inference(
    model: str,
    seq_length: int,
    worker: HFWorker,
    batch_size: int,
    latency_calls: int,
    throughput_calls: int,
    rounds: int,
    workdir: str,
) -> dict:
    """Raw strings -> pooled output, ours (the export) and HF's; batch 1 and `batch_size`."""
    config = bert_config(model)
    preprocessor = BertPreprocessor(data.vocab_file(), seq_length=seq_length)
    path = export_encoder(
        build_encoder(config), preprocessor, os.path.join(workdir, f"export-{model}"), version=1
    )
    signature = tf.saved_model.load(path).signatures["serving_default"]
    worker.request(
        "encoder",
        config=config.to_hf_config(),
        vocab_file=str(data.vocab_file()),
        seq_length=seq_length,
    )
    singles = [[s] for s in data.sentences(latency_calls)]
    texts = data.sentences(batch_size * throughput_calls)
    batches = [texts[i : i + batch_size] for i in range(0, len(texts), batch_size)]
    results = {}
    for mode, inputs in (("batch_1", singles), (f"batch_{batch_size}", batches)):
        seconds: dict[str, list[float]] = {OURS: [], HF: []}
        tensors = [tf.constant(x) for x in inputs]

        def ours(tensors=tensors, out=seconds[OURS]) -> None:
            for x in tensors:
                start = time.perf_counter()
                signature(text=x)["pooled_output"].numpy()
                out.append(time.perf_counter() - start)

        def hf(inputs=inputs, out=seconds[HF]) -> None:
            out.extend(worker.request("encode", batches=inputs)["seconds"])

        timing.alternate({OURS: ours, HF: hf}, rounds=rounds, warmup=1, label=f"infer {mode}")
        calls = len(inputs)
        timed = {name: values[calls:] for name, values in seconds.items()}  # warm-up dropped
        size = len(inputs[0])
        results[mode] = {
            name: {
                "latency": timing.percentiles(values),
                "sequences_per_s": timing.summarize(
                    [size * calls / sum(values[r * calls : (r + 1) * calls]) for r in range(rounds)]
                ),
            }
            for name, values in timed.items()
        }
        results[mode]["ratio"] = (
            results[mode][OURS]["sequences_per_s"]["median"]
            / results[mode][HF]["sequences_per_s"]["median"]
        )
    return {"model": model, "seq_length": seq_length, "batch_size": batch_size, **results}


def run(
    models: list[str],
    seq_lengths: list[int],
    precisions: list[str],
    rounds: int,
    steps_per_call: int = 1,
    batch_size: int = 32,
    xla: bool = False,
    infer_seq_length: int = 128,
    latency_calls: int = 50,
    throughput_calls: int = 4,
    infer_rounds: int = 3,
    reference_python: str | None = None,
) -> dict:
    """The finetune suite (see the module docstring and bench.run's flags)."""
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"--finetune_precisions: expected any of {list(PRECISIONS)}: {unknown}")
    for model in models:
        bert_config(model)  # a bad name fails before anything runs
    rows, infer = [], []
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as workdir:
        log = Path(workdir) / "hf_worker.log"
        with HFWorker(reference_python or DEFAULT_REFERENCE_PYTHON, log) as worker:
            threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
            worker.request("threads", threads=threads)
            versions = worker.request("versions")
            logging.info("HF worker: %s", versions)
            for model in models:
                for seq_length in seq_lengths:
                    for precision in precisions:
                        case = Case(model, seq_length, precision, batch_size)
                        rows += finetune_case(case, worker, rounds, steps_per_call, xla, workdir)
                        keras.backend.clear_session()
                infer.append(
                    inference(
                        model,
                        infer_seq_length,
                        worker,
                        batch_size,
                        latency_calls,
                        throughput_calls,
                        infer_rounds,
                        workdir,
                    )
                )
    return {
        "threads": {"tensorflow_intra_op": threads, "torch": versions["threads"]},
        "hf_versions": versions,
        "memory_kind": f"{timing.memory_kind()} (HF: the worker's VmHWM)",
        "rows": rows,
        "inference": infer,
    }
