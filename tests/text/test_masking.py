"""MaskedLmMasker: counts, 80/10/10 split, special tokens, whole words, determinism."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import corpora
from bert_tf.text.masking import MaskedLmMasker, example_seed, restore_original_ids
from bert_tf.text.tokenization import BertTokenizer, SpecialTokenIds, load_vocab

MAX_PREDICTIONS = 20


@pytest.fixture(scope="module")
def vocab(minilm_dir):
    return load_vocab(minilm_dir / "vocab.txt")


@pytest.fixture(scope="module")
def special(vocab):
    return SpecialTokenIds.from_vocab(vocab)


@pytest.fixture(scope="module")
def lee_rows(vocab, special, gensim_dir):
    """Real WordPiece rows: [CLS] sentence [SEP] sentence [SEP], ragged int32."""
    docs = list(corpora.lee_documents(gensim_dir / "lee_background.cor"))[:60]
    sentences = [s for doc in docs for s in doc[:4]]
    ids = BertTokenizer(vocab)(tf.constant(sentences)).to_list()
    rows = [
        [special.cls, *a[:60], special.sep, *b[:60], special.sep]
        for a, b in zip(ids[::2], ids[1::2], strict=False)
    ]
    return tf.ragged.constant(rows, dtype=tf.int32)


def seeds(n, base=12345):
    return tf.constant([example_seed(base, i) for i in range(n)], tf.int64)


def expected_count(num_real_tokens):
    # google-research: min(max_predictions, max(1, round(len(tokens) * masked_lm_prob))).
    return min(MAX_PREDICTIONS, max(1, round(num_real_tokens * 0.15)))


def test_counts_and_80_10_10_split(vocab, special, lee_rows):
    masker = MaskedLmMasker.from_vocab(vocab, max_predictions_per_seq=MAX_PREDICTIONS)
    out = masker(lee_rows, seeds(lee_rows.shape[0]))
    weights = out["masked_lm_weights"].numpy()
    lengths = lee_rows.row_lengths().numpy()
    np.testing.assert_array_equal(weights.sum(1), [expected_count(n) for n in lengths])
    non_special = lengths - 3
    assert 0.13 < weights.sum() / non_special.sum() < 0.18

    original = lee_rows.to_tensor().numpy()
    masked = out["input_ids"].to_tensor().numpy()
    positions = out["masked_lm_positions"].numpy()
    labels = out["masked_lm_ids"].numpy()
    rows, cols = np.nonzero(weights)
    picked = positions[rows, cols]
    np.testing.assert_array_equal(labels[rows, cols], original[rows, picked])
    new = masked[rows, picked]
    as_mask = np.mean(new == special.mask)
    kept = np.mean(new == labels[rows, cols])
    assert abs(as_mask - 0.8) < 0.04, as_mask
    assert abs(kept - 0.1) < 0.03, kept
    assert abs(1 - as_mask - kept - 0.1) < 0.03
    # Nothing else changed.
    unmasked = np.ones_like(original, bool)
    unmasked[rows, picked] = False
    np.testing.assert_array_equal(masked[unmasked], original[unmasked])


def test_never_masks_special_tokens_or_padding_and_sorts_positions(vocab, special):
    masker = MaskedLmMasker.from_vocab(vocab, max_predictions_per_seq=6, masked_lm_prob=0.5)
    rng = np.random.default_rng(0)
    rows = np.zeros([64, 16], np.int32)
    for row in rows:
        n = rng.integers(4, 17)
        row[:n] = rng.integers(1000, 2000, n)
        row[0] = special.cls
        row[rng.integers(1, n - 1)] = special.sep
        row[n - 1] = special.sep
    out = masker(tf.constant(rows), seeds(64))
    weights = out["masked_lm_weights"].numpy()
    positions = out["masked_lm_positions"].numpy()
    masked = out["input_ids"].numpy()
    assert out["input_ids"].shape == rows.shape
    for row, original, w, p, m in zip(rows, rows, weights, positions, masked, strict=True):
        k = int(w.sum())
        assert k >= 1 and set(w[:k]) == {1.0} and not w[k:].any()
        assert np.all(np.diff(p[:k]) > 0) and not p[k:].any()
        assert not np.isin(original[p[:k]], [special.cls, special.sep, special.pad]).any()
        special_at = np.isin(row, [special.cls, special.sep, special.pad])
        np.testing.assert_array_equal(m[special_at], row[special_at])


def test_whole_word_masking_masks_complete_words(vocab, lee_rows):
    masker = MaskedLmMasker.from_vocab(
        vocab, whole_word_mask=True, max_predictions_per_seq=MAX_PREDICTIONS
    )
    out = masker(lee_rows, seeds(lee_rows.shape[0], base=7))
    continuation = np.array([t.startswith("##") for t in vocab])
    multi_piece_words = 0
    for ids, w, p in zip(
        lee_rows.to_list(),
        out["masked_lm_weights"].numpy(),
        out["masked_lm_positions"].numpy(),
        strict=True,
    ):
        chosen = set(p[: int(w.sum())].tolist())
        assert 1 <= len(chosen) <= MAX_PREDICTIONS
        words, start = [], 0  # [start, end) spans of whole words (specials are one-token words)
        for i in range(1, len(ids) + 1):
            if i == len(ids) or not continuation[ids[i]]:
                words.append(range(start, i))
                start = i
        for word in words:
            hit = [i in chosen for i in word]
            assert all(hit) or not any(hit), (ids, sorted(chosen), list(word))
            multi_piece_words += all(hit) and len(word) > 1
    assert multi_piece_words > 0


def test_same_seed_same_output_independent_of_batch(vocab, lee_rows):
    masker = MaskedLmMasker.from_vocab(vocab, whole_word_mask=True)
    all_seeds = seeds(lee_rows.shape[0])
    batch = masker(lee_rows, all_seeds)
    again = masker(lee_rows, all_seeds)
    alone = masker(lee_rows[3:4], all_seeds[3:4])  # shorter padded length than the batch
    for key in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        np.testing.assert_array_equal(batch[key].numpy(), again[key].numpy())
        np.testing.assert_array_equal(batch[key][3:4].numpy(), alone[key].numpy())
    other = masker(lee_rows, seeds(lee_rows.shape[0], base=99))
    assert not np.array_equal(
        batch["masked_lm_positions"].numpy(), other["masked_lm_positions"].numpy()
    )


def test_dense_single_row_and_tf_data_match_ragged(vocab, special, lee_rows):
    masker = MaskedLmMasker.from_vocab(vocab)
    padded = lee_rows.to_tensor(special.pad)
    all_seeds = seeds(padded.shape[0])
    ragged_out = masker(lee_rows, all_seeds)
    dense_out = masker(padded, all_seeds)
    np.testing.assert_array_equal(
        ragged_out["input_ids"].to_tensor(special.pad).numpy(), dense_out["input_ids"].numpy()
    )
    dataset = tf.data.Dataset.from_tensor_slices((padded, all_seeds)).map(masker)
    for i, row in enumerate(dataset.take(3)):
        for key, value in row.items():
            np.testing.assert_array_equal(value.numpy(), dense_out[key][i].numpy())


def test_restore_original_ids_undoes_masking(vocab, lee_rows):
    masker = MaskedLmMasker.from_vocab(vocab)
    padded = lee_rows.to_tensor()
    out = masker(padded, seeds(padded.shape[0]))
    restored = restore_original_ids(
        out["input_ids"],
        out["masked_lm_positions"],
        out["masked_lm_ids"],
        out["masked_lm_weights"],
    )
    np.testing.assert_array_equal(restored.numpy(), padded.numpy())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"masked_lm_prob": 1.0}, "masked_lm_prob"),
        ({"masked_lm_prob": 0.0}, "masked_lm_prob"),
        ({"max_predictions_per_seq": 0}, "max_predictions_per_seq"),
        ({"mask_token_rate": 0.95}, "sum <= 1"),
    ],
)
def test_bad_options_raise(vocab, kwargs, message):
    with pytest.raises(ValueError, match=message):
        MaskedLmMasker.from_vocab(vocab, **kwargs)
