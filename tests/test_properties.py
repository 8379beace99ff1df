"""Property tests (hypothesis) of the tokenizer, the packer and masked-LM masking.

- tokenizer: any Unicode text gives ids inside the vocabulary, and raw text can never produce
  the ids of [PAD], [CLS], [SEP] or [MASK] (only [UNK] among the special tokens);
- packer: rows are exactly `seq_length` long, [CLS] first, one [SEP] closing each segment,
  padding after the last [SEP], each segment a prefix of its tokens, nothing dropped that fits;
- masking: never [CLS], [SEP] or padding; google-research's per-row count; labels are the
  original ids; whole words masked whole; undone exactly by `restore_original_ids`; and over
  many rows the 80/10/10 split and the uniform random ids hold within a safe tolerance.

Examples are few per test (each is a TensorFlow call) and the database is off so that runs
write nothing into the tree.
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bert_tf.text.masking import MaskedLmMasker, example_seed, restore_original_ids
from bert_tf.text.packer import BertPacker
from bert_tf.text.tokenization import BertTokenizer, SpecialTokenIds

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Text that stresses the tokenizer: anything UTF-8 can hold, plus what looks like its own syntax.
TRICKY = st.sampled_from(
    [
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "[PAD]",
        "[UNK]",
        "##ing",
        "\x00",
        "\ufffd",
        "\u200b",
        "\u2028",
        "e\u0301",
        "ǅ",
        "ΣΑΣ",
        "中文",
        "🙂",
        "x" * 120,
        " \t\n\r ",
    ]
)
TEXT = st.lists(st.text(st.characters(codec="utf-8")) | TRICKY, max_size=6).map("".join)


@pytest.fixture(scope="module")
def tokenizers(minilm_dir):
    vocab = minilm_dir / "vocab.txt"
    return {case: BertTokenizer(vocab, lower_case=case) for case in (True, False)}


@pytest.fixture(scope="module")
def special(tokenizers) -> SpecialTokenIds:
    return tokenizers[True].special_ids


@PROPERTY
@given(texts=st.lists(TEXT, min_size=1, max_size=4), lower_case=st.booleans())
def test_any_unicode_gives_valid_ids_and_no_injected_specials(tokenizers, texts, lower_case):
    tokenizer = tokenizers[lower_case]
    ids = tokenizer(tf.constant(texts)).to_list()
    assert len(ids) == len(texts)
    special = tokenizer.special_ids
    forbidden = {special.pad, special.cls, special.sep, special.mask}
    for row in ids:
        assert all(0 <= i < tokenizer.vocabulary_size for i in row), row
        assert not forbidden & set(row), row


@PROPERTY
@given(
    a=st.lists(TEXT, min_size=1, max_size=3),
    b=st.none() | st.lists(TEXT, min_size=1, max_size=3),
    seq_length=st.integers(3, 40),
)
def test_packed_rows_have_specials_in_place(tokenizers, special, a, b, seq_length):
    tokenizer = tokenizers[True]
    b = None if b is None else (b * len(a))[: len(a)]
    segments = [tokenizer(tf.constant(a))] + ([] if b is None else [tokenizer(tf.constant(b))])
    packer = BertPacker(seq_length, cls_id=special.cls, sep_id=special.sep, pad_id=special.pad)
    packed = {k: v.numpy() for k, v in packer(segments).items()}
    assert all(v.shape == (len(a), seq_length) for v in packed.values())
    tokens = [s.to_list() for s in segments]
    budget = seq_length - len(segments) - 1
    for row in range(len(a)):
        ids, mask, types = (
            packed[k][row] for k in ("input_word_ids", "input_mask", "input_type_ids")
        )
        n = int(mask.sum())
        np.testing.assert_array_equal(mask, np.arange(seq_length) < n)  # a prefix of ones
        assert ids[0] == special.cls and ids[n - 1] == special.sep
        assert (ids[n:] == special.pad).all() and not types[n:].any()
        assert (ids < tokenizer.vocabulary_size).all()
        seps = np.flatnonzero(ids[:n] == special.sep)
        assert len(seps) == len(segments)  # raw text never yields [SEP] itself
        lengths = [len(t[row]) for t in tokens]
        if sum(lengths) <= budget:
            assert n == sum(lengths) + len(segments) + 1  # nothing dropped that fits
        else:
            assert n == seq_length
        starts = [1, *(seps[:-1] + 1)]
        for k, (start, end) in enumerate(zip(starts, seps, strict=True)):
            kept = ids[start:end].tolist()
            assert kept == tokens[k][row][: len(kept)]  # trimmed from the end only
            assert (types[start : end + 1] == k).all()
        assert types[0] == 0


# --- masking ------------------------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    f"##p{i}" if i % 3 == 0 else f"w{i}" for i in range(5, 200)
]
SPECIAL = SpecialTokenIds.from_vocab(VOCAB)


@pytest.fixture(scope="module")
def maskers():
    """Maskers by (whole_word, masked_lm_prob, max_predictions): each compiles its own
    tf.function, so they are built once; dropped with the module, not at interpreter exit."""
    cache: dict[tuple, MaskedLmMasker] = {}

    def get(whole_word: bool, prob: float, max_predictions: int) -> MaskedLmMasker:
        key = (whole_word, prob, max_predictions)
        if key not in cache:
            cache[key] = MaskedLmMasker.from_vocab(
                VOCAB,
                whole_word_mask=whole_word,
                masked_lm_prob=prob,
                max_predictions_per_seq=max_predictions,
            )
        return cache[key]

    yield get
    cache.clear()


BATCH, SEQ_LENGTH = 4, 40  # one shape, so each masker compiles once


@st.composite
def packed_rows(draw):
    """A [BATCH, SEQ_LENGTH] batch of [CLS] A [SEP] (B [SEP]) rows of ordinary vocab ids,
    padded, some rows all padding; and the rows' lengths."""
    ids = np.full((BATCH, SEQ_LENGTH), SPECIAL.pad, np.int32)
    lengths = np.zeros(BATCH, int)
    word = st.integers(5, len(VOCAB) - 1)
    for row in range(draw(st.integers(1, BATCH))):
        a = draw(st.lists(word, min_size=1, max_size=SEQ_LENGTH - 2))
        room = SEQ_LENGTH - len(a) - 3
        b = draw(st.lists(word, max_size=room)) if room >= 1 else []
        tokens = [SPECIAL.cls, *a, SPECIAL.sep] + ([*b, SPECIAL.sep] if b else [])
        ids[row, : len(tokens)] = tokens
        lengths[row] = len(tokens)
    return ids, lengths


