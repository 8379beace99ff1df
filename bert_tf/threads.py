"""TensorFlow's thread pools, sized from flags before the runtime starts.

TensorFlow fixes its pools when its first op runs. At batch 1 one thread per op is the fastest
(measured: README "Batch 1 on one thread per op"), which is what the model server's
`--tensorflow_intra_op_parallelism=1` and the benchmark's `--intra_op_threads=1` set.

Example:

    from bert_tf import threads
    threads.configure(intra_op=1, inter_op=0, flags=("tensorflow_intra_op_parallelism",
                                                    "tensorflow_inter_op_parallelism"))
"""

from __future__ import annotations


def configure(intra_op: int, inter_op: int, flags: tuple[str, str]) -> None:
    """Sets the intra-op and inter-op pool sizes (0 leaves a pool at TensorFlow's default: all
    cores); a ValueError names the flag (from `flags`) when the runtime already started with
    another size."""
    import tensorflow as tf

    setters = (
        tf.config.threading.set_intra_op_parallelism_threads,
        tf.config.threading.set_inter_op_parallelism_threads,
    )
    for flag, value, setter in zip(flags, (intra_op, inter_op), setters, strict=True):
        if value < 0:
            raise ValueError(f"--{flag}: expected a thread count >= 0, got {value}")
        if value:
            try:
                setter(value)
            except RuntimeError as e:  # "cannot be modified after initialization"
                raise ValueError(f"--{flag}={value}: {e}") from None
