"""Masked-LM masking (BERT's 80/10/10 procedure) as TensorFlow ops, deterministic per example.

One implementation serves static masking (`create_pretraining_data`), dynamic re-masking in a
`tf.data` pipeline (RoBERTa style) and TFX Transform graphs: everything is graph-compatible TF
on int token ids, ragged `[batch, (tokens)]` or padded `[batch, seq_length]`.

It follows google-research/bert `create_masked_lm_predictions`:

- `num_to_predict = min(max_predictions_per_seq, max(1, round(n * masked_lm_prob)))` where `n`
  counts the row's non-padding tokens, [CLS] and [SEP] included, as the original counts them.
  (tf-text's `RandomItemSelector` would use `ceil(n_selectable * rate)`; we keep the original's
  count so static data matches google-research's statistics.)
- Candidates are shuffled and taken greedily; with whole-word masking a candidate is a word (a
  token plus its following "##" pieces), and a word that would push the count of masked pieces
  past `num_to_predict` is skipped, as in the original. [CLS], [SEP] and [PAD] are never masked.
- Each chosen piece becomes [MASK] 80% of the time, a uniformly random vocabulary id 10% and is
  kept 10%. Positions come out sorted; predictions are padded to `max_predictions_per_seq` with
  weight 0.

Randomness is stateless and per row: each row's outcome depends only on its ids and its seed
(a pair of ints), never on the batch it is in or on processing order, so a distributed (Beam)
run given the same per-example seeds writes the same examples. Use `example_seed` to derive a
row's seed from a base seed and indices.

Example:

    import tensorflow as tf
    from bert_tf.text.masking import MaskedLmMasker, example_seed

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "eat", "##ing", "."]
    masker = MaskedLmMasker.from_vocab(
        vocab, whole_word_mask=True, max_predictions_per_seq=3, masked_lm_prob=0.3)
    ids = tf.ragged.constant([[2, 5, 6, 7, 8, 9, 3]])   # [CLS] a man eat ##ing . [SEP]
    out = masker(ids, tf.constant([example_seed(12345, 0)]))
    out["masked_lm_positions"]  # round(7 * 0.3) = 2 pieces, e.g. [[3, 4, 0]] ("eat ##ing")
    out["masked_lm_weights"]    # [[1., 1., 0.]]

    # Dynamic masking in tf.data: a fresh seed pair per example and per epoch.
    seeds = tf.data.Dataset.random(seed=1, rerandomize_each_iteration=True).batch(2)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.text.tokenization import SpecialTokenIds


def example_seed(*parts: int) -> tuple[int, int]:
    """A stateless-op seed pair derived from non-negative ints, e.g. (seed, dupe, doc, i).

    numpy's `SeedSequence` hashes the tuple (a fixed, documented algorithm), so every process
    and machine derives the same pair for the same parts.
    """
    a, b = np.random.SeedSequence(list(parts)).generate_state(2, np.uint32)
    return int(a), int(b)


def _row_uniforms(seeds: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """Uniform [0, 1) floats [batch, length, 3], row i from `stateless_uniform(seeds[i])`.

    Stateless ops take one seed per call, hence the map over rows. Philox fills the output in
    order, so position j of a row gets the same numbers whatever `length` (the batch's padded
    length) is: results do not depend on the batch a row lands in.
    """
    return tf.map_fn(
        lambda seed: tf.random.stateless_uniform([length, 3], seed),
        seeds,
        fn_output_signature=tf.float32,
    )


class _WordSelector(tf_text.RandomItemSelector):
    """Selects masked pieces: shuffled (whole) words taken greedily up to `num_to_predict`.

    Overrides the selection itself: tf-text's shuffle has no per-row seed, and it caps words
    rather than pieces and counts with `ceil(selectable * rate)`. `get_selectable` (the
    [CLS]/[SEP]/[PAD] exclusion) is tf-text's.
    """

    def __init__(self, masker: MaskedLmMasker, keys: tf.Tensor):
        super().__init__(
            masker.max_predictions, masker.masked_lm_prob, list(masker.unselectable_ids)
        )
        self._masker = masker
        self._keys = keys  # [batch, length] uniform shuffle key of word number j in each row

    def get_selection_mask(self, input_ids: tf.RaggedTensor, axis: int) -> tf.RaggedTensor:
        masker = self._masker
        selectable = self.get_selectable(input_ids, axis).to_tensor(False)
        ids = input_ids.to_tensor(masker.pad_id)
        length = tf.shape(ids)[1]
        continues = tf.zeros_like(selectable)
        if masker.whole_word_mask:
            # A "##" piece joins the word before it, unless a special token separates them.
            previous = tf.pad(selectable[:, :-1], [[0, 0], [1, 0]])
            continues = tf.gather(masker.continuation_table, ids) & selectable & previous
        starts = selectable & ~continues
        word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
        num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        # Pieces per word number: segment sum over (row, word) pairs.
        batch = tf.shape(ids)[0]
        segments = tf.range(batch)[:, None] * length + word
        word_length = tf.reshape(
            tf.math.unsorted_segment_sum(
                tf.cast(selectable, tf.int32), segments, num_segments=batch * length
            ),
            [batch, length],
        )
        exists = tf.range(length)[None, :] < num_words[:, None]
        order = tf.argsort(tf.where(exists, self._keys, 2.0), axis=1, stable=True)
        length_in_order = tf.gather(word_length, order, batch_dims=1)

        real = tf.reduce_sum(tf.cast(ids != masker.pad_id, tf.float64), axis=1)
        num_to_predict = tf.cast(
            tf.clip_by_value(
                tf.round(real * self.selection_rate), 1, self.max_selections_per_batch
            ),
            tf.int32,
        )

        # Greedy with skipping (the original's loop): sequential by nature, vectorized over rows.
        def take(state, pieces):
            total, _ = state
            taken = (pieces > 0) & (total + pieces <= num_to_predict)
            return total + tf.where(taken, pieces, 0), taken

        _, taken_in_order = tf.scan(
            take,
            _transpose(length_in_order),
            initializer=(tf.zeros([batch], tf.int32), tf.zeros([batch], tf.bool)),
        )
        taken = tf.gather(_transpose(taken_in_order), tf.argsort(order, axis=1), batch_dims=1)
        selected = selectable & tf.gather(taken, word, batch_dims=1)
        return tf.RaggedTensor.from_tensor(selected, lengths=input_ids.row_lengths())


def _transpose(matrix: tf.Tensor) -> tf.Tensor:
    """`tf.transpose` of a [rows, columns] tensor, as a gather: oneDNN's graph pass logs
    "E ... oneDNN supports DT_INT32 only on platforms with AVX-512" for any Transpose op of
    integers or booleans (an error line in every process that masks; the op still runs)."""
    rows, columns = tf.shape(matrix)[0], tf.shape(matrix)[1]
    index = tf.range(rows)[None, :] * columns + tf.range(columns)[:, None]
    return tf.gather(tf.reshape(matrix, [-1]), index)


class _SeededMaskValuesChooser(tf_text.MaskValuesChooser):
    """tf-text's 80/10/10 chooser with per-row stateless randomness instead of global RNG."""

    def __init__(self, masker: MaskedLmMasker, uniforms: tf.Tensor):
        super().__init__(
            masker.vocab_size, masker.mask_id, masker.mask_token_rate, masker.random_token_rate
        )
        self._masker = masker
        self._uniforms = uniforms  # [batch, length, 2]: action, random id; for the k-th piece

    def get_mask_values(self, masked_lm_ids: tf.RaggedTensor) -> tf.RaggedTensor:
        rows = masked_lm_ids.value_rowids()
        nth = tf.ragged.range(masked_lm_ids.row_lengths()).flat_values
        uniforms = tf.gather_nd(self._uniforms, tf.stack([rows, nth], axis=1))
        ids = masked_lm_ids.flat_values
        random_ids = tf.cast(tf.floor(uniforms[:, 1] * self.vocab_size), ids.dtype)
        mask_rate = self._masker.mask_token_rate
        values = tf.where(
            uniforms[:, 0] < mask_rate,
            tf.cast(self.mask_token, ids.dtype),
            tf.where(uniforms[:, 0] < mask_rate + self.random_token_rate, random_ids, ids),
        )
        return masked_lm_ids.with_flat_values(values)


