"""Bad inputs end to end: each script exits with one `error: ...` line naming the flag, file or
field and what was expected, and leaves no half-written output behind.

The library-level messages are tested beside each module (test_tokenization, test_glue,
test_squad, test_pretraining_data, test_configs, test_checkpoints); here the scripts run
in-process (`run_main`) on the bad inputs users actually hand them, plus one subprocess run for
the exit code and the absence of a traceback.
"""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from bert_tf import create_pretraining_data, run_classifier, run_pretraining, run_squad
from bert_tf.modeling.configs import BertConfig
from bert_tf.tasks import pretraining
from bert_tf.tasks.pretraining import records

SEQ, PRED = 32, 5
TESTDATA = Path(__file__).parent / "testdata"
# What a script writes into its output folder; none of it may appear when it fails.
RESULTS = ("ckpt-*", "checkpoint", "eval_results.txt", "test_results.tsv", "predictions.json")


@pytest.fixture(scope="module")
def data(tiny_pretraining_data):
    """Two Lee news documents, their pretraining records and the tiny config."""
    return tiny_pretraining_data(max_seq_length=SEQ, max_predictions_per_seq=PRED)


def _argv(**values) -> list[str]:
    argv = [f"--{k}={v}" for k, v in values.items() if not isinstance(v, bool)]
    return argv + [f"--{'' if v else 'no'}{k}" for k, v in values.items() if isinstance(v, bool)]


def _fails(run_main, module, argv: list[str], message: str) -> str:
    """Runs the script; asserts it exits with one `error:` line matching `message`."""
    with pytest.raises(SystemExit) as exit_info:
        run_main(module, *argv)
    text = str(exit_info.value.code)
    assert text.startswith("error: ") and "\n" not in text, text
    assert re.search(message, text), text
    return text


def _leftovers(folder: Path) -> list[str]:
    """Temp files anywhere under `folder` and result files directly in it."""
    if not folder.exists():
        return []
    found = {p for pattern in RESULTS for p in folder.glob(pattern)}
    found |= {p for p in folder.rglob("*") if ".tmp" in p.name}
    return sorted(str(p.relative_to(folder)) for p in found)


# --- create_pretraining_data: vocab, corpus, flags ---------------------------------------------


def _pretraining_data_argv(corpus: Path, output: Path, vocab: Path, **overrides) -> list[str]:
    values = {
        "input_file": corpus,
        "output_file": output,
        "vocab_file": vocab,
        "max_seq_length": SEQ,
        "max_predictions_per_seq": PRED,
        "dupe_factor": 1,
        **overrides,
    }
    return _argv(**values)


def _bad_vocab(folder: Path, kind: str, good: list[str]) -> Path:
    path = folder / f"vocab_{kind}.txt"
    text = {
        "empty": "",
        "duplicate": "\n".join([*good, good[1500]]) + "\n",
        "no_mask": "\n".join(t for t in good if t != "[MASK]") + "\n",
        "no_specials": "\n".join(t for t in good if not t.startswith("[")) + "\n",
    }.get(kind)
    if kind == "not_utf8":
        path.write_bytes("\n".join(good).encode() + b"\n\xff\xfe\n")
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", r"vocab file not found: .*vocab_missing\.txt"),
        ("empty", r"vocab_empty\.txt is empty: expected one WordPiece token per line"),
        ("duplicate", r"vocab_duplicate\.txt: duplicate token .* on lines 1501 and 2001"),
        ("no_mask", r"vocab_no_mask\.txt lacks the special token\(s\) \['\[MASK\]'\]"),
        ("no_specials", r"lacks the special token\(s\) \['\[PAD\]', '\[UNK\]', '\[CLS\]'"),
        ("not_utf8", r"vocab_not_utf8\.txt:2001: not UTF-8 text \(byte 0xff"),
    ],
)
def test_bad_vocab(run_main, data, vocab_file, tmp_path, kind, message):
    good = vocab_file.read_text(encoding="utf-8").split("\n")[:2000]
    output = tmp_path / "out" / "train.tfrecord"
    vocab = _bad_vocab(tmp_path, kind, good)
    argv = _pretraining_data_argv(data.corpus, output, vocab)
    _fails(run_main, create_pretraining_data, argv, message)
    assert not output.exists() and not _leftovers(tmp_path / "out")


