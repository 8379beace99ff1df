"""Every reader and script entry point on `ram://` copies of the test data: TensorFlow's
in-memory file system stands in for a bucket (gs://, s3://), a path that `open()` and `os.path`
cannot see, so anything not read or written through tf.io.gfile fails here. Each test runs in an
empty working directory and checks that nothing was written there (a `Path("ram://b")` would
have made a local `ram:/b` folder).
"""

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import (
    checkpoints,
    convert_checkpoint,
    create_pretraining_data,
    extract_features,
    fileio,
    run_classifier,
    run_pretraining,
    run_squad,
    testing,
)
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.tasks import glue, squad
from bert_tf.text.tokenization import load_vocab

TESTDATA = Path(__file__).parent / "testdata"
CLS_TRAIN = "sentence\tlabel\n" + "a fine film\tpos\na dull film\tneg\n" * 4
CLS_DEV = 'sentence,label\na fine film,pos\n"a dull, long film",neg\n'


def _copy(local: Path, uri: str) -> str:
    """Copies a local file or folder to `uri` through tf.io.gfile; returns `uri`."""
    if local.is_dir():
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            _copy(path, f"{uri}/{path.relative_to(local).as_posix()}")
        return uri
    tf.io.gfile.makedirs(uri.rsplit("/", 1)[0])
    tf.io.gfile.copy(str(local), uri, overwrite=True)
    return uri


def _write(uri: str, text: str) -> str:
    tf.io.gfile.makedirs(uri.rsplit("/", 1)[0])
    with tf.io.gfile.GFile(uri, "w") as f:
        f.write(text)
    return uri


def _read(uri: str) -> str:
    with tf.io.gfile.GFile(uri) as f:
        return f.read()


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A fresh `ram://<id>` root; the test runs in an empty folder that must stay empty."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    root = f"ram://{uuid.uuid4().hex[:8]}"
    yield root
    assert not list(work.iterdir()), "something was written to the local working directory"
    fileio.remove_tree(root)


def test_readers_read_ram_paths(bucket, minilm_dir):
    # Classification files: GLUE's layout and text_classification's TSV/CSV lookup.
    data = f"{bucket}/cls"
    _write(f"{data}/train.tsv", CLS_TRAIN)
    _write(f"{data}/dev.csv", CLS_DEV)
    processor = glue.get_processor("text_classification")
    assert processor.get_labels(data) == ["neg", "pos"]
    assert [e.text_a for e in processor.get_dev_examples(data)] == [
        "a fine film",
        "a dull, long film",
    ]
    mrpc = f"{bucket}/mrpc"
    _write(
        f"{mrpc}/train.tsv",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe left.\tHe went.\n",
    )
    (example,) = glue.get_processor("mrpc").get_train_examples(mrpc)
    assert (example.text_a, example.text_b, example.label) == ("He left.", "He went.", "1")
    with pytest.raises(
        FileNotFoundError, match=rf"{bucket}/nothing: expected train.tsv or train.csv"
    ):
        processor.get_train_examples(f"{bucket}/nothing")

    # An HF folder (config.json, model.safetensors, vocab.txt) and its .safetensors file alone.
    hf = _copy(minilm_dir, f"{bucket}/minilm")
    assert checkpoints.detect_format(hf) == "hf"
    local, remote = checkpoints.read_checkpoint(minilm_dir), checkpoints.read_checkpoint(hf)
    assert remote.config == local.config is not None
    name = "bert/encoder/layer_0/attention/self/query/kernel"
    assert np.array_equal(remote.load(name), local.load(name))
    weights = checkpoints.read_checkpoint(f"{hf}/{checkpoints.HF_WEIGHTS_NAME}")
    assert weights.shapes == local.shapes
    assert load_vocab(f"{hf}/vocab.txt") == load_vocab(minilm_dir / "vocab.txt")
    assert BertConfig.from_json_file(f"{hf}/config.json") == local.config

    # A google-research checkpoint written there, its config and task_info.json beside it.
    encoder = build_encoder(testing.tiny_config(vocab_size=100))
    prefix = checkpoints.save_google_checkpoint(encoder, f"{bucket}/google")
    assert prefix == f"{bucket}/google/{checkpoints.CHECKPOINT_NAME}"
    for path in (f"{bucket}/google", prefix):
        source = checkpoints.read_checkpoint(path)
        assert checkpoints.detect_format(path) == "google"
        assert source.config == encoder.bert_config
    assert checkpoints.read_task_info(prefix) is None
    info = {"task": "classifier", "labels": ["neg", "pos"]}
    _write(f"{bucket}/google/{checkpoints.TASK_INFO_NAME}", json.dumps(info))
    assert checkpoints.read_task_info(prefix) == (f"{bucket}/google/task_info.json", info)
    hf_out = checkpoints.save_hf_checkpoint(encoder, f"{bucket}/hf_out", f"{hf}/vocab.txt")
    assert checkpoints.read_checkpoint(hf_out).config == encoder.bert_config

    # SQuAD JSON and extract_features' input lines.
    squad_file = _copy(TESTDATA / "squad_v1.1.json", f"{bucket}/squad.json")
    assert (
        squad.read_squad_json(squad_file)
        == json.loads((TESTDATA / "squad_v1.1.json").read_text(encoding="utf-8"))["data"]
    )
    lines = _write(f"{bucket}/input.txt", "one line\nleft ||| right\n")
    assert extract_features.read_examples(lines) == [("one line", None), ("left", "right")]