@PROPERTY
@given(
    rows=packed_rows(),
    # (whole words, masked_lm_prob, max_predictions_per_seq): the floor of one prediction, more
    # wanted than there are tokens, the cap; few, as each masker compiles its own graph.
    options=st.sampled_from([(False, 0.05, 20), (False, 0.9, 5), (True, 0.15, 20), (True, 0.9, 1)]),
    seed=st.integers(0, 2**31 - 1),
)
def test_masking_invariants(maskers, rows, options, seed):
    ids, lengths = rows
    whole_word, prob, max_predictions = options
    masker = maskers(*options)
    seeds = tf.constant([example_seed(seed, i) for i in range(len(ids))], tf.int64)
    out = {k: v.numpy() for k, v in masker(tf.constant(ids), seeds).items()}
    assert out["input_ids"].shape == ids.shape
    weights = out["masked_lm_weights"]
    counts = weights.sum(axis=1).astype(int)
    for row, n in enumerate(lengths):
        k = counts[row]
        np.testing.assert_array_equal(weights[row], np.arange(max_predictions) < k)
        positions = out["masked_lm_positions"][row, :k]
        assert (np.diff(positions) > 0).all() and (positions < n).all()
        # Never [CLS], [SEP] or padding; labels are the original ids.
        assert not np.isin(ids[row, positions], [SPECIAL.cls, SPECIAL.sep, SPECIAL.pad]).any()
        np.testing.assert_array_equal(out["masked_lm_ids"][row, :k], ids[row, positions])
        assert not out["masked_lm_positions"][row, k:].any()
        assert not out["masked_lm_ids"][row, k:].any()
        # Unchosen positions (padding included) keep their ids; chosen ones get any vocab id.
        unchosen = np.setdiff1d(np.arange(ids.shape[1]), positions)
        np.testing.assert_array_equal(out["input_ids"][row, unchosen], ids[row, unchosen])
        assert (out["input_ids"][row] < len(VOCAB)).all()
        # google-research's count, over the row's real tokens with [CLS]/[SEP] counted.
        budget = min(max_predictions, max(1, round(n * prob)))
        selectable = int(np.isin(ids[row, :n], [SPECIAL.cls, SPECIAL.sep], invert=True).sum())
        if not whole_word:
            assert k == min(budget, selectable)
        else:
            words = _words(ids[row, :n])
            longest = max(map(len, words), default=1)
            assert min(selectable, budget - longest + 1) <= k <= budget
            chosen = set(positions.tolist())
            assert all(set(w) <= chosen or not set(w) & chosen for w in words)
    restored = restore_original_ids(
        out["input_ids"], out["masked_lm_positions"], out["masked_lm_ids"], weights
    )
    np.testing.assert_array_equal(restored, ids)