@pytest.mark.parametrize(
    "content, message",
    [
        (b"A fine sentence.\nAnother one \xff\xfe here.\n", r"bad\.txt:2: not UTF-8 text"),
        (b"\n\n   \n\t\n\n", r"no document with any token in .*bad\.txt"),
        (b"\x00\x01\x02\n\n\x7f\n", r"no document with any token"),
    ],
    ids=["not_utf8", "only_blank_lines", "only_control_characters"],
)
def test_bad_corpus(run_main, vocab_file, tmp_path, content, message):
    (tmp_path / "bad.txt").write_bytes(content)
    output = tmp_path / "train.tfrecord"
    _fails(
        run_main,
        create_pretraining_data,
        _pretraining_data_argv(tmp_path / "bad.txt", output, vocab_file),
        message,
    )
    assert not output.exists() and not _leftovers(tmp_path)


def test_odd_but_valid_corpus_gives_valid_records(run_main, vocab_file, tmp_path):
    """Empty lines, empty documents, a one-sentence document, a 30,000-word line, a 5,000-
    character word and non-ASCII text: all records well-formed and within max_seq_length."""
    long_line = " ".join(f"word{i % 97}" for i in range(30_000))
    corpus = "\n".join(
        [
            "",
            "   ",
            "First document, first sentence.",
            "\t",
            "Second sentence of it.",
            "",
            "",
            "",  # runs of blank lines: empty documents
            "Only one sentence in this document.",
            "",
            long_line,
            "x" * 5000,
            "Ünïcödé, 中文字符 and emoji 🙂 in one line.",
            "",
        ]
    )
    (tmp_path / "odd.txt").write_text(corpus, encoding="utf-8")
    output = tmp_path / "odd.tfrecord"
    run_main(
        create_pretraining_data,
        *_pretraining_data_argv(tmp_path / "odd.txt", output, vocab_file, dupe_factor=3),
    )
    count = pretraining.check_pretraining_file(str(output), SEQ, PRED)
    assert count >= 9
    for record in tf.data.TFRecordDataset(str(output)).as_numpy_iterator():
        mask = tf.train.Example.FromString(record).features.feature["input_mask"].int64_list.value
        assert 5 <= sum(mask) <= SEQ


def test_one_sentence_corpus(run_main, vocab_file, tmp_path):
    """The only document is its own "random next" sentence: still valid records."""
    (tmp_path / "one.txt").write_text("The only sentence there is.\n", encoding="utf-8")
    output = tmp_path / "one.tfrecord"
    run_main(
        create_pretraining_data,
        *_pretraining_data_argv(tmp_path / "one.txt", output, vocab_file, dupe_factor=2),
    )
    assert pretraining.check_pretraining_file(str(output), SEQ, PRED) == 2


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"masked_lm_prob": 1.5}, r"masked_lm_prob must be in \(0, 1\), got 1.5"),
        ({"masked_lm_prob": 0}, r"masked_lm_prob must be in \(0, 1\), got 0"),
        ({"dupe_factor": 0}, "dupe_factor must be >= 1, got 0"),
        ({"max_predictions_per_seq": 0}, r"max_predictions_per_seq must be in \[1, "),
        ({"max_predictions_per_seq": 40}, r"max_predictions_per_seq must be in \[1, .*=32\]"),
        ({"short_seq_prob": -0.1}, r"short_seq_prob must be in \[0, 1\], got -0.1"),
        ({"max_seq_length": -3}, "max_seq_length must be >= 5"),
        ({"input_file": "/nonexistent/*.txt"}, "input_file: no file matches '/nonexistent/"),
        ({"output_file": " , "}, "output_file must be a file or comma-separated list"),
    ],
)
def test_bad_pretraining_data_flags(run_main, data, vocab_file, tmp_path, overrides, message):
    output = tmp_path / "train.tfrecord"
    argv = _pretraining_data_argv(data.corpus, output, vocab_file, **overrides)
    _fails(run_main, create_pretraining_data, argv, message)
    assert not output.exists() and not _leftovers(tmp_path)


