"""extract_features: google-research's JSON-lines layout, real weights, clear flag errors."""

import dataclasses
import json
import logging
import subprocess
import sys

import pytest

from bert_tf import extract_features
from bert_tf.extract_features import read_examples
from bert_tf.modeling.configs import BertConfig


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_tf.extract_features", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_extract_features_from_hf_folder_matches_reference(tmp_path, minilm_dir, minilm_reference):
    reference = minilm_reference["outputs"]["A man is eating food."]
    input_file = tmp_path / "input.txt"
    input_file.write_text(
        "A man is eating food.\nWho was Jim Henson ? ||| Jim Henson was an American puppeteer who created the Muppets\n"
    )
    output_file = tmp_path / "out" / "features.jsonl"
    result = _run(
        f"--input_file={input_file}",
        f"--output_file={output_file}",
        f"--init_checkpoint={minilm_dir}",
        "--layers=-1,-6",
        "--max_seq_length=16",
        "--batch_size=1",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in output_file.read_text().splitlines()]
    assert [r["linex_index"] for r in records] == [0, 1]

    single, pair = records
    assert [f["token"] for f in single["features"]] == reference["tokens"]
    cls_layers = single["features"][0]["layers"]
    assert [layer["index"] for layer in cls_layers] == [-1, -6]
    assert len(cls_layers[0]["values"]) == 384
    # HF/PyTorch reference of all-MiniLM-L6-v2, last layer at [CLS].
    assert cls_layers[0]["values"][:5] == pytest.approx(
        reference["cls_sequence_output"][:5], abs=1e-4
    )
    tokens = [f["token"] for f in pair["features"]]
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    assert len(tokens) == 16, "the pair is truncated to --max_seq_length"
    assert not list(output_file.parent.glob(".*tmp*")), "no temp file left behind"


def test_extract_features_flag_errors_are_clear(tmp_path, minilm_dir):
    input_file = tmp_path / "input.txt"
    input_file.write_text("hello\n")
    result = _run(
        f"--input_file={input_file}",
        f"--output_file={tmp_path / 'out.jsonl'}",
        f"--init_checkpoint={minilm_dir}",
        "--layers=-1,7",
    )
    assert result.returncode != 0
    assert "--layers: [7] out of range for a 6-layer model" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_sentence_pairs_split_like_google(tmp_path):
    # google-research reads a pair only when the stripped line matches `^(.*) \|\|\| (.*)$`:
    # spaces around the separator, the last separator wins, the halves are not stripped again.
    lines = {
        "a|||b": ("a|||b", None),
        "x ||| y ||| z": ("x ||| y", "z"),
        "  a ||| b  ": ("a", "b"),
        "q |||  r": ("q", " r"),
        " ||| ": ("|||", None),
        "a ||| ": ("a |||", None),
        "plain text": ("plain text", None),
        "": ("", None),
        "line\u2028sep ||| b": ("line\u2028sep", "b"),  # only "\n" ends a line
    }
    path = tmp_path / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_examples(str(path)) == list(lines.values())
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(ValueError, match=r"input\.txt:2: not UTF-8"):
        read_examples(str(path))


def _extract(run_main, tmp_path, minilm_dir, text: str, *args: str) -> dict:
    """extract_features in process on one line of `text` with MiniLM: its one JSON record."""
    (tmp_path / "input.txt").write_text(text + "\n")
    output_file = tmp_path / "features.jsonl"
    run_main(
        extract_features,
        f"--input_file={tmp_path / 'input.txt'}",
        f"--output_file={output_file}",
        f"--init_checkpoint={minilm_dir}",
        "--layers=-1",
        *args,
    )
    (record,) = [json.loads(line) for line in output_file.read_text().splitlines()]
    return record


def test_hf_config_json_as_bert_config_file(tmp_path, minilm_dir, run_main):
    # Regression: every script rejected an HF config.json given as --bert_config_file.
    config = f"--bert_config_file={minilm_dir / 'config.json'}"
    record = _extract(run_main, tmp_path, minilm_dir, "hello world", config, "--max_seq_length=8")
    assert [f["token"] for f in record["features"]] == ["[CLS]", "hello", "world", "[SEP]"]


def _cls_values(run_main, tmp_path, minilm_dir, *args: str) -> list[float]:
    record = _extract(
        run_main, tmp_path, minilm_dir, "A man is eating food.", "--max_seq_length=16", *args
    )
    return record["features"][0]["layers"][0]["values"]


def test_bert_config_file_chooses_the_gelu_form(tmp_path, minilm_dir, run_main, caplog):
    """google's checkpoints say "gelu" (erf) beside code computing the tanh form: a
    --bert_config_file saying "gelu_tanh" loads the same weights (one log line) and computes
    the tanh form; any other difference from the checkpoint's config stays an error."""
    own = BertConfig.from_json_file(minilm_dir / "config.json")
    assert own.hidden_act == "gelu"
    erf = _cls_values(run_main, tmp_path, minilm_dir)
    tanh_config = tmp_path / "tanh.json"
    dataclasses.replace(own, hidden_act="gelu_tanh").to_json_file(tanh_config)
    # absl's own logger too: an earlier in-process SavedModel export leaves it at WARNING.
    with caplog.at_level(logging.INFO, logger="absl"):
        tanh = _cls_values(run_main, tmp_path, minilm_dir, f"--bert_config_file={tanh_config}")
    chosen = [r for r in caplog.records if "computing hidden_act 'gelu_tanh'" in r.getMessage()]
    assert len(chosen) == 1 and "not 'gelu'" in chosen[0].getMessage()
    # Same weights, the other function: close, not equal.
    assert tanh == pytest.approx(erf, abs=0.05) and tanh != pytest.approx(erf, abs=1e-6)
    for field, value in (("hidden_act", "relu"), ("intermediate_size", 512)):
        other = tmp_path / f"{field}.json"
        dataclasses.replace(own, **{"hidden_act": "gelu_tanh", field: value}).to_json_file(other)
        with pytest.raises(SystemExit, match=f"config differs from the model's: {field}"):
            _cls_values(run_main, tmp_path, minilm_dir, f"--bert_config_file={other}")
