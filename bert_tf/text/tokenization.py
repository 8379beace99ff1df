"""In-graph BERT WordPiece tokenization: vocab loading, tokenizer and preprocessor layers.

Every step runs as TensorFlow (tensorflow-text) ops, so the same layers work in `tf.data`, in
a `tf.function` serving signature and inside an exported SavedModel (which carries the vocab
with it: the WordPiece model is baked into the graph as a constant, no file path is kept).

Example:

    import tensorflow as tf
    from bert_tf.text.tokenization import BertPreprocessor, BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "man", "eat", "##ing", "."]
    tokenizer = BertTokenizer(vocab)
    ids = tokenizer(tf.constant(["A man eating."]))   # <tf.RaggedTensor [[5, 6, 7, 8, 9]]>
    tokenizer.id_to_token(ids)                        # [[b"a", b"man", b"eat", b"##ing", b"."]]
    preprocessor = BertPreprocessor(vocab, seq_length=8)
    features = preprocessor((tf.constant(["a man"]), tf.constant(["eating"])))
    features["input_word_ids"]   # [[2, 5, 6, 3, 7, 8, 3, 0]]  ([CLS] a man [SEP] eat ##ing [SEP])
    features["input_type_ids"]   # [[0, 0, 0, 0, 1, 1, 1, 0]]
    features["input_mask"]       # [[1, 1, 1, 1, 1, 1, 1, 0]]

Exported SavedModels use tensorflow-text ops: `import tensorflow_text` before loading one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder

from bert_tf.flags_util import decode_utf8
from bert_tf.text.packer import BertPacker, StringLayer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# Longest word (in characters, after normalization) that WordPiece splits; a longer word is one
# [UNK]. HF `tokenizers`/transformers use 100 characters; google-research's FullTokenizer 200.
MAX_CHARS_PER_WORD = 100
# UTF-8 needs at most 4 bytes a character, so no word within the limit is longer than this.
_MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD


# BERT's basic (pre-WordPiece) split, google-research `BasicTokenizer`: whitespace separates
# words and every ASCII or Unicode punctuation character and CJK ideograph is a word of its own
# (the classes FastBertTokenizer splits on). For `tf_text.regex_split(text, BASIC_SPLIT_DELIMITERS,
# BASIC_SPLIT_KEPT_DELIMITERS)`: tensorflow-text has no public op for this step alone, and its
# BasicTokenizer lower-cases first, losing the offsets into the original text.
_PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
_CJK = (
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
    r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)
BASIC_SPLIT_KEPT_DELIMITERS = rf"{_PUNCTUATION}|{_CJK}"
BASIC_SPLIT_DELIMITERS = rf"\s+|{BASIC_SPLIT_KEPT_DELIMITERS}"

# BERT's "clean text" step (google-research/bert and HF tokenizers): drop NUL, U+FFFD and
# control, format and private-use characters. \t, \n and \r are whitespace there, so kept.
_DROPPED_CHARS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\p{Cf}\p{Co}\x{fffd}]"


def validate_vocab(tokens: Sequence[str], source: str = "vocabulary") -> list[str]:
    """Checks a vocabulary (index = token id) and returns it as a list.

    Raises ValueError if it is empty, has an empty or duplicate token (naming the token and both
    1-based positions, which are line numbers for a vocab file) or lacks a special token.
    """
    tokens = list(tokens)
    if not tokens:
        raise ValueError(f"{source} is empty: expected one WordPiece token per line")
    first_line: dict[str, int] = {}
    for line, token in enumerate(tokens, start=1):
        if not isinstance(token, str) or not token:
            raise ValueError(f"{source}: line {line} is {token!r}, expected a non-empty string")
        if token in first_line:
            raise ValueError(
                f"{source}: duplicate token {token!r} on lines {first_line[token]} and {line}"
            )
        first_line[token] = line
    missing = [t for t in SPECIAL_TOKENS if t not in first_line]
    if missing:
        raise ValueError(
            f"{source} lacks the special token(s) {missing}; BERT needs all of "
            f"{list(SPECIAL_TOKENS)}"
        )
    return tokens


def load_vocab(vocab_file: str | os.PathLike) -> list[str]:
    """Reads a BERT `vocab.txt` (one token per line, line i = id i; local or gs:// path).

    Lines are split on "\\n" only (real vocabs hold tokens such as U+2028 that
    `str.splitlines` would split on); a trailing "\\r" is dropped, as HF tokenizers does.
    """
    path = os.fspath(vocab_file)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"vocab file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        text = decode_utf8(f.read(), f"vocab file {path}")
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last token
        lines.pop()
    return validate_vocab([line.removesuffix("\r") for line in lines], f"vocab file {path}")


@dataclasses.dataclass(frozen=True)
class SpecialTokenIds:
    """Ids of the BERT special tokens in one vocabulary."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_vocab(cls, tokens: Sequence[str]) -> SpecialTokenIds:
        index = {token: i for i, token in enumerate(validate_vocab(tokens))}
        return cls(*(index[t] for t in SPECIAL_TOKENS))


def normalize_text(text: tf.Tensor, lower_case: bool) -> tf.Tensor:
    """BERT text normalization of a string tensor, matching HF `tokenizers`' BertNormalizer.

    Drops control/format/private-use characters; uncased also lowercases, applies NFD and
    drops combining marks (accents). Written with plain string ops
    because tensorflow-text's own lower-casing (`case_fold_utf8`, and FastBertTokenizer's
    `lower_case_nfd_strip_accents`) applies NFKC, which maps full-width CJK punctuation
    ("，" "（" "：") to ASCII and so changes ids with Chinese vocabs.
    """
    text = tf.strings.regex_replace(text, _DROPPED_CHARS, "")
    if lower_case:
        # HF lowercases character by character; ICU's lower() (tf.strings.lower) would turn a
        # word-final capital sigma into "ς" instead of "σ", so map it first.
        text = tf.strings.regex_replace(text, "Σ", "σ")
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return text


@functools.lru_cache(maxsize=4)
def _wordpiece_model(vocabulary: tuple[str, ...]) -> bytes:
    """FastWordpieceTokenizer's model (flatbuffer) for `vocabulary`, as its `vocab=` argument
    builds it with our settings: "##" suffixes, [UNK], `_MAX_BYTES_PER_WORD`, pretokenized on
    whitespace and punctuation, no detokenization. Cached: tracing builds it again and again."""
    return pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
        list(vocabulary), _MAX_BYTES_PER_WORD, "##", SPECIAL_TOKENS[1], False, False
    )