def test_failure_while_writing_keeps_the_previous_output(
    run_main, data, vocab_file, tmp_path, monkeypatch
):
    """A crash after some records were written (here: a full disk) leaves the output file of
    the previous run as it was and no temp file."""
    output = tmp_path / "train.tfrecord"
    argv = _pretraining_data_argv(data.corpus, output, vocab_file)
    run_main(create_pretraining_data, *argv)
    before = output.read_bytes()
    to_example, calls = records.to_example, []

    def full_disk(features):
        calls.append(1)
        if len(calls) > 3:
            raise OSError(28, "No space left on device")
        return to_example(features)

    monkeypatch.setattr(records, "to_example", full_disk)
    _fails(run_main, create_pretraining_data, [*argv, "--random_seed=7"], "No space left")
    assert len(calls) == 4
    assert output.read_bytes() == before and not _leftovers(tmp_path)


# --- run_pretraining: records, bert_config.json, checkpoints, flags ----------------------------


def _pretraining_argv(data, output_dir: Path, **overrides) -> list[str]:
    values = {
        "train_batch_size": 4,
        "eval_batch_size": 4,
        "num_train_steps": 2,
        "num_warmup_steps": 1,
        "save_checkpoints_steps": 100,
        "iterations_per_loop": 1,
        **overrides,
    }
    return data.argv(output_dir, **values)


def _records(data: Path) -> list[bytes]:
    return list(tf.data.TFRecordDataset(str(data.input_file)).as_numpy_iterator())


def _write_records(path: Path, records: list[bytes]) -> None:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


def _edited(record: bytes, edit) -> bytes:
    example = tf.train.Example.FromString(record)
    edit(example.features.feature)
    return example.SerializeToString()


def _as_floats(features):
    values = list(features["input_ids"].int64_list.value)
    features["input_ids"].ClearField("int64_list")
    features["input_ids"].float_list.value.extend(map(float, values))


def _bad_records(data: Path, folder: Path, kind: str) -> Path:
    """A TFRecord file with one kind of damage; the good records are those of `data`."""
    path = folder / f"{kind}.tfrecord"
    records = _records(data)
    missing = _edited(records[0], lambda f: f.pop("masked_lm_weights"))
    if kind == "not_a_tfrecord":
        path.write_bytes(b"input_ids,input_mask\n1,2\n" * 20)
    elif kind == "truncated":  # a copy cut short mid-record
        raw = (data.input_file).read_bytes()
        path.write_bytes(raw[: len(raw) - 11])
    elif kind == "truncated_header":  # cut inside a record header: TF alone reads it as shorter
        raw = data.input_file.read_bytes()
        path.write_bytes(raw + raw[:5])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "missing_feature":
        _write_records(path, [missing, *records])
    elif kind == "wrong_type":
        _write_records(path, [_edited(records[0], _as_floats), *records])
    elif kind == "bad_record_later":  # only the first record of each file is checked up front
        _write_records(path, [*records, missing])
    elif kind == "not_an_example":
        _write_records(path, [b"\xff\x00 not a protocol buffer"])
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("not_a_tfrecord", r"not_a_tfrecord\.tfrecord: corrupt or truncated TFRecord"),
        ("truncated", r"truncated\.tfrecord: corrupt or truncated TFRecord after \d+ good records"),
        ("truncated_header", r"truncated_header\.tfrecord: .* after \d+ good records, at byte off"),
        ("empty", r"no records in the 1 file\(s\) .*empty\.tfrecord"),
        ("missing_feature", r"missing_feature\.tfrecord record 1: feature 'masked_lm_weights' is"),
        ("wrong_type", r"wrong_type\.tfrecord record 1: feature 'input_ids' is a float_list, exp"),
        ("bad_record_later", r"bad_record_later\.tfrecord record \d+: feature 'masked_lm_weights'"),
        ("not_an_example", r"not_an_example\.tfrecord record 1: not a serialized tf\.train\.Ex"),
    ],
)
def test_bad_pretraining_records(run_main, data, tmp_path, kind, message):
    path = _bad_records(data, tmp_path, kind)
    output_dir = tmp_path / "out"
    text = _fails(
        run_main, run_pretraining, _pretraining_argv(data, output_dir, input_file=path), message
    )
    assert "{{" not in text and "[Op:" not in text  # no TF internals in the message
    assert not _leftovers(output_dir)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"hidden_size": 32,', r"bad\.json: not valid JSON"),
        ("[1, 2]", r"bad\.json: expected a JSON object of BERT config keys"),
        ({"hiden_size": 32}, r"bad\.json: unknown BERT config keys \['hiden_size'\]"),
        ({"num_attention_heads": 3}, r"bad\.json: .*num_attention_heads=3 must divide hidden_s"),
        ({"hidden_size": -32}, r"bad\.json: BertConfig\.hidden_size must be a positive integer"),
        ({"hidden_act": "swish2"}, r"bad\.json: BertConfig\.hidden_act='swish2' is not supp"),
        ({"hidden_dropout_prob": 1.0}, r"bad\.json: BertConfig\.hidden_dropout_prob must be in"),
        ({"vocab_size": None}, r"bad\.json: missing required key 'vocab_size'"),
        ({"max_position_embeddings": 16}, r"--max_seq_length: expected 3\.\.16 \(max_position_emb"),
    ],
)
def test_bad_bert_config(run_main, data, tmp_path, content, message):
    path = tmp_path / "bad.json"
    if isinstance(content, dict):
        values = {**data.config.to_dict(), **content}
        content = json.dumps({k: v for k, v in values.items() if v is not None})
    path.write_text(content)
    output_dir = tmp_path / "out"
    _fails(
        run_main,
        run_pretraining,
        _pretraining_argv(data, output_dir, bert_config_file=path),
        message,
    )
    assert not output_dir.exists()