def test_scripts_read_and_write_ram_paths(bucket, run_main, lee_corpus, tmp_path, minilm_dir):
    """create_pretraining_data -> run_pretraining -> convert_checkpoint -> run_classifier ->
    serving.export, extract_features and run_squad, every input and output a ram:// path."""
    from serving import export

    vocab = _copy(minilm_dir / "vocab.txt", f"{bucket}/vocab.txt")
    corpus = _copy(lee_corpus(tmp_path / "corpus", corpus=2) / "corpus.txt", f"{bucket}/corpus.txt")
    config = _write(
        f"{bucket}/bert_config.json",
        json.dumps(testing.tiny_config(vocab_size=30522, max_position_embeddings=64).to_dict()),
    )
    records = f"{bucket}/records/train.tfrecord"
    run_main(
        create_pretraining_data,
        f"--input_file={corpus}",
        f"--output_file={records}",
        f"--vocab_file={vocab}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--dupe_factor=1",
    )
    assert sum(1 for _ in tf.data.TFRecordDataset(records)) > 0

    pretrained = f"{bucket}/pretrain"
    run_main(
        run_pretraining,
        f"--input_file={records}",
        f"--output_dir={pretrained}",
        f"--bert_config_file={config}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--do_train",
        "--train_batch_size=4",
        "--num_train_steps=2",
        "--num_warmup_steps=1",
        "--seed=1",
    )
    assert tf.train.latest_checkpoint(pretrained)

    google = f"{bucket}/google"
    run_main(convert_checkpoint, f"--input={pretrained}", f"--output_dir={google}")
    assert checkpoints.detect_format(google) == "google"
    tf.io.gfile.copy(vocab, f"{google}/vocab.txt")

    data = f"{bucket}/cls"
    _write(f"{data}/train.tsv", CLS_TRAIN)
    _write(f"{data}/dev.csv", CLS_DEV)
    classifier = f"{bucket}/classifier"
    run_main(
        run_classifier,
        "--task_name=text_classification",
        f"--data_dir={data}",
        f"--init_checkpoint={google}/{checkpoints.CHECKPOINT_NAME}",
        f"--output_dir={classifier}",
        "--max_seq_length=16",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        "--do_train",
        "--do_eval",
    )
    assert "eval_accuracy = " in _read(f"{classifier}/eval_results.txt")
    assert json.loads(_read(f"{classifier}/task_info.json"))["labels"] == ["neg", "pos"]

    exports = f"{bucket}/exports"
    run_main(
        export, "--task=classifier", f"--init_checkpoint={classifier}", f"--export_dir={exports}"
    )
    served = tf.saved_model.load(f"{exports}/1").signatures["serving_default"]
    probabilities = served(text_a=tf.constant(["a fine film"]))["probabilities"].numpy()
    assert probabilities.shape == (1, 2) and np.isclose(probabilities.sum(), 1, atol=1e-5)

    features = f"{bucket}/out/features.jsonl"
    lines = _write(f"{bucket}/input.txt", "hello world\n")
    run_main(
        extract_features,
        f"--input_file={lines}",
        f"--output_file={features}",
        f"--init_checkpoint={google}",
        "--layers=-1",
        "--max_seq_length=8",
    )
    (record,) = [json.loads(line) for line in _read(features).splitlines()]
    assert [f["token"] for f in record["features"]] == ["[CLS]", "hello", "world", "[SEP]"]

    squad_data = json.loads((TESTDATA / "squad_v1.1.json").read_text(encoding="utf-8"))
    squad_data["data"] = squad_data["data"][:1]
    squad_file = _write(f"{bucket}/squad/train.json", json.dumps(squad_data))
    squad_out = f"{bucket}/squad_out"
    run_main(
        run_squad,
        f"--init_checkpoint={google}",
        f"--train_file={squad_file}",
        f"--predict_file={squad_file}",
        f"--output_dir={squad_out}",
        "--do_train=true",
        "--do_predict=true",
        "--train_batch_size=4",
        "--num_train_epochs=1",
        "--max_seq_length=64",
        "--max_query_length=16",
    )
    predictions = json.loads(_read(f"{squad_out}/predictions.json"))
    assert set(predictions) == {qa["id"] for qa in squad.iter_questions(squad_data["data"])}
