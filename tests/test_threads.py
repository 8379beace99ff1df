"""bert_tf.threads: pool sizes from flags, with errors that name the flag."""

import pytest
import tensorflow as tf

from bert_tf import threads

FLAGS = ("intra_flag", "inter_flag")


def test_zero_leaves_the_pools_as_they_are():
    tf.constant(1.0) + 1.0  # the runtime has started: sizes are fixed from here on
    before = (
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )
    threads.configure(0, 0, FLAGS)  # no error although the runtime runs
    assert before == (
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )


def test_a_change_after_the_runtime_started_names_the_flag():
    tf.constant(1.0) + 1.0
    size = tf.config.threading.get_inter_op_parallelism_threads() + 3
    with pytest.raises(ValueError, match=rf"^--inter_flag={size}: .*initialization"):
        threads.configure(0, size, FLAGS)


def test_negative_sizes_are_refused():
    with pytest.raises(ValueError, match=r"^--intra_flag: expected a thread count >= 0, got -1"):
        threads.configure(-1, 0, FLAGS)