def test_checkpoints_of_another_shape(run_main, data, tmp_path):
    """Resuming, or initialising from, checkpoints of another model shape is a clear error,
    and the failed rerun does not relabel the old checkpoints with its own config."""
    first = tmp_path / "first"
    run_main(run_pretraining, *_pretraining_argv(data, first))
    config_before = (first / "bert_config.json").read_text()
    wider = tmp_path / "wider.json"
    BertConfig(**{**data.config.to_dict(), "hidden_size": 64}).to_json_file(wider)
    _fails(
        run_main,
        run_pretraining,
        _pretraining_argv(data, first, bert_config_file=wider, num_train_steps=4),
        r"first holds training checkpoints of another model \(hidden_size: model 64 vs "
        r"checkpoint 32, per its bert_config\.json\)",
    )
    assert (first / "bert_config.json").read_text() == config_before
    assert tf.train.latest_checkpoint(str(first)).endswith("ckpt-2")
    second = tmp_path / "second"
    _fails(
        run_main,
        run_pretraining,
        _pretraining_argv(data, second, bert_config_file=wider, init_checkpoint=first),
        r"first: config differs from the model's: hidden_size: model 64 vs checkpoint 32",
    )
    assert not _leftovers(second)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": -1e-4}, "--learning_rate: expected a positive number, got -0.0001"),
        ({"learning_rate": "nan"}, "--learning_rate: expected a positive number, got nan"),
        ({"train_batch_size": 0}, "--train_batch_size: expected a positive number, got 0"),
        ({"eval_batch_size": -8}, "--eval_batch_size: expected a positive number, got -8"),
        ({"num_train_steps": -1}, "--num_train_steps: expected a positive number, got -1"),
        ({"num_warmup_steps": -1}, "--num_warmup_steps: expected >= 0, got -1"),
        ({"max_seq_length": 2}, r"--max_seq_length: expected 3\.\.64"),
        ({"max_predictions_per_seq": 0}, r"--max_predictions_per_seq: expected 1\.\.32"),
        ({"gradient_accumulation_steps": 3}, "gradient_accumulation_steps=3 must divide the per"),
        ({"save_checkpoints_steps": 0}, "--save_checkpoints_steps: expected a positive number"),
        ({"iterations_per_loop": -5}, "--iterations_per_loop: expected a positive number, got -5"),
        ({"gradient_accumulation_steps": 0}, "--gradient_accumulation_steps: expected a positive"),
        (
            {"dynamic_masking": True, "masked_lm_prob": 1.5, "vocab_file": "VOCAB"},
            "--masked_lm_prob: expected a number above 0 and below 1, got 1.5",
        ),
        # The flag names itself, as create_pretraining_data's and the pipeline's bound.
        ({"masked_lm_prob": 1.0}, "--masked_lm_prob: expected a number above 0 and below 1"),
    ],
)
def test_nonsensical_pretraining_flags(run_main, data, vocab_file, tmp_path, overrides, message):
    overrides = {k: vocab_file if v == "VOCAB" else v for k, v in overrides.items()}
    output_dir = tmp_path / "out"
    _fails(run_main, run_pretraining, _pretraining_argv(data, output_dir, **overrides), message)
    assert not _leftovers(output_dir)


