"""BERT building blocks that no library layer matches exactly.

keras-nlp's `TransformerEncoder` has one dropout rate for both the attention probabilities and the
residual branches (BERT has two), and `keras.layers.MultiHeadAttention` runs softmax in the compute
dtype (float16 under mixed precision). `BertAttention` and `TransformerLayer` fix exactly those two
points and otherwise reuse the Keras layers (EinsumDense projections, LayerNormalization, Dense).
`FlatDense` (the feed-forward), `FlatEinsumDense` (the attention projections) and `WordEmbedding`
(the tied vocabulary projection) only run their matmul as one 2-D MatMul, which TF executes faster
than the broadcasting one on 3-D inputs. At inference on one sequence (a served request),
`TransformerLayer` runs `BertAttention.single_sequence_self_attention`: the same numbers without
the per-head transposes. `BertDropout` is Keras' dropout with its mask drawn from 16 random bits
per element (half the Philox work, and the exact rate in bfloat16).

Example:

```python
import numpy as np
from bert_tf.modeling.layers import TransformerLayer

layer = TransformerLayer(num_attention_heads=2, intermediate_size=64)
x = np.random.rand(2, 5, 32).astype("float32")
mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype="int32")
y = layer(x, padding_mask=mask)  # [2, 5, 32]
```
"""

from __future__ import annotations

import math
from collections.abc import Callable

import keras
import tensorflow as tf
from keras import ops
from keras_nlp.layers import ReversibleEmbedding

from bert_tf.modeling.configs import (
    ACTIVATIONS,
    GELU_ERF_NAMES,
    GELU_TANH_NAMES,
    LAYER_NORM_EPSILON,
)

# google-research/bert adds -10000 to the attention logits of padding positions.
_MASK_ADDER = -10000.0


@keras.saving.register_keras_serializable(package="bert_tf")
def gelu_approx(x):
    """GELU, tanh approximation (HF "gelu_new"; google-research modeling.py's current `gelu`)."""
    return keras.activations.gelu(x, approximate=True)


_ACTIVATION_FNS: dict[str, Callable] = {
    # keras' default approximate=False is the exact erf form.
    **dict.fromkeys(GELU_ERF_NAMES, keras.activations.gelu),
    **dict.fromkeys(GELU_TANH_NAMES, gelu_approx),
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
    "swish": keras.activations.silu,
    "silu": keras.activations.silu,
    "linear": keras.activations.linear,
}
assert set(_ACTIVATION_FNS) == set(ACTIVATIONS)


def get_activation(name: str) -> Callable:
    """Maps a `BertConfig.hidden_act` name to a function (layers store the name, not the fn)."""
    if name not in _ACTIVATION_FNS:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}")
    return _ACTIVATION_FNS[name]


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
    """BERT's weight initializer (`initializer_range` = stddev, truncated at 2 stddev)."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


def _flat_matmul(layer_call: Callable, inputs, units: int):
    """Runs `layer_call` on `inputs` flattened to `[-1, width]`; restores the leading dims.

    TF runs `[batch, n, width] @ [width, units]` as a broadcasting BatchMatMul, which on CPU
    takes ~1.35x the time of one 2-D MatMul of the same numbers (`[32, 128, 256] @ [256, 1024]`),
    and whose gradient for the shared kernel materialises `[batch, width, units]` before summing
    over the batch (500 MB for the masked-LM vocabulary projection of a batch of 32 at H=128).
    """
    shape = ops.shape(inputs)
    outputs = layer_call(ops.reshape(inputs, (-1, shape[-1])))
    return ops.reshape(outputs, (*shape[:-1], units))


@keras.saving.register_keras_serializable(package="bert_tf")
class WordEmbedding(ReversibleEmbedding):
    """keras-nlp's `ReversibleEmbedding` whose reverse (tied output) projection is a 2-D matmul
    (see `_flat_matmul`): the same numbers, its training step ~3x faster on CPU."""

    def call(self, inputs, reverse=False):
        if not reverse:
            return super().call(inputs)
        return _flat_matmul(
            lambda x: super(WordEmbedding, self).call(x, reverse=True), inputs, self.input_dim
        )


@keras.saving.register_keras_serializable(package="bert_tf")
class FlatDense(keras.layers.Dense):
    """`keras.layers.Dense` whose matmul on `[batch, seq, width]` is one 2-D MatMul (see
    `_flat_matmul`); same variables and maths."""

    def call(self, inputs, training=None):
        return _flat_matmul(lambda x: super(FlatDense, self).call(x), inputs, self.units)


class FlatEinsumDense(keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` whose contraction runs as one 2-D MatMul when the equation is a
    projection (the input's trailing dims contracted with the kernel's leading ones, as in every
    `MultiHeadAttention` projection: `abc,cde->abde`, `abcd,cde->abe`); same variables and maths.

    TF runs such an einsum as a BatchMatMul whose kernel gradient is summed over the batch
    afterwards (see `_flat_matmul`); in a MiniLM fine-tuning step on CPU those projections took
    as long as the feed-forward's twice larger 2-D MatMuls.
    """

    def call(self, inputs, training=None):
        contracted = _projection_dims(self.equation)
        if contracted is None:
            return super().call(inputs, training=training)
        kernel = ops.cast(self.kernel, self.compute_dtype)
        width = math.prod(kernel.shape[:contracted])
        out_dims = tuple(kernel.shape[contracted:])
        flat = ops.matmul(ops.reshape(inputs, (-1, width)), ops.reshape(kernel, (width, -1)))
        leading = ops.shape(inputs)[: len(inputs.shape) - contracted]
        x = ops.reshape(flat, (*leading, *out_dims))
        if self.bias is not None:
            x = ops.add(x, ops.cast(self.bias, self.compute_dtype))
        if self.activation is not None:
            x = self.activation(x)
        return x


