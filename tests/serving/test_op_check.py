"""The op check: every kind of export uses only ops the stock TF Serving 2.16.1 registers, and a
tensorflow-text op outside that list makes `serving.export` refuse, with no version left.

Our model server, which runs every tensorflow-text op, loads such a model with a warning naming
the op. The stock list (serving/tf_serving_ops.txt) is checked against the installed TensorFlow
(`scripts/gen_tf_serving_ops.py --check`) and its tensorflow-text part against the installed
tensorflow-text's registry.
"""

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.python.framework import op_def_registry

from bert_tf import checkpoints, testing
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from bert_tf.text import packer
from bert_tf.text.tokenization import BertPreprocessor
from serving import export, export_lib, op_check
from serving.servable import load_servable

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "scripts" / "gen_tf_serving_ops.py"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", "the", "a", "dog", "runs"]
VOCAB += ["who", "wrote", "it", "book", "by", "jane", "##s"]
TINY = testing.micro_config(vocab_size=len(VOCAB))
# The tensorflow-text ops our exports use; every one is in tensorflow-text 2.12.1's ops_lib.
TEXT_OPS = {"NormalizeUTF8", "FastBertNormalize", "FastWordpieceTokenizeWithOffsets"}
TRIMMER_OP = "TFText>RoundRobinTrim"


def _model(model_class, *args):
    keras.utils.set_random_seed(3)
    return model_class(build_encoder(TINY), *args)


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, str]:
    """Every kind of export, each written through export_lib (which runs the check)."""
    root = tmp_path_factory.mktemp("exports")
    pre = BertPreprocessor(VOCAB, seq_length=16)
    squad_pre = BertPreprocessor(VOCAB, seq_length=24)
    squad = {"doc_stride": 5, "max_query_length": 6, "max_answer_length": 4}
    return {
        "encoder": export_lib.export_encoder(build_encoder(TINY), pre, root / "encoder"),
        "pretrainer": export_lib.export_encoder(_model(BertPretrainer), pre, root / "pretrainer"),
        "classifier": export_lib.export_classifier(_model(BertClassifier, 2), pre, root / "clf"),
        "regressor": export_lib.export_classifier(
            _model(BertClassifier, 1), pre, root / "regressor", regression=True
        ),
        "single_segment": export_lib.export_classifier(
            _model(BertClassifier, 2), pre, root / "single", single_segment=True
        ),
        "squad_v1": export_lib.export_squad(
            _model(BertSpanLabeler), squad_pre, root / "squad1", **squad
        ),
        "squad_v2": export_lib.export_squad(
            _model(BertSpanLabeler),
            squad_pre,
            root / "squad2",
            version_2_with_negative=True,
            **squad,
        ),
    }


@pytest.mark.parametrize(
    "kind",
    ["encoder", "pretrainer", "classifier", "regressor", "single_segment", "squad_v1", "squad_v2"],
)
def test_every_export_kind_is_inside_the_tf_serving_2_16_1_list(exports, kind):
    used = op_check.used_ops(exports[kind])
    assert op_check.ops_outside(exports[kind]) == []
    # The signatures live in library functions (the graph itself only calls them): the
    # tokenizer's ops are found there, and the trimmer op is gone.
    assert used >= TEXT_OPS
    assert ("RegexSplitWithOffsets" in used) == kind.startswith("squad")
    assert TRIMMER_OP not in used
    if kind == "pretrainer":
        assert "TopKV2" in used  # fill_mask's: every signature's functions are read


def test_the_list_names_its_server_and_sources():
    text = Path(op_check.STOCK_OPS_FILE).read_text()
    ops = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert ops == sorted(set(ops)) and all(op.strip() == op and op for op in ops)
    assert op_check.stock_ops() == set(ops)
    assert op_check.stock_server() == (
        "tensorflow_model_server 2.16.1 (tensorflow-text v2.12.1 ops_lib)"
    )
    for source in (
        "tensorflow/serving tag 2.16.1 (commit 0d726954f36a2b6c6bfb60a4caec311f2b3e3101)",
        "tensorflow_serving/workspace.bzl pins org_tensorflow_text to text-2.12.1",
        "tensorflow_serving/model_servers/BUILD links @org_tensorflow_text//tensorflow_text:ops_lib",
        "tensorflow/text tag v2.12.1 (commit f8dee2d8b556df562d0086a18b7587702fa99eaf)",
    ):
        assert source in text


def test_its_tensorflow_text_part_is_registered_by_tensorflow_text():
    line = next(
        line
        for line in Path(op_check.STOCK_OPS_FILE).read_text().splitlines()
        if line.startswith("# tensorflow_text_ops:")
    )
    text_ops = set(line.split(":", 1)[1].strip().split(","))
    assert text_ops <= op_check.stock_ops()
    # Real op names: this process imported tensorflow_text, whose ops are a superset.
    unknown = sorted(op for op in text_ops if op_def_registry.get(op) is None)
    assert not unknown
    assert TEXT_OPS | {"RegexSplitWithOffsets"} <= text_ops
    assert TRIMMER_OP not in text_ops and op_def_registry.get(TRIMMER_OP) is not None