def test_script_exit_code_and_no_traceback(data, tmp_path):
    """As a program: exit status 1, the error as the last line, no Python traceback."""
    path = _bad_records(data, tmp_path, "truncated")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.run_pretraining",
            *_pretraining_argv(data, tmp_path / "out", input_file=path),
        ],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.match(r"error: .*truncated\.tfrecord: corrupt or truncated TFRecord", last), last
    assert not _leftovers(tmp_path / "out")


# --- run_classifier: GLUE / text-classification files ------------------------------------------

GOOD_TRAIN = "sentence\tlabel\n" + "a fine film\tpos\na dull film\tneg\n" * 4
GOOD_DEV = "sentence\tlabel\na fine film\tpos\na dull film\tneg\n"


@pytest.mark.parametrize(
    "task, train, dev, message",
    [
        ("text_classification", GOOD_TRAIN + "too\tmany\tcolumns\n", GOOD_DEV, r"train\.tsv:10: 3 columns, expected 2"),
        ("text_classification", GOOD_TRAIN, GOOD_DEV + "fine\tmaybe\n", r"dev\.tsv:4: unknown label 'maybe'"),
        ("text_classification", GOOD_TRAIN.encode() + b"caf\xe9\tpos\n", GOOD_DEV, r"train\.tsv:10: not UTF-8 text \(byte 0xe9"),
        ("text_classification", "text\tcategory\nfine\tpos\n", GOOD_DEV, r"train\.tsv:1: header .* needs a 'label' column"),
        ("text_classification", "sentence\tlabel\n", GOOD_DEV, r"train\.tsv: no examples after the header"),
        ("mrpc", "Quality\t#1 ID\n1\t2\n", GOOD_DEV, r"train\.tsv: header has 2 columns, the mrpc train layout needs at least 5"),
        ("sst-2", "sentence\tlabel\nfine\t2\n", GOOD_DEV, r"train\.tsv:2: unknown label '2', expected one of \['0', '1'\]"),
        ("sts-b", "a\tb\tc\td\te\tf\tg\th\ti\tscore\n" + "x\t" * 9 + "high\n", GOOD_DEV, r"train\.tsv:2: label 'high' is not a number"),
        ("text_classification", GOOD_TRAIN + "a n\x00l film\tpos\n", GOOD_DEV, r"train\.tsv:10: cannot parse the row: a NUL byte"),
        ("text_classification", GOOD_TRAIN.replace("\t", ",").replace("sentence,label", "sentence,label\n\"open quote,pos"), GOOD_DEV, r"train\.csv:2: cannot parse the row: unexpected end of data"),
    ],
    ids=["columns", "unknown_label", "not_utf8", "no_label_column", "header_only", "mrpc_columns", "sst2_label", "stsb_score", "nul_byte", "csv_quote"],
)  # fmt: skip
def test_bad_classification_files(run_main, vocab_file, data, tmp_path, task, train, dev, message):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    name = "train.csv" if "csv" in message else "train.tsv"
    (data_dir / name).write_bytes(train if isinstance(train, bytes) else train.encode())
    (data_dir / "dev.tsv").write_text(dev)
    output_dir = tmp_path / "out"
    argv = _argv(
        task_name=task,
        data_dir=data_dir,
        vocab_file=vocab_file,
        bert_config_file=data.config_file,
        output_dir=output_dir,
        max_seq_length=16,
        train_batch_size=2,
        do_train=True,
        do_eval=True,
    )
    _fails(run_main, run_classifier, argv, message)
    assert not output_dir.exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": 0}, "--learning_rate: expected a positive number, got 0"),
        ({"warmup_proportion": 1.5}, r"--warmup_proportion: expected 0\.\.1, got 1.5"),
        ({"eval_batch_size": -8}, "--eval_batch_size: expected a positive number, got -8"),
        (
            {"max_seq_length": 65},
            r"--max_seq_length: expected 3\.\.64 \(max_position_embeddings in ",
        ),
        ({"gradient_accumulation_steps": 3}, "gradient_accumulation_steps=3 must divide the per"),
    ],
)
def test_nonsensical_classifier_flags(run_main, vocab_file, data, tmp_path, overrides, message):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "train.tsv").write_text(GOOD_TRAIN)
    output_dir = tmp_path / "out"
    values = {
        "task_name": "text_classification",
        "data_dir": data_dir,
        "vocab_file": vocab_file,
        "bert_config_file": data.config_file,
        "output_dir": output_dir,
        "max_seq_length": 16,
        "train_batch_size": 4,
        "do_train": True,
        **overrides,
    }
    _fails(run_main, run_classifier, _argv(**values), message)
    assert not _leftovers(output_dir)


