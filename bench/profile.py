r"""Where the time of our training step or in-graph-tokenizing encoder call goes, op by op.

Runs the step under `tf.profiler` and sums the executed TensorFlow ops (or XLA clusters) of the
trace by op type, printing the top entries with their share of the traced time:

    python -m bench.profile --what=train --preset=mini --steps=3 [--xla]
    python -m bench.profile --what=infer --preset=mini --batch_size=32

The raw trace stays in `--logdir` (open it with TensorBoard's profile plugin if installed).
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import tempfile

from absl import flags

import bench  # noqa: F401  (quiets TensorFlow's C++ logs before its import)
from bert_tf import flags_util

FLAGS = flags.FLAGS
# Events that contain the op events (function calls, executor runs), not time of their own.
_CONTAINERS = {
    "Process",
    "Run",
    "RunWithBorrowedArgs",
    "PartitionedCall",
    "StatefulPartitionedCall",
}


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    flags.DEFINE_enum(
        "what", "train", ["train", "infer"], "Which step to profile.", flag_values=flag_values
    )
    flags.DEFINE_string("preset", "mini", "BERT size preset.", flag_values=flag_values)
    flags.DEFINE_integer("batch_size", 32, "Batch size.", flag_values=flag_values)
    flags.DEFINE_integer("seq_length", 128, "Sequence length.", flag_values=flag_values)
    flags.DEFINE_integer("steps", 3, "Profiled steps (after one warm-up).", flag_values=flag_values)
    flags.DEFINE_bool(
        "xla", False, "XLA-compile (ops then show as clusters).", flag_values=flag_values
    )
    flags.DEFINE_string("precision", "float32", "Keras dtype policy.", flag_values=flag_values)
    flags.DEFINE_integer("top", 25, "Op types to print.", flag_values=flag_values)
    flags.DEFINE_string(
        "logdir", None, "Trace folder (default: a temporary one).", flag_values=flag_values
    )


def op_times(logdir: str) -> dict[str, float]:
    """Microseconds per op type summed over the host trace's TensorFlow op events."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb trace under {logdir}")
    space = xplane_pb2.XSpace()
    with open(max(paths, key=os.path.getmtime), "rb") as f:
        space.ParseFromString(f.read())
    totals: dict[str, float] = collections.defaultdict(float)
    for plane in space.planes:
        if not plane.name.startswith(("/host:CPU", "/device:GPU")):
            continue
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            # TF op lines: "TensorFlow Ops" (GPU) / thread lines whose events are "name:Type".
            for event in line.events:
                name = names.get(event.metadata_id, "")
                # Not an op event ("name:Type"), or tf.data / allocator bookkeeping.
                if ":" not in name or name.startswith(("Iterator::", "MemoryAllocation")):
                    continue
                op_type = name.rsplit(":", 1)[1].strip() or name
                if op_type in _CONTAINERS or op_type.startswith("__inference"):
                    continue
                totals[op_type] += event.duration_ps / 1e6
    return dict(totals)


def _profiled_step():
    import tensorflow as tf

    if FLAGS.what == "train":
        from bench import train_suite

        case = train_suite.Case(FLAGS.preset, FLAGS.precision, FLAGS.seq_length, FLAGS.batch_size)
        workdir = tempfile.mkdtemp(prefix="bench-profile-")
        return train_suite.ours_step(case, train_suite.synthetic_batch(case), 1, FLAGS.xla, workdir)
    from bench import data, infer_suite

    serve = infer_suite.ours_inprocess(FLAGS.preset, FLAGS.seq_length)
    texts = tf.constant(data.sentences(FLAGS.batch_size))
    return lambda: serve(texts)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    import tensorflow as tf

    step = _profiled_step()
    step()  # warm-up: tracing and compilation stay out of the trace
    logdir = FLAGS.logdir or tempfile.mkdtemp(prefix="bench-trace-")
    tf.profiler.experimental.start(logdir)
    for _ in range(FLAGS.steps):
        step()
    tf.profiler.experimental.stop()
    totals = op_times(logdir)
    total = sum(totals.values())
    print(f"{FLAGS.what} {FLAGS.preset}: {total / 1e3 / FLAGS.steps:.1f} ms of op time per step")
    for name, us in sorted(totals.items(), key=lambda kv: -kv[1])[: FLAGS.top]:
        print(f"  {name:<40} {us / 1e3 / FLAGS.steps:10.2f} ms  {100 * us / total:5.1f}%")
    print(f"trace: {logdir}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
