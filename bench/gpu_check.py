r"""The device check a session runs when it is lent GPUs: BERT-base pretraining step time and MFU in
bfloat16, mirrored over every GPU, and the multi-replica training equality. Under 8 minutes on
one or more H100/H200s.

    python -m bench.gpu_check --out=bench/results/gpu_check.json
    python -m bench.gpu_check --preset=tiny --seq_length=16 --batch_size=4 --cpu_replicas=2  # CPU

1. **Step time and MFU**: `Trainer`'s compiled pretraining step (what `run_pretraining
   --distribution_strategy=mirrored --use_mixed_precision --mixed_precision_dtype=bfloat16
   --use_xla` runs) on a synthetic full-length batch of `--batch_size` per replica, the median of
   `--rounds` timed calls of `--steps_per_call` steps after a warm-up; model FLOPs per step
   (`bench.train_suite.model_flops_per_step`) over the step time, against the GPU's dense
   bfloat16 peak from its datasheet (`DATASHEET_BF16_TFLOPS`, when the name is known) and against
   a bfloat16 `tf.matmul` measured on it in the same run, both times the replica count.
2. **Equality**: a one-layer BERT trained 6 steps on 2 replicas (the first two devices;
   MirroredStrategy with tf.distribute's collective all-reduce, MultiWorkerMirroredStrategy's)
   and on 1 with the same global batch: losses and weights equal within float32 round-off, and
   the compiled step holds one gradient all-reduce (`collectives`: its CollectiveReduceV2 ops,
   one per replica, told apart from the loss's by a bfloat16 all-reduce run).

On a machine without GPUs `--cpu_replicas=N` splits the CPU into N logical devices (set before
TensorFlow's runtime starts), so the same script runs here, slowly and at tiny sizes.
"""

from __future__ import annotations

import datetime
import itertools
import json
import sys
import tempfile
import time

import numpy as np
from absl import flags, logging

import bench  # noqa: F401  (quiets TensorFlow's C++ logs before its import)
from bert_tf import fileio, flags_util

FLAGS = flags.FLAGS
# Dense bfloat16 tensor-core peaks, TFLOP/s, from NVIDIA's datasheets (SXM parts; the sparse
# figures are twice these).
DATASHEET_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "L40S": 362.0}
EQUALITY_STEPS = 6
_STRATEGIES = itertools.count(1)


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    def define(kind, name, default, help_, **bounds):
        getattr(flags, f"DEFINE_{kind}")(name, default, help_, flag_values=flag_values, **bounds)

    define("string", "preset", "base", "Model size of the step-time measurement.")
    define("integer", "seq_length", 128, "Sequence length.", lower_bound=8)
    define("integer", "batch_size", 32, "Sequences per replica and step.", lower_bound=1)
    define("integer", "steps_per_call", 10, "Optimizer steps per timed call.", lower_bound=1)
    define("integer", "rounds", 5, "Timed calls after the warm-up.", lower_bound=1)
    define(
        "integer",
        "cpu_replicas",
        0,
        "Without GPUs: logical CPU devices to mirror over (0: one device, no equality check).",
        lower_bound=0,
    )
    define("string", "out", None, "Results JSON (default bench/results/gpu_check-<date>.json).")


