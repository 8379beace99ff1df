"""Training output folders are self-contained and readable by other users.

run_classifier / run_squad write `bert_config.json`, `vocab.txt` and `task_info.json` beside
their checkpoints, so `serving.export --init_checkpoint=<output_dir>` needs no other flag; every
file they write (checkpoints included) gets 0666/0777 minus the umask, as TF Serving running as
another user (Kubernetes runAsNonRoot) must read them.
"""

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_tf import checkpoints, run_classifier, run_squad, testing
from bert_tf.modeling.configs import BertConfig
from serving import export

TESTDATA = Path(__file__).parent / "testdata"
WORDS = "the a movie film was is great good bad awful dull fun plot it who what where when did"
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!", *WORDS.split()]
TINY = testing.micro_config(vocab_size=len(VOCAB), max_position_embeddings=64)
POSITIVE = ["a great movie .", "good fun !", "the plot is good", "it was great"]
NEGATIVE = ["a dull film .", "awful !", "the plot is bad", "it was awful"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """vocab.txt, bert_config.json and an SST-2-like single-sentence text_classification set."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
    TINY.to_json_file(folder / "bert_config.json")
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    for name in ("train", "dev"):
        lines = "".join(f"{text}\t{label}\n" for text, label in rows * 2)
        (folder / f"{name}.tsv").write_text("sentence\tlabel\n" + lines)
    (folder / "test.tsv").write_text("sentence\n" + "".join(t + "\n" for t, _ in rows))
    return folder


def _modes(folder: Path) -> tuple[set[int], set[int]]:
    """(modes of the folders, modes of the files) in `folder`, itself included."""
    paths = [folder, *folder.rglob("*")]
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in paths}
    return (
        {m for p, m in modes.items() if p.is_dir()},
        {m for p, m in modes.items() if p.is_file()},
    )


def _with_umask(mask: int, fn, *args):
    old = os.umask(mask)
    try:
        return fn(*args)
    finally:
        os.umask(old)


def test_run_classifier_folder_exports_with_no_other_flag(inputs, tmp_path, run_main):
    out = tmp_path / "sst2"
    flag_values = flags.FlagValues()
    run_classifier.define_flags(flag_values)
    flag_values(
        [
            "run_classifier",
            "--task_name=text_classification",
            f"--data_dir={inputs}",
            f"--vocab_file={inputs / 'vocab.txt'}",
            f"--bert_config_file={inputs / 'bert_config.json'}",
            f"--output_dir={out}",
            "--max_seq_length=16",
            "--train_batch_size=16",
            "--num_train_epochs=1",
            "--save_checkpoints_steps=1",
            "--log_steps=1",
            "--seed=1",
            "--do_train",
            "--do_predict",
        ]
    )
    _with_umask(0o022, run_classifier.run, flag_values)

    info = json.loads((out / checkpoints.TASK_INFO_NAME).read_text())
    assert info == {
        "task": "classifier",
        "task_name": "text_classification",
        "labels": ["neg", "pos"],
        "regression": False,
        "single_segment": True,
        "do_lower_case": True,
        "max_seq_length": 16,
    }
    assert (out / "vocab.txt").read_bytes() == (inputs / "vocab.txt").read_bytes()
    assert BertConfig.from_json_file(out / "bert_config.json") == TINY
    lines = (out / "test_results.tsv").read_text().splitlines()
    assert lines[0] == "neg\tpos"  # a header naming the label columns, in class-id order
    results = np.loadtxt(out / "test_results.tsv", delimiter="\t", skiprows=1)
    assert results.shape == (8, 2)
    # Every file, checkpoints included, has the umask's modes (no 0600 temp-file leftovers).
    assert {p.name for p in out.glob("ckpt-1.*")} == {"ckpt-1.index", "ckpt-1.data-00000-of-00001"}
    assert _modes(out) == ({0o755}, {0o644}), sorted(p.name for p in out.iterdir())

    # `serving.export --task=classifier --init_checkpoint=<output_dir> --export_dir=...` just
    # works: labels, single sentence, max_seq_length, vocab and config all come from the folder.
    models = tmp_path / "models" / "sst2"
    run_main(export, "--task=classifier", f"--init_checkpoint={out}", f"--export_dir={models}")
    signature = tf.saved_model.load(str(models / "1")).signatures["serving_default"]
    texts = (inputs / "test.tsv").read_text().splitlines()[1:]
    served = signature(text_a=tf.constant(texts))
    np.testing.assert_allclose(served["probabilities"], results, atol=1e-5)
    labels = [info["labels"][i] for i in results.argmax(-1)]
    assert [x.decode() for x in served["label"].numpy()] == labels
    assert _modes(models) == ({0o755}, {0o644})


def test_run_squad_folder_is_self_contained_and_private_under_umask_077(
    inputs, tmp_path, run_main, monkeypatch
):
    data = json.loads((TESTDATA / "squad_v1.1.json").read_text(encoding="utf-8"))
    data["data"] = data["data"][:1]  # 4 questions: one training step
    train_file = tmp_path / "train.json"
    train_file.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "squad"
    argv = [
        f"--vocab_file={inputs / 'vocab.txt'}",
        f"--bert_config_file={inputs / 'bert_config.json'}",
        f"--train_file={train_file}",
        f"--predict_file={train_file}",
        f"--output_dir={out}",
        "--do_train",
        "--do_predict",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        "--max_seq_length=64",
        "--doc_stride=24",
        "--max_query_length=16",
        "--max_answer_length=20",
    ]
    _with_umask(0o077, run_main, run_squad, *argv)

    info = json.loads((out / checkpoints.TASK_INFO_NAME).read_text())
    assert info == {
        "task": "squad",
        "do_lower_case": True,
        "max_seq_length": 64,
        "doc_stride": 24,
        "max_query_length": 16,
        "max_answer_length": 20,
        "n_best_size": 20,
        "version_2_with_negative": False,
        "null_score_diff_threshold": 0.0,
    }
    assert (out / "vocab.txt").read_bytes() == (inputs / "vocab.txt").read_bytes()
    assert BertConfig.from_json_file(out / "bert_config.json") == TINY
    names = {p.name for p in out.iterdir()}
    assert {"checkpoint", "ckpt-1.index", "predictions.json", "eval_results.txt"} <= names
    assert _modes(out) == ({0o700}, {0o600}), sorted(names)

    # serving.export takes the decoding options from the folder (no --task either), flags win.
    exported = []
    monkeypatch.setattr(
        export,
        "export_squad",
        lambda model, preprocessor, *args, **kw: exported.append((preprocessor.seq_length, kw)),
    )
    export.build_and_export(None, str(out), str(tmp_path / "models"))
    export.build_and_export("squad", str(out / "ckpt-1"), str(tmp_path / "models"), doc_stride=8)
    options = {
        "doc_stride": 24,
        "max_query_length": 16,
        "max_answer_length": 20,
        "n_best_size": 20,
        "version_2_with_negative": False,
        "null_score_diff_threshold": 0.0,
        "allow_ops": (),
    }
    assert exported == [(64, options), (64, {**options, "doc_stride": 8})]