def _as_vocab_list(vocabulary: str | os.PathLike | Sequence[str]) -> list[str]:
    if isinstance(vocabulary, (str, os.PathLike)):
        return load_vocab(vocabulary)
    return validate_vocab(vocabulary)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenizer(StringLayer):
    """End-to-end BERT WordPiece tokenizer: strings [batch] -> ragged int32 ids [batch, (tokens)].

    Splits on whitespace, punctuation and around each CJK character, then WordPiece-splits each
    word (suffixes "##x"); words with no WordPiece split, or longer than `MAX_CHARS_PER_WORD`
    (100) characters, become one [UNK], as in HF `tokenizers`.

    Args:
        vocabulary: path to a `vocab.txt` or the list of tokens (index = id).
        lower_case: True for uncased models (lowercase and strip accents); False keeps both.

    Example:

        tokenizer = BertTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "##s"])
        tokenizer(["Hi his ok"])   # <tf.RaggedTensor [[5, 5, 6, 1]]>
    """

    def __init__(
        self, vocabulary: str | os.PathLike | Sequence[str], lower_case: bool = True, **kwargs
    ):
        super().__init__(**kwargs)
        self.vocabulary = tuple(_as_vocab_list(vocabulary))
        self.lower_case = lower_case
        self.special_ids = SpecialTokenIds.from_vocab(self.vocabulary)
        # FastBertTokenizer: same ids as tf_text.BertTokenizer on our parity tests and ~8x
        # faster; it bakes the vocab into the graph, so SavedModels need no vocab file. Its
        # built-in normalizer is off: normalize_text does that step (see why there).
        # Its word limit counts UTF-8 bytes (`max_bytes_per_word`), HF's counts characters: it
        # is set high enough for any 100-character word and `_unk_long_words` applies HF's rule.
        self._wordpiece = tf_text.FastBertTokenizer(
            token_out_type=tf.int32,
            lower_case_nfd_strip_accents=False,
            # Built here, not from `vocab=`: tf-text turns its model into a constant through a
            # Python list of ints, ~1 s per construction in graph mode for a 30k vocab, and
            # TF Transform traces the preprocessing_fn (so builds the tokenizer) ~8 times.
            fast_wordpiece_model_buffer=tf.constant(
                np.frombuffer(_wordpiece_model(self.vocabulary), np.uint8)
            ),
        )
        self._tokens = tf.constant(self.vocabulary)
        # Per token id: does it continue a word ("##" piece), and how many characters of the
        # word it covers. The pieces of a word spell it exactly, so a word's length in
        # characters is the sum over its pieces: no string op needed. ([UNK] is always a whole
        # word, so its length does not matter.)
        self._is_suffix = tf.constant([t.startswith("##") for t in self.vocabulary])
        self._piece_chars = tf.constant(
            [len(t) - 2 if t.startswith("##") else len(t) for t in self.vocabulary], tf.int32
        )

    @property
    def vocabulary_size(self) -> int:
        return len(self.vocabulary)

    def call(self, inputs) -> tf.RaggedTensor:
        text = tf.convert_to_tensor(inputs, dtype=tf.string)
        normalized = normalize_text(tf.reshape(text, [-1]), self.lower_case)
        ids = self._wordpiece.tokenize(normalized)
        # No word can be over the limit in a text of at most that many bytes (most queries).
        ids = tf.cond(
            tf.reduce_any(tf.strings.length(normalized) > MAX_CHARS_PER_WORD),
            lambda: self._unk_long_words(ids),
            lambda: ids,
        )
        if text.shape.rank == 1:
            return ids
        if text.shape.rank == 0:
            return ids[0]
        for size in reversed(tf.unstack(tf.shape(text, out_type=tf.int64)[1:])):
            ids = tf.RaggedTensor.from_uniform_row_length(ids, size)
        return ids

    def _unk_long_words(self, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        """Replaces the pieces of each word over `MAX_CHARS_PER_WORD` characters by one [UNK]."""
        flat_ids = ids.flat_values
        word_start = ~tf.gather(self._is_suffix, flat_ids)
        word = tf.cumsum(tf.cast(word_start, tf.int32)) - 1
        chars = tf.math.segment_sum(tf.gather(self._piece_chars, flat_ids), word)
        token_too_long = tf.gather(chars > MAX_CHARS_PER_WORD, word)

        def drop_pieces():
            keep = word_start | ~token_too_long
            new_ids = tf.where(token_too_long, self.special_ids.unk, flat_ids)
            return tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(new_ids, keep),
                tf.boolean_mask(ids.value_rowids(), keep),
                nrows=ids.nrows(),
            )

        # Long words are rare: skip rebuilding the ragged tensor when there is none.
        return tf.cond(tf.reduce_any(token_too_long), drop_pieces, lambda: ids)

    def id_to_token(self, ids) -> tf.Tensor | tf.RaggedTensor:
        """Maps ids (any shape, dense or ragged) to their token strings, e.g. "##ing"."""
        if isinstance(ids, tf.RaggedTensor):
            return ids.with_flat_values(tf.gather(self._tokens, ids.flat_values))
        return tf.gather(self._tokens, ids)

    def detokenize(self, ids: tf.RaggedTensor) -> tf.Tensor:
        """Joins ragged ids [batch, (tokens)] back to text: words split by spaces, "##" merged.

        Normalization is not undone (lower-casing, accents, spacing around punctuation).
        """
        text = tf.strings.reduce_join(self.id_to_token(ids), axis=-1, separator=" ")
        return tf.strings.regex_replace(text, " ##", "")

    def get_config(self) -> dict:
        config = super().get_config()
        # The token list itself, so the config alone rebuilds the layer anywhere.
        config.update({"vocabulary": list(self.vocabulary), "lower_case": self.lower_case})
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPreprocessor(StringLayer):
    """Raw text -> BERT encoder inputs: `BertTokenizer` followed by `BertPacker`.

    Call on a string tensor [batch] (single sentences) or a tuple/list of one or two string
    tensors [batch] (sentence pairs); a list of python strings counts as one batch of single
    sentences. Returns `BertPacker`'s dict.

    Args:
        vocabulary: path to a `vocab.txt` or the list of tokens (index = id).
        seq_length: length of every output row, [CLS] and [SEP]s included (>= 3).
        lower_case: True for uncased models.

    Example:

        preprocessor = BertPreprocessor("vocab.txt", seq_length=128)
        features = preprocessor((tf.constant(["Is it?"]), tf.constant(["Yes."])))
    """

    def __init__(
        self,
        vocabulary: str | os.PathLike | Sequence[str],
        seq_length: int = 128,
        lower_case: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.tokenizer = BertTokenizer(vocabulary, lower_case=lower_case)
        ids = self.tokenizer.special_ids
        self.packer = BertPacker(seq_length, cls_id=ids.cls, sep_id=ids.sep, pad_id=ids.pad)

    @property
    def seq_length(self) -> int:
        return self.packer.seq_length

    def call(self, inputs) -> dict[str, tf.Tensor]:
        # A list of python strings is one batch of texts; any other list/tuple is segments.
        is_segments = isinstance(inputs, (tuple, list)) and not all(
            isinstance(x, str) for x in inputs
        )
        segments = list(inputs) if is_segments else [inputs]
        if not 1 <= len(segments) <= 2:
            raise ValueError(
                f"BertPreprocessor takes one or two string tensors, got {len(segments)}"
            )
        return self.packer([self.tokenizer(s) for s in segments])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "vocabulary": list(self.tokenizer.vocabulary),
                "seq_length": self.seq_length,
                "lower_case": self.tokenizer.lower_case,
            }
        )
        return config