def _words(row: np.ndarray) -> list[list[int]]:
    """Positions of each whole word: a non-special token and the "##" pieces right after it."""
    words: list[list[int]] = []
    previous_selectable = False
    for position, token in enumerate(row):
        if token in (SPECIAL.cls, SPECIAL.sep):
            previous_selectable = False
            continue
        if VOCAB[token].startswith("##") and previous_selectable:
            words[-1].append(position)
        else:
            words.append([position])
        previous_selectable = True
    return words


@settings(
    max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(prob=st.sampled_from([0.15, 0.3]), seed=st.integers(0, 2**31 - 1))
def test_masking_rate_and_80_10_10_split_in_expectation(maskers, prob, seed):
    """Over 2,000 rows of 128 tokens: the exact per-row count, and each choice's share within
    6 standard deviations of 80/10/10 (a false alarm about once in 10^9 runs)."""
    vocab_size = len(VOCAB)
    rng = np.random.default_rng(seed)
    rows, seq_length = 2000, 128
    ids = rng.integers(5, vocab_size, size=(rows, seq_length)).astype(np.int32)
    ids[:, 0], ids[:, 64], ids[:, -1] = SPECIAL.cls, SPECIAL.sep, SPECIAL.sep
    masker = maskers(False, prob, 128)
    seeds = tf.constant([example_seed(seed, i) for i in range(rows)], tf.int64)
    out = {k: v.numpy() for k, v in masker(tf.constant(ids), seeds).items()}
    weights = out["masked_lm_weights"].astype(bool)
    assert (weights.sum(axis=1) == round(seq_length * prob)).all()
    positions = out["masked_lm_positions"][weights]
    row_index = np.nonzero(weights)[0]
    new, old = out["input_ids"][row_index, positions], out["masked_lm_ids"][weights]
    total = len(new)
    # A "random" id may draw the original (looks kept) or [MASK] (looks masked).
    hit = 0.1 / vocab_size
    shares = {
        "mask": (np.mean(new == SPECIAL.mask), 0.8 + hit),
        "kept": (np.mean(new == old), 0.1 + hit),
        "random": (np.mean((new != SPECIAL.mask) & (new != old)), 0.1 - 2 * hit),
    }
    for name, (share, expected) in shares.items():
        sigma = np.sqrt(expected * (1 - expected) / total)
        assert abs(share - expected) < 6 * sigma, (name, share, expected, total)
    # Random replacements are uniform over the whole vocabulary (specials included).
    replaced = new[(new != SPECIAL.mask) & (new != old)]
    mean, sigma = (vocab_size - 1) / 2, vocab_size / np.sqrt(12 * len(replaced))
    assert abs(replaced.mean() - mean) < 6 * sigma
    assert replaced.min() < vocab_size * 0.05 and replaced.max() > vocab_size * 0.95