def devices(cpu_replicas: int) -> list[str]:
    """The GPUs, else `cpu_replicas` logical CPU devices (configured now: call it first)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return [f"/gpu:{i}" for i in range(len(gpus))]
    if cpu_replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_replicas
        )
    return [f"/cpu:{i}" for i in range(max(1, cpu_replicas))]


def collective_strategy(names: list[str]):
    """MirroredStrategy over `names` with tf.distribute's collective all-reduce (what
    MultiWorkerMirroredStrategy uses across hosts): CollectiveReduceV2 ops in the graph."""
    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_ops, cross_device_utils

    if len(names) == 1:
        return tf.distribute.OneDeviceStrategy(names[0])
    # Group keys of their own: each strategy numbers its collective instances from the same
    # start, and two strategies' ops with equal keys in one process would be taken for one.
    keys = cross_device_utils.CollectiveKeys(group_key_start=1000 * next(_STRATEGIES))
    ops = cross_device_ops.CollectiveAllReduce(
        names, len(names), tf.distribute.experimental.CommunicationOptions(), keys
    )
    return tf.distribute.MirroredStrategy(names, cross_device_ops=ops)


def train_micro(strategy, optimizer_kind: str, all_reduce_dtype: str, workdir: str) -> dict:
    """A one-layer BERT regressor (no dropout) trained EQUALITY_STEPS steps of a global batch
    of 8 under `strategy`: its losses, weights and the dtypes of the collective ops in its
    compiled step. `optimizer_kind`: ours (`create_optimizer`) or keras (a plain AdamW with a
    global clip, which the Trainer cannot spare Keras' own all-reduce)."""
    import keras
    import tensorflow as tf

    from bert_tf import testing
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier
    from bert_tf.training import Trainer
    from bert_tf.training.optimization import create_optimizer

    keras.utils.set_random_seed(1)
    with strategy.scope():
        config = testing.micro_config(20, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = BertClassifier(build_encoder(config), num_classes=1)
        if optimizer_kind == "ours":
            optimizer = create_optimizer(1e-2, EQUALITY_STEPS, 1)
        else:
            optimizer = keras.optimizers.AdamW(1e-2, global_clipnorm=1.0)

    def loss_fn(model, batch):
        ids, y = batch
        inputs = {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids * 0}
        error = model(inputs, training=True)[:, 0] - y
        return tf.reduce_mean(tf.square(error)), {"mae": tf.reduce_mean(tf.abs(error))}

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 20, size=(48, 5)).astype("int32")
    y = (10 * rng.normal(size=(48,))).astype("float32")  # large errors: the clip acts
    data = tf.data.Dataset.from_tensor_slices((ids, y)).repeat().batch(8, drop_remainder=True)
    half = EQUALITY_STEPS // 2
    trainer = Trainer(
        model,
        optimizer,
        loss_fn,
        workdir,
        strategy,
        steps_per_loop=half,
        save_checkpoints_steps=EQUALITY_STEPS,
        log_steps=half,
        all_reduce_dtype=all_reduce_dtype,
    )
    trainer.train(data, EQUALITY_STEPS)
    graph = trainer._train_loop.get_concrete_function(
        iter(strategy.experimental_distribute_dataset(data)), tf.constant(half)
    ).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    history = json.loads(fileio.read_text(f"{workdir}/training_log.json"))["history"]
    return {
        "collectives": [
            tf.dtypes.as_dtype(n.attr["T"].type).name
            for n in nodes
            if n.op.startswith("Collective")
        ],
        "losses": [h["loss"] for h in history],
        "weights": [w.tolist() for w in model.get_weights()],
    }


def equality(names: list[str]) -> dict:
    """2 replicas vs 1 (see the module docstring): the largest differences and the count of
    gradient all-reduce ops in one compiled step."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
        one = train_micro(collective_strategy(names[:1]), "ours", "float32", f"{workdir}/one")
        two = collective_strategy(names[:2])
        same = train_micro(two, "ours", "float32", f"{workdir}/two")
        marked = train_micro(two, "ours", "bfloat16", f"{workdir}/bf16")
    weight_diff = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(same["weights"], one["weights"], strict=True)
    )
    loss_diff = float(np.max(np.abs(np.asarray(same["losses"]) - np.asarray(one["losses"]))))
    return {
        "devices": names[:2],
        "max_abs_weight_diff": weight_diff,
        "max_abs_loss_diff": loss_diff,
        "equal": weight_diff < 1e-4 and loss_diff < 1e-4,
        "gradient_all_reduce_ops": marked["collectives"].count("bfloat16"),
        "all_reduces_per_step": marked["collectives"].count("bfloat16") // 2,
    }


def step_time(names: list[str], preset: str, seq_length: int, batch_size: int) -> dict:
    """BERT pretraining step time, model FLOP/s and MFU over `names` (see the module
    docstring)."""
    import tensorflow as tf

    from bench import timing, train_suite

    global_batch = batch_size * len(names)
    case = train_suite.Case(preset, "mixed_bfloat16", seq_length, global_batch)
    # `--distribution_strategy=mirrored`'s strategy (NCCL on GPUs), over these devices.
    strategy = (
        tf.distribute.MirroredStrategy(names)
        if len(names) > 1
        else tf.distribute.OneDeviceStrategy(names[0])
    )
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as workdir:
        step = train_suite.ours_step(
            case, train_suite.synthetic_batch(case), FLAGS.steps_per_call, True, workdir, strategy
        )
        start = time.perf_counter()
        step()  # trace + XLA compile
        compile_s = time.perf_counter() - start
        seconds = []
        for _ in range(FLAGS.rounds):
            start = time.perf_counter()
            step()
            seconds.append((time.perf_counter() - start) / FLAGS.steps_per_call)
    median = float(np.median(seconds))
    flops = train_suite.model_flops_per_step(case)
    gpu = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpu[0]).get("device_name", "") if gpu else ""
    datasheet = next((v for k, v in DATASHEET_BF16_TFLOPS.items() if k in name), None)
    with tf.device(names[0]):
        measured = timing.matmul_peak_flops("bfloat16")
    row = {
        "device": name or "cpu",
        "replicas": len(names),
        "preset": preset,
        "seq_length": seq_length,
        "global_batch": global_batch,
        "compile_s": compile_s,
        "step_s": seconds,
        "median_step_s": median,
        "tokens_per_s": global_batch * seq_length / median,
        "model_flops_per_s": flops / median,
        "matmul_peak_flops_per_device": measured,
        "mfu_vs_measured_matmul": flops / median / (measured * len(names)),
    }
    if datasheet:
        row["datasheet_bf16_flops_per_device"] = datasheet * 1e12
        row["mfu_vs_datasheet"] = flops / median / (datasheet * 1e12 * len(names))
    return row


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    started = time.perf_counter()
    names = devices(FLAGS.cpu_replicas)  # first: logical CPU devices precede TensorFlow's start
    result = {
        "date": datetime.date.today().isoformat(),
        "step": step_time(names, FLAGS.preset, FLAGS.seq_length, FLAGS.batch_size),
        "equality": equality(names) if len(names) > 1 else None,
    }
    result["seconds"] = time.perf_counter() - started
    out = FLAGS.out or f"bench/results/gpu_check-{result['date']}.json"
    fileio.atomic_write_text(out, json.dumps(result, indent=1) + "\n")
    step = result["step"]
    print(
        f"{step['device']} x{step['replicas']}: {step['preset']} S{step['seq_length']} batch "
        f"{step['global_batch']} bf16: {step['median_step_s'] * 1e3:.1f} ms/step, "
        f"{step['tokens_per_s']:.0f} tokens/s, MFU {step['mfu_vs_measured_matmul']:.2f} of the "
        "measured matmul"
        + (
            f", {step['mfu_vs_datasheet']:.2f} of the datasheet"
            if "mfu_vs_datasheet" in step
            else ""
        )
    )
    equal = result["equality"]
    if equal:
        print(
            f"2 replicas vs 1: equal={equal['equal']} (weights {equal['max_abs_weight_diff']:.1e}, "
            f"losses {equal['max_abs_loss_diff']:.1e}); gradient all-reduces per step: "
            f"{equal['all_reduces_per_step']}"
        )
    print(f"{result['seconds']:.0f} s; wrote {out}")
    logging.info("done")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