def test_the_core_part_is_this_tensorflows_and_a_wrong_list_is_caught(tmp_path):
    run = [sys.executable, str(GENERATOR), "--check"]
    result = subprocess.run(
        [*run, f"--output={op_check.STOCK_OPS_FILE}"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"core TF ops are TensorFlow {tf.__version__}'s" in result.stdout
    tampered = tmp_path / "ops.txt"
    lines = Path(op_check.STOCK_OPS_FILE).read_text().splitlines()
    tampered.write_text("\n".join([line for line in lines if line != "MatMul"] + ["NoSuchOp"]))
    result = subprocess.run(
        [*run, f"--output={tampered}"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 1
    assert "lacks ['MatMul'], has ['NoSuchOp'] besides" in result.stderr


class NestedTrimmer(tf.Module):
    """The trimmer op two function calls and a cond deep in its signature's graph."""

    @tf.function
    def _inner(self, ids):
        return tf.cond(
            tf.size(ids.values) > 0,
            lambda: tf_text.RoundRobinTrimmer(2).trim([ids])[0].to_tensor(),
            lambda: ids.to_tensor(),
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text):
        ids = tf.strings.to_number(tf.strings.split(text), tf.int32)
        return {"ids": self._inner(ids)}


def test_ops_in_nested_functions_are_found(tmp_path):
    module = NestedTrimmer()
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    assert op_check.ops_outside(tmp_path) == [TRIMMER_OP]
    assert op_check.ops_outside(tmp_path, allow_ops=[TRIMMER_OP]) == []
    with pytest.raises(op_check.OpsOutsideError) as error:
        op_check.check_ops(tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert f"uses op(s) {TRIMMER_OP} that the stock tensorflow_model_server 2.16.1" in message
    assert message.endswith(f"pass --allow_ops={TRIMMER_OP}")


def test_our_server_loads_it_and_says_the_stock_one_would_not(tmp_path, caplog):
    module = NestedTrimmer()
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    with caplog.at_level(logging.WARNING):
        servable = load_servable("trim", 3, str(tmp_path))
    out = servable.signature("serving_default").run({"text": np.array([b"1 2 3"], object)})
    assert out["ids"].tolist() == [[1, 2]]
    (warning,) = [r.getMessage() for r in caplog.records if "stock" in r.getMessage()]
    assert warning.startswith(f"trim version 3 uses op(s) {TRIMMER_OP} that the stock ")
    assert "TF Serving 2.13-2.19 would not load it" in warning


@pytest.fixture(scope="module")
def classifier_run(tmp_path_factory) -> Path:
    """A run_classifier-style output folder (checkpoint, config, vocab, task_info.json)."""
    folder = tmp_path_factory.mktemp("run")
    checkpoints.training_checkpoint(_model(BertClassifier, 2)).write(str(folder / "ckpt-1"))
    (folder / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in VOCAB))
    info = {"task": "classifier", "labels": ["neg", "pos"], "max_seq_length": 16}
    checkpoints.write_model_files(folder, TINY, vocab, info)
    return folder


def _with_the_tensorflow_text_trimmer(monkeypatch):
    """The packer as it was: tf_text.RoundRobinTrimmer, whose op the stock server lacks."""
    monkeypatch.setattr(
        packer,
        "round_robin_trim",
        lambda segments, budget: tf_text.RoundRobinTrimmer(budget).trim(segments),
    )


def test_serving_export_refuses_an_op_outside_and_leaves_nothing(
    classifier_run, tmp_path, monkeypatch, run_main, capsys
):
    _with_the_tensorflow_text_trimmer(monkeypatch)
    export_dir = tmp_path / "models" / "clf"
    with pytest.raises(SystemExit) as exited:
        run_main(export, f"--init_checkpoint={classifier_run}", f"--export_dir={export_dir}")
    message = str(exited.value.code)
    assert message.count("\n") == 0
    assert message.startswith(f"error: {export_dir / '1'} uses op(s) {TRIMMER_OP} ")
    assert "stock tensorflow_model_server 2.16.1" in message
    assert message.endswith(f"pass --allow_ops={TRIMMER_OP}")
    assert not (tmp_path / "models").exists()  # no version, no temporary folder, no base path

    # Into an existing base path: its other versions stay, nothing is added.
    export_dir.mkdir(parents=True)
    (export_dir / "7").mkdir()
    with pytest.raises(op_check.OpsOutsideError):
        export.build_and_export(None, str(classifier_run), str(export_dir))
    assert sorted(p.name for p in export_dir.iterdir()) == ["7"]

    # A target server that has the op: --allow_ops lets the export through.
    run_main(
        export,
        f"--init_checkpoint={classifier_run}",
        f"--export_dir={export_dir}",
        f"--allow_ops={TRIMMER_OP}",
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(export_dir / "8")
    assert TRIMMER_OP in op_check.used_ops(export_dir / "8")
    shutil.rmtree(export_dir)


def test_serving_export_help_documents_allow_ops():
    result = subprocess.run(
        [sys.executable, "-m", "serving.export", "--helpfull"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    help_text = " ".join(result.stdout.split())
    assert "--allow_ops:" in help_text
    assert "tensorflow_model_server 2.16.1 (tensorflow-text v2.12.1 ops_lib)" in help_text