# --- run_squad: SQuAD files ---------------------------------------------------------------------


def _squad_variant(kind: str):
    dataset = json.loads((TESTDATA / "squad_v1.1.json").read_text(encoding="utf-8"))
    paragraph = dataset["data"][0]["paragraphs"][0]
    qa = paragraph["qas"][0]
    if kind == "offset":
        qa["answers"][0]["answer_start"] += 3
    elif kind == "negative_offset":
        qa["answers"][0]["answer_start"] = -len(qa["answers"][0]["text"])
    elif kind == "no_context":
        del paragraph["context"]
    elif kind == "no_question":
        del qa["question"]
    elif kind == "answers_not_a_list":
        qa["answers"] = qa["answers"][0]
    elif kind == "article_not_an_object":
        dataset["data"][0] = "paragraphs"
    elif kind == "not_utf8":
        return json.dumps(dataset).encode().replace(b"Thetis", b"Th\xe9tis", 1)
    elif kind == "no_data":
        dataset = {"version": "1.1", "articles": dataset["data"]}
    return json.dumps(copy.deepcopy(dataset)).encode()


@pytest.mark.parametrize(
    "kind, message",
    [
        ("offset", r'bad\.json: question "\w+": answer_start \d+ does not match the answer text'),
        ("negative_offset", r'bad\.json: question "\w+": each answer needs .*integer >= 0'),
        ("no_context", r'bad\.json: data\[0\]\.paragraphs\[0\]: expected "context" \(str\), got'),
        ("no_question", r'bad\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]: expected "question"'),
        ("answers_not_a_list", r'qas\[0\]: expected "answers" \(list\)'),
        ("article_not_an_object", r'bad\.json: data\[0\]: expected an article object with a "p'),
        ("not_utf8", r"bad\.json:1: not UTF-8 text \(byte 0xe9"),
        ("no_data", r'bad\.json: expected a SQuAD JSON object with a "data" list'),
    ],
)
def test_bad_squad_files(run_main, vocab_file, data, tmp_path, kind, message):
    path = tmp_path / "bad.json"
    path.write_bytes(_squad_variant(kind))
    output_dir = tmp_path / "out"
    argv = _argv(
        do_train=True,
        train_file=path,
        vocab_file=vocab_file,
        bert_config_file=data.config_file,
        output_dir=output_dir,
        max_seq_length=48,
        max_query_length=16,
        doc_stride=16,
    )
    _fails(run_main, run_squad, argv, message)
    assert not _leftovers(output_dir)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"max_seq_length": 96},
            r"--max_seq_length: expected 3\.\.64 \(max_position_embeddings in .*, got 96",
        ),
        ({"learning_rate": -1}, "--learning_rate: expected a positive number, got -1"),
        ({"doc_stride": 0}, "--doc_stride: expected a positive number, got 0"),
        ({"warmup_proportion": -0.5}, r"--warmup_proportion: expected 0\.\.1, got -0.5"),
    ],
)
def test_nonsensical_squad_flags(run_main, vocab_file, data, tmp_path, overrides, message):
    output_dir = tmp_path / "out"
    values = {
        "do_train": True,
        "train_file": TESTDATA / "squad_v1.1.json",
        "vocab_file": vocab_file,
        "bert_config_file": data.config_file,
        "output_dir": output_dir,
        "max_seq_length": 48,
        "max_query_length": 16,
        **overrides,
    }
    _fails(run_main, run_squad, _argv(**values), message)
    assert not _leftovers(output_dir)
