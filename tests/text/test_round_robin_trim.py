"""`round_robin_trim` (core TF ops) gives `tf_text.RoundRobinTrimmer`'s outputs.

The trimmer's own op (`TFText>RoundRobinTrim`) is not in the tensorflow-text ops the stock
TF Serving links (serving/op_check.py), so the packer uses `round_robin_trim` instead; these
tests hold it to the tensorflow-text trimmer: on 4,500 random rows in ragged batches, and by
hypothesis over lengths, budgets, one and two segments and empty segments, also against a
plain Python round robin (one token to each segment in turn while the budget lasts).
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_tf.text.packer import round_robin_trim


def _ragged(rows: list[list[int]], splits_dtype=tf.int64) -> tf.RaggedTensor:
    return tf.ragged.constant(rows, dtype=tf.int32, row_splits_dtype=splits_dtype)


def _python_round_robin(lengths: list[int], budget: int) -> list[int]:
    """Tokens kept per segment: one to each segment in turn, first segment first."""
    kept = [0] * len(lengths)
    while budget > 0 and any(k < n for k, n in zip(kept, lengths, strict=True)):
        for i, n in enumerate(lengths):
            if budget > 0 and kept[i] < n:
                kept[i] += 1
                budget -= 1
    return kept


def _assert_same(got: list[tf.RaggedTensor], want: list[tf.RaggedTensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.row_splits.dtype == w.row_splits.dtype
        assert g.to_list() == w.to_list()


def test_equals_round_robin_trimmer_on_4500_random_rows():
    rng = np.random.default_rng(42)
    rows = 0
    for _ in range(30):  # 30 ragged batches of 150 rows: one or two segments, various budgets
        batch, budget = 150, int(rng.integers(0, 64))
        segments = []
        for _ in range(int(rng.integers(1, 3))):
            lengths = rng.integers(0, 70, batch) * (rng.random(batch) > 0.1)  # ~10% empty
            values = rng.integers(0, 30000, int(lengths.sum())).astype(np.int32)
            segments.append(tf.RaggedTensor.from_row_lengths(values, lengths.astype(np.int64)))
        want = tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments)
        _assert_same(round_robin_trim(segments, budget), want)
        rows += batch
    assert rows == 4500


ROWS = st.lists(st.integers(0, 12), min_size=1, max_size=6)


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    lengths_a=ROWS,
    lengths_b=st.none() | ROWS,
    budget=st.integers(0, 30),
    splits_int32=st.booleans(),
)
def test_property_same_as_the_trimmer_and_a_python_round_robin(
    lengths_a, lengths_b, budget, splits_int32
):
    """Rows of the drawn lengths (0 = empty), values 100*segment + position; the budget is
    drawn down to 0 and 1 (less than one token per segment)."""
    if lengths_b is not None:
        lengths_b = (lengths_b * len(lengths_a))[: len(lengths_a)]  # as many rows as a
    lengths = [lengths_a] + ([] if lengths_b is None else [lengths_b])
    dtype = tf.int32 if splits_int32 else tf.int64
    segments = [
        _ragged([[100 * s + i for i in range(n)] for n in row_lengths], dtype)
        for s, row_lengths in enumerate(lengths)
    ]
    got = round_robin_trim(segments, budget)
    _assert_same(got, tf_text.RoundRobinTrimmer(max_seq_length=budget).trim(segments))
    for row, row_lengths in enumerate(zip(*lengths, strict=True)):
        kept = _python_round_robin(list(row_lengths), budget)
        for s, k in enumerate(kept):
            # the first k tokens of the segment, in order
            assert got[s][row].numpy().tolist() == [100 * s + i for i in range(k)]
        assert sum(kept) == min(sum(row_lengths), budget)


def test_a_tensor_budget_in_a_graph_without_loops_or_tensorflow_text_ops():
    """The graph op set against the stock server's list: tests/serving/test_op_check.py."""
    spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)
    trim = tf.function(lambda a, b, budget: round_robin_trim([a, b], budget))
    graph = trim.get_concrete_function(spec, spec, tf.TensorSpec([], tf.int32)).graph
    ops = {op.type for op in graph.get_operations()}
    assert not ops & {"While", "StatelessWhile"}  # a closed form, no loop
    assert not [op for op in ops if "RoundRobin" in op or op.startswith("TFText>")], ops
    a, b = _ragged([[1, 2, 3, 4, 5], [], [6]]), _ragged([[7, 8], [9, 10, 11], []])
    out = trim(a, b, tf.constant(3))
    assert [t.to_list() for t in out] == [[[1, 2], [], [6]], [[7], [9, 10, 11], []]]


@pytest.mark.parametrize("count", [0, 3])
def test_one_or_two_segments_only(count):
    with pytest.raises(ValueError, match=f"one or two segments, got {count}"):
        round_robin_trim([_ragged([[1, 2]])] * count, 3)


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="budget must be >= 0, got -1"):
        round_robin_trim([_ragged([[1, 2]])], -1)