# --- Featurizers shared by the exported signatures and the pipelines' Transform ---------------


def pair_features(preprocessor: BertPreprocessor, text_a, text_b) -> dict[str, tf.Tensor]:
    """Packs `text_a`/`text_b` per row: a `text_b` without tokens ("") packs `text_a` alone."""
    a, b = preprocessor.tokenizer(text_a), preprocessor.tokenizer(text_b)
    single, pair = preprocessor.packer(a), preprocessor.packer([a, b])
    has_b = (b.row_lengths() > 0)[:, None]
    return {name: tf.where(has_b, pair[name], single[name]) for name in pair}


def mask_aware_features(preprocessor: BertPreprocessor, text: tf.Tensor) -> dict[str, tf.Tensor]:
    """Encoder inputs for text with literal "[MASK]"s, each kept as the [MASK] token.

    `BertTokenizer` splits "[MASK]" into "[", "mask", "]" like any bracketed word, so the text
    is split on "[MASK]", the pieces tokenized, and the mask id put back between them.
    """
    tokenizer = preprocessor.tokenizer
    pieces = tf.strings.split(text, sep=SPECIAL_TOKENS[4])  # [MASK]  # [batch, (masks + 1)]
    piece_ids = tokenizer(pieces.flat_values)
    mask = tf.fill([tf.shape(pieces.flat_values)[0], 1], tokenizer.special_ids.mask)
    with_mask = tf.concat([piece_ids, tf.RaggedTensor.from_tensor(mask)], axis=1)
    # Every piece got a trailing [MASK]; the last piece of each text must not.
    ids = pieces.with_flat_values(with_mask).merge_dims(1, 2)[:, :-1]
    return preprocessor.packer(ids)


def trim_to_longest(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The packed features without the columns that are padding in every row.

    The packer pads every row to `seq_length`; a request's sentences are usually far shorter
    (Wikipedia sentences average 34 tokens), and the encoder's cost grows with the padded
    length. Padded keys get -10000 added to their attention logits, whose softmax weight is
    exactly 0 in float32 (and bfloat16), so every real position's output is the same without
    them (to float round-off of the shorter sums): only the work on padding is saved.
    """
    mask = features["input_mask"]
    longest = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=1)), 1)
    return {name: value[:, :longest] for name, value in features.items()}


def pad_to_length(values: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """[batch, S', ...] -> [batch, length, ...], zeros after S' (the padding `trim_to_longest`
    dropped), so a signature keeps its documented `seq_length`."""
    paddings = tf.concat(
        [[[0, 0], [0, length - tf.shape(values)[1]]], tf.zeros([tf.rank(values) - 2, 2], tf.int32)],
        axis=0,
    )
    return tf.pad(values, paddings)