class MaskedLmMasker:
    """Applies BERT masked-LM masking to token ids with per-example seeds.

    Args:
        vocab_size: ids drawn for the "random token" case are uniform in [0, vocab_size).
        mask_id: id of [MASK].
        pad_id: id of [PAD]: padding is neither counted nor masked.
        unselectable_ids: ids never masked ([CLS], [SEP]; `pad_id` is added).
        max_predictions_per_seq: most masked pieces per row; outputs are padded to it.
        masked_lm_prob: fraction of the row's tokens to mask (0 < p < 1).
        mask_token_rate, random_token_rate: of the chosen pieces, how many become [MASK] and a
            random id (the rest keep their id).
        continuation_table: for whole-word masking, a bool per vocab id, True for "##" pieces;
            None masks pieces independently.

    Call with `input_ids` (int, ragged `[batch, (tokens)]`, padded `[batch, seq]` or one row
    `[seq]`) and `seeds` (int `[batch, 2]`, or `[2]` for one row). Returns a dict:
    `input_ids` (masked, same shape and kind as given), `masked_lm_positions`,
    `masked_lm_ids` (original ids; same dtype as the input) and `masked_lm_weights` (float32),
    each `[batch, max_predictions_per_seq]` (or `[max_predictions_per_seq]`).
    """

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        pad_id: int,
        unselectable_ids: Sequence[int],
        max_predictions_per_seq: int = 20,
        masked_lm_prob: float = 0.15,
        mask_token_rate: float = 0.8,
        random_token_rate: float = 0.1,
        continuation_table: Sequence[bool] | None = None,
    ):
        if vocab_size < 1 or not 0 <= mask_id < vocab_size or not 0 <= pad_id < vocab_size:
            raise ValueError(
                f"need 0 <= mask_id, pad_id < vocab_size, got mask_id={mask_id}, "
                f"pad_id={pad_id}, vocab_size={vocab_size}"
            )
        if max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got {max_predictions_per_seq}")
        if not 0.0 < masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {masked_lm_prob}")
        if min(mask_token_rate, random_token_rate) < 0 or (mask_token_rate + random_token_rate > 1):
            raise ValueError(
                "mask_token_rate and random_token_rate must be >= 0 with a sum <= 1, got "
                f"{mask_token_rate} and {random_token_rate}"
            )
        if continuation_table is not None and len(continuation_table) != vocab_size:
            raise ValueError(
                f"continuation_table has {len(continuation_table)} entries, expected one per "
                f"vocab id ({vocab_size})"
            )
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        self.pad_id = pad_id
        self.unselectable_ids = tuple(sorted({*unselectable_ids, pad_id}))
        self.max_predictions = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.whole_word_mask = continuation_table is not None
        self.continuation_table = (
            tf.constant(list(continuation_table), tf.bool) if self.whole_word_mask else None
        )

    @classmethod
    def from_vocab(
        cls, vocabulary: Sequence[str], whole_word_mask: bool = False, **kwargs
    ) -> MaskedLmMasker:
        """A masker for a token list (index = id): special ids looked up, "##" pieces found."""
        special = SpecialTokenIds.from_vocab(vocabulary)
        table = [token.startswith("##") for token in vocabulary] if whole_word_mask else None
        return cls(
            vocab_size=len(vocabulary),
            mask_id=special.mask,
            pad_id=special.pad,
            unselectable_ids=(special.cls, special.sep),
            continuation_table=table,
            **kwargs,
        )

    def get_config(self) -> dict:
        table = self.continuation_table
        return {
            "vocab_size": self.vocab_size,
            "mask_id": self.mask_id,
            "pad_id": self.pad_id,
            "unselectable_ids": list(self.unselectable_ids),
            "max_predictions_per_seq": self.max_predictions,
            "masked_lm_prob": self.masked_lm_prob,
            "mask_token_rate": self.mask_token_rate,
            "random_token_rate": self.random_token_rate,
            "continuation_table": None if table is None else table.numpy().tolist(),
        }

    def __call__(self, input_ids, seeds) -> dict[str, tf.Tensor | tf.RaggedTensor]:
        is_ragged = isinstance(input_ids, tf.RaggedTensor)
        if not is_ragged:
            input_ids = tf.convert_to_tensor(input_ids)
        one_row = not is_ragged and input_ids.shape.rank == 1
        if one_row:
            input_ids, seeds = input_ids[None], tf.convert_to_tensor(seeds)[None]
        rows = input_ids if is_ragged else tf.RaggedTensor.from_tensor(input_ids)
        masked, outputs = self._mask_rows(rows, tf.cast(seeds, tf.int64))
        outputs["masked_lm_positions"] = tf.cast(outputs["masked_lm_positions"], input_ids.dtype)
        if is_ragged:
            outputs["input_ids"] = masked
        else:
            dense = tf.reshape(masked.flat_values, tf.shape(input_ids))
            outputs["input_ids"] = tf.ensure_shape(dense, input_ids.shape)
        return {k: v[0] for k, v in outputs.items()} if one_row else outputs

    # A tf.function so eager callers get the map and scan compiled, not run op by op.
    @tf.function(reduce_retracing=True)
    def _mask_rows(self, rows: tf.RaggedTensor, seeds: tf.Tensor):
        uniforms = _row_uniforms(seeds, tf.reduce_max(rows.row_lengths()))
        masked, positions, labels = tf_text.mask_language_model(
            rows,
            _WordSelector(self, uniforms[:, :, 0]),
            _SeededMaskValuesChooser(self, uniforms[:, :, 1:]),
            axis=1,
        )
        shape = [None, self.max_predictions]
        return masked, {
            "masked_lm_positions": positions.to_tensor(0, shape=shape),
            "masked_lm_ids": labels.to_tensor(0, shape=shape),
            "masked_lm_weights": tf.sequence_mask(
                positions.row_lengths(), self.max_predictions, tf.float32
            ),
        }


def restore_original_ids(input_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights):
    """Undoes static masking: puts the labels back at their positions ([batch, seq] tensors).

    Lets dynamic masking re-mask examples written already masked (by us or google-research).
    """
    taken = masked_lm_weights > 0
    rows = tf.broadcast_to(tf.range(tf.shape(input_ids)[0])[:, None], tf.shape(taken))
    indices = tf.stack([rows[taken], tf.cast(masked_lm_positions[taken], tf.int32)], axis=1)
    updates = tf.cast(masked_lm_ids[taken], input_ids.dtype)
    return tf.tensor_scatter_nd_update(input_ids, indices, updates)