def _projection_dims(equation: str) -> int | None:
    """How many trailing input dims `equation` contracts with the kernel's leading dims, where the
    output is the input's other dims followed by the kernel's (`abc,cde->abde` -> 1); else None."""
    lhs, _, out = equation.partition("->")
    x, _, kernel = lhs.partition(",")
    for k in range(1, min(len(x), len(kernel)) + 1):
        if x[-k:] == kernel[:k] and out == x[:-k] + kernel[k:]:
            return k
    return None


# Dropout draws 16 random bits per element: keep where bits >= round(rate * 2**16).
_DROPOUT_BITS = 16


@keras.saving.register_keras_serializable(package="bert_tf")
class BertDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` drawing 16 random bits per element instead of a float uniform.

    Keras draws one uniform in the compute dtype per element (`StatelessRandomUniformV2` then
    `>= rate` and a select, forward and backward). That was ~15% of a mixed-bfloat16 MiniLM
    fine-tuning step's op time, and in bfloat16 the uniform has 7 mantissa bits, so rate 0.1
    dropped 10.13% of the units. Here one 32-bit Philox draw serves two elements (its halves as
    uint16), the keep mask is `bits >= round(rate * 65536)` (rate exact to 1.5e-5 in every
    dtype), and the output is `x * keep * 1 / (1 - rate)`: the same inverted dropout, about half
    the time (forward + backward). Same variables (the seed generator's state) and config as
    `keras.layers.Dropout`, so checkpoints and saved models are unchanged.
    """

    def call(self, inputs, training=False):
        if not training or self.rate <= 0 or self.rate >= 1 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        state = self.seed_generator.next()
        # Stateless ops take an int32 seed; the generator's state is int64 (as Keras' dropout).
        seed = tf.cast(tf.math.floormod(state, tf.int32.max - 1), tf.int32)
        count = tf.size(inputs)
        bits = tf.random.stateless_uniform(
            [(count + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32
        )
        # A no-op slice (no copy) when the element count is even.
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:count]
        keep = halves >= round(self.rate * 2**_DROPOUT_BITS)
        scale = tf.cast(keep, inputs.dtype) * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return inputs * tf.reshape(scale, tf.shape(inputs))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertAttention(keras.layers.MultiHeadAttention):
    """Multi-head self-attention with the softmax computed in float32.

    Same variables and maths as `keras.layers.MultiHeadAttention` (query/key/value kernels
    `[H, heads, head_size]`, output kernel `[heads, head_size, H]`); padding positions get
    -10000 added to their logits, as in google-research/bert. The query/key/value/output
    projections run as 2-D MatMuls (`FlatEinsumDense`).
    """

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        if self._attention_axes != (1,):  # `_compute_attention` lays out [B, T, heads, size]
            raise ValueError(
                f"BertAttention attends over axis 1 of [batch, seq, hidden] inputs; got "
                f"inputs of shape {tuple(query_shape)} with attention_axes={self._attention_axes}"
            )
        # MultiHeadAttention.build makes these EinsumDense layers itself; only their call
        # differs, so they are re-classed rather than built again (same variables and names).
        for dense in (self._query_dense, self._key_dense, self._value_dense, self._output_dense):
            dense.__class__ = FlatEinsumDense
        self._dropout_layer.__class__ = BertDropout  # the probabilities' dropout, likewise

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        # query/key/value are [B, T, heads, size]. The heads are moved in front explicitly rather
        # than by MultiHeadAttention's einsums: TF ran `aecd,abcd->acbe` (key first) as a
        # BatchMatMul giving [B, heads, S, T] and then transposed those scores, a reorder that
        # took as long as a projection (MiniLM, batch 32). Same products, same numbers.
        query = ops.multiply(query, ops.cast(self._inverse_sqrt_key_dim, query.dtype))
        query = ops.transpose(query, (0, 2, 1, 3))  # [B, heads, T, size]
        key = ops.transpose(key, (0, 2, 3, 1))  # [B, heads, size, S]
        # [B, heads, T, S]; float32 because float16 softmax loses small probabilities.
        scores = ops.cast(ops.matmul(query, key), "float32")
        if attention_mask is not None:
            # [B, T, S] -> [B, 1, T, S] to broadcast over heads.
            mask = ops.cast(ops.expand_dims(attention_mask, axis=1), "float32")
            scores = scores + (1.0 - mask) * _MASK_ADDER
        probs = ops.softmax(scores, axis=-1)
        dropped = self._dropout_layer(ops.cast(probs, value.dtype), training=training)
        context = ops.matmul(dropped, ops.transpose(value, (0, 2, 1, 3)))  # [B, heads, T, size]
        return ops.transpose(context, (0, 2, 1, 3)), probs

    def single_sequence_self_attention(self, x, attention_mask=None):
        """Self-attention of one sequence `x` `[1, T, H]` for inference (no dropout): the same
        numbers as `call`, without its head transposes.

        `call` lays the heads out as `[B, T, heads, head_size]`, so TF transposes q, k, v and the
        context around the per-head BatchMatMuls (4 per layer); under oneDNN each is a reorder
        costing ~90 us at batch 1, a quarter of a `mini` encoder call. For one sequence, the
        projections computed transposed (`kernel^T x^T`, `[heads * head_size, T]`) are already
        head-major, and grappler folds every other transpose into a MatMul's adjoint flag. (With
        a batch the heads would have to move past it, hence one sequence only; broadcasting the
        kernel over the batch instead ran 2-3x slower in oneDNN.)

        `attention_mask`: bool `[1, 1, T]` or `[1, T, T]`, True where a query may attend.
        """
        dtype = self.compute_dtype
        width, heads, size = x.shape[-1], self._num_heads, self._key_dim
        length = ops.shape(x)[1]
        x_t = ops.transpose(x[0])  # [H, T]

        def project(dense):  # [heads, size, T]
            kernel = ops.reshape(ops.cast(dense.kernel, dtype), (width, heads * size))
            y = ops.matmul(ops.transpose(kernel), x_t)
            y = y + ops.reshape(ops.cast(dense.bias, dtype), (heads * size, 1))
            return ops.reshape(y, (heads, size, length))

        query = project(self._query_dense) * ops.cast(self._inverse_sqrt_key_dim, dtype)
        key, value = project(self._key_dense), project(self._value_dense)
        scores = ops.cast(ops.matmul(ops.swapaxes(query, 1, 2), key), "float32")  # [h, T, T]
        if attention_mask is not None:
            scores = scores + (1.0 - ops.cast(attention_mask[0], "float32")) * _MASK_ADDER
        probs = ops.cast(ops.softmax(scores, axis=-1), dtype)
        context = ops.matmul(value, ops.swapaxes(probs, 1, 2))  # [heads, size, T]
        context = ops.reshape(context, (heads * size, length))
        output = self._output_dense
        kernel = ops.reshape(ops.cast(output.kernel, dtype), (heads * size, width))
        y = ops.matmul(ops.transpose(context), kernel) + ops.cast(output.bias, dtype)
        return ops.expand_dims(y, 0)


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerLayer(keras.layers.Layer):
    """One post-LayerNorm BERT Transformer layer (attention, add & norm, FFN, add & norm).

    Args:
        num_attention_heads: number of heads; must divide the input width.
        intermediate_size: feed-forward width.
        hidden_act: feed-forward activation name (see `bert_tf.modeling.configs.ACTIVATIONS`).
        hidden_dropout_prob: dropout on the attention output and the FFN output.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        initializer_range: stddev of the truncated-normal kernel initializer.
        layer_norm_epsilon: LayerNorm epsilon (BERT: 1e-12).

    Call args:
        inputs: float `[batch, seq, hidden]`.
        padding_mask: int/bool `[batch, seq]`, 1 for real tokens; None attends everywhere.
    """

    def __init__(
        self,
        num_attention_heads: int,
        intermediate_size: int,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.0,
        attention_probs_dropout_prob: float = 0.0,
        initializer_range: float = 0.02,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        get_activation(hidden_act)  # fail early on a bad name
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def build(self, inputs_shape):
        hidden = inputs_shape[-1]
        if hidden % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must divide hidden size {hidden}"
            )
        self.attention = BertAttention(
            num_heads=self.num_attention_heads,
            key_dim=hidden // self.num_attention_heads,
            dropout=self.attention_probs_dropout_prob,
            kernel_initializer=truncated_normal(self.initializer_range),
            dtype=self.dtype_policy,
            name="attention",
        )
        self.attention.build(inputs_shape, inputs_shape)
        self.attention_dropout = BertDropout(
            self.hidden_dropout_prob, dtype=self.dtype_policy, name="attention_dropout"
        )
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="attention_layer_norm"
        )
        self.attention_layer_norm.build(inputs_shape)
        self.intermediate_dense = FlatDense(
            self.intermediate_size,
            activation=get_activation(self.hidden_act),
            kernel_initializer=truncated_normal(self.initializer_range),
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(inputs_shape)
        self.output_dense = FlatDense(
            hidden,
            kernel_initializer=truncated_normal(self.initializer_range),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_size))
        self.output_dropout = BertDropout(
            self.hidden_dropout_prob, dtype=self.dtype_policy, name="output_dropout"
        )
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="output_layer_norm"
        )
        self.output_layer_norm.build(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, training=None):
        attention_mask = None
        if padding_mask is not None:
            attention_mask = ops.expand_dims(ops.cast(padding_mask, "bool"), axis=1)  # [B, 1, S]
        x = self._self_attention(inputs, attention_mask, training)
        x = self.attention_dropout(x, training=training)
        x = self.attention_layer_norm(x + inputs)
        residual = x
        x = self.intermediate_dense(x)
        x = self.output_dense(x)
        x = self.output_dropout(x, training=training)
        return self.output_layer_norm(x + residual)

    def _self_attention(self, inputs, attention_mask, training):
        def batched():
            return self.attention(inputs, inputs, attention_mask=attention_mask, training=training)

        if training or inputs.shape[0] not in (None, 1):
            return batched()

        def single():
            return self.attention.single_sequence_self_attention(inputs, attention_mask)

        if inputs.shape[0] == 1:
            return single()
        return ops.cond(ops.equal(ops.shape(inputs)[0], 1), single, batched)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_attention_heads": self.num_attention_heads,
                "intermediate_size": self.intermediate_size,
                "hidden_act": self.hidden_act,
                "hidden_dropout_prob": self.hidden_dropout_prob,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "initializer_range": self.initializer_range,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class FlattenChoices(keras.layers.Layer):
    """`[batch, num_choices, seq]` -> `[batch * num_choices, seq]` (for multiple choice)."""

    def call(self, inputs):
        return ops.reshape(inputs, (-1, ops.shape(inputs)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])
