"""Tests for bert_tf.build_vocab: learning a WordPiece vocab from a real corpus, and its CLI."""

import subprocess
import sys

import pytest
import tensorflow as tf

from bert_tf.text.tokenization import SPECIAL_TOKENS, BertTokenizer, load_vocab
from bert_tf.text.vocab import build_vocab, write_vocab

VOCAB_SIZE = 1000
TRAIN_LINES = 100  # lee_background.cor has 300 long news lines; the rest are held out


@pytest.fixture(scope="module")
def lee_lines(gensim_dir):
    lines = (gensim_dir / "lee_background.cor").read_text(encoding="utf-8").split("\n")
    return [line for line in lines if line.strip()]


@pytest.fixture(scope="module")
def learned_vocab(gensim_dir):
    return build_vocab(
        [str(gensim_dir / "lee_*.cor")], VOCAB_SIZE, lower_case=True, max_lines=TRAIN_LINES
    )


def test_learned_vocab_layout(learned_vocab, tmp_path):
    assert tuple(learned_vocab[: len(SPECIAL_TOKENS)]) == SPECIAL_TOKENS
    assert len(SPECIAL_TOKENS) < len(learned_vocab) <= VOCAB_SIZE
    assert any(token.startswith("##") for token in learned_vocab)
    assert all(token == token.lower() for token in learned_vocab[len(SPECIAL_TOKENS) :])
    path = tmp_path / "out" / "vocab.txt"
    write_vocab(learned_vocab, str(path))
    assert load_vocab(path) == learned_vocab  # validates: unique, specials present
    assert [p.name for p in path.parent.iterdir()] == ["vocab.txt"]  # no temp file left


def test_learned_vocab_tokenizes_held_out_text(learned_vocab, lee_lines):
    tokenizer = BertTokenizer(learned_vocab)
    ids = tokenizer(tf.constant(lee_lines[TRAIN_LINES:])).flat_values.numpy()
    unk_rate = (ids == tokenizer.special_ids.unk).mean()
    assert ids.size > 10_000 and unk_rate < 0.01
    # Frequent words of the domain are single tokens, not word pieces.
    assert tokenizer(tf.constant(["the government said"])).to_list() == [
        [learned_vocab.index(word) for word in ("the", "government", "said")]
    ]


def test_reserved_and_unused_tokens(tmp_path, lee_lines):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lee_lines[:20]) + "\n", encoding="utf-8")
    reserved = [*SPECIAL_TOKENS, "[NEW]"]
    vocab = build_vocab([str(corpus)], 300, reserved_tokens=reserved, num_unused=3)
    assert vocab[:9] == [*reserved, "[unused0]", "[unused1]", "[unused2]"]
    assert len(vocab) <= 300


def test_errors(tmp_path, gensim_dir):
    corpus = [str(gensim_dir / "lee_background.cor")]
    with pytest.raises(FileNotFoundError, match=r"input_files: no file matches '.*missing\*'"):
        build_vocab([*corpus, str(tmp_path / "missing*")], 100)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="input_files: no non-empty line"):
        build_vocab([str(blank)], 100)
    with pytest.raises(ValueError, match="vocab_size: expected more than the 5 reserved"):
        build_vocab(corpus, 5)
    with pytest.raises(ValueError, match=r"reserved_tokens: missing .*\[MASK\]"):
        build_vocab(corpus, 100, reserved_tokens=SPECIAL_TOKENS[:4])
    with pytest.raises(ValueError, match="max_lines: expected a positive number"):
        build_vocab(corpus, 100, max_lines=0)


def test_command_line_writes_vocab_and_summary(tmp_path, lee_lines):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lee_lines[:20]) + "\n", encoding="utf-8")
    output = tmp_path / "new" / "vocab.txt"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.build_vocab",
            f"--input_files={corpus}",
            f"--output_file={output}",
            "--vocab_size=300",
            "--num_unused=2",
            "--nolower_case",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"wrote {output}: ")
    vocab = load_vocab(output)
    assert vocab[:7] == [*SPECIAL_TOKENS, "[unused0]", "[unused1]"]
    assert any(token != token.lower() for token in vocab)  # --nolower_case kept capitals


def test_command_line_reports_missing_input(tmp_path):
    missing = tmp_path / "nope.txt"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.build_vocab",
            f"--input_files={missing}",
            f"--output_file={tmp_path / 'vocab.txt'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: input_files: no file matches '{missing}'"
    )
    assert not (tmp_path / "vocab.txt").exists()
