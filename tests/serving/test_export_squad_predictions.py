"""The served SQuAD model answers exactly as `run_squad --do_predict`: a tiny BERT trained briefly
(varied logits), predictions.json of v1.1 and v2.0 questions with a small `--n_best_size`, and
the same questions through `python -m serving.export`'s `serving_default`, in process and through
our model server."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from bert_tf import run_squad, testing
from bert_tf.tasks import squad
from serving import export
from serving.client import ServingClient

TESTDATA = Path(__file__).parents[1] / "testdata"
# 64-token windows 24 tokens apart: contexts span several windows, so spans compete across
# windows and the max-context rule decides which may start where.
WINDOWS = ["--max_seq_length=64", "--doc_stride=24", "--max_query_length=16"]
# Contexts with what get_final_text maps back: runs of whitespace of every kind google splits
# on (tab, newline, U+202F), a no-break space inside a doc word, accents, "ß", a ligature the
# vocab lacks ([UNK]: its words are answered whole), punctuation glued to words.
ODD_CONTEXTS = [
    "Zürich's  Kunsthaus (1910–1943)\n\nhouses\tthe café\u202fcollection of Ferdinand "
    "Hodler; the ﬁne-art museum on the Heimplatz is\u00a0about 6650 kilometres from Cairo.",
    "The Nile's delta—about 240 km wide—is  one of the world's largest deltas; it was named "
    "by Herodotus (c. 484–425 BC), who walked the Straße of Memphis in Ægypt.",
]
# google-research's doc-word separators: served answers are the context with each run as " ".
DOC_WHITESPACE = re.compile("[ \t\r\n\u202f]+")


def _run(module, *args: str) -> None:
    """`module.main` in process on a fresh FlagValues (as the run_main fixture, module-wide)."""
    flag_values = flags.FlagValues()
    module.define_flags(flag_values)
    flag_values([module.__name__, *args])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "FLAGS", flag_values)
        module.main([module.__name__])


def _predict_file(source: Path, target: Path) -> list[dict]:
    """Every question of `source` asked of its own context and of the next article's, and the
    first questions of the odd contexts: a SQuAD file without answers (nothing to score)."""
    articles = squad.read_squad_json(source)
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    questions = [(qa["id"], qa["question"], i) for i, p in enumerate(paragraphs) for qa in p["qas"]]
    contexts = [p["context"] for p in paragraphs] + ODD_CONTEXTS
    qas: dict[int, list] = {i: [] for i in range(len(contexts))}
    for qas_id, question, i in questions:
        qas[i].append({"id": qas_id, "question": question})
        qas[(i + 1) % len(paragraphs)].append({"id": f"{qas_id}-next", "question": question})
    for n, (qas_id, question, _) in enumerate(questions[:16]):
        qas[len(paragraphs) + n % 2].append({"id": f"{qas_id}-odd", "question": question})
    data = {
        "version": "test",
        "data": [
            {"title": "t", "paragraphs": [{"context": c, "qas": qas[i]}]}
            for i, c in enumerate(contexts)
        ],
    }
    target.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return [
        {"id": qa["id"], "question": qa["question"], "context": c}
        for i, c in enumerate(contexts)
        for qa in qas[i]
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, minilm_dir):
    """run_squad's output folder: a tiny BERT fine-tuned briefly on the v1.1 test questions
    with --n_best_size=5 (in its task_info.json)."""
    root = tmp_path_factory.mktemp("squad_predictions")
    config = root / "bert_config.json"
    testing.tiny_config(
        vocab_size=30522, hidden_size=64, num_attention_heads=2, max_position_embeddings=64
    ).to_json_file(config)
    output_dir = root / "out"
    _run(
        run_squad,
        f"--vocab_file={minilm_dir / 'vocab.txt'}",
        f"--bert_config_file={config}",
        "--do_train",
        f"--train_file={TESTDATA / 'squad_v1.1.json'}",
        "--train_batch_size=8",
        "--num_train_epochs=4",
        "--learning_rate=2e-3",
        "--seed=7",
        "--n_best_size=5",
        f"--output_dir={output_dir}",
        *WINDOWS,
    )
    return output_dir


def _predict(output_dir: Path, predict_file: Path, *args: str) -> dict[str, dict]:
    """run_squad --do_predict with the folder's checkpoint: its output files, by name."""
    _run(
        run_squad,
        "--do_predict",
        f"--predict_file={predict_file}",
        f"--init_checkpoint={output_dir}",  # config and vocab beside it
        f"--output_dir={output_dir}",
        *WINDOWS,
        *args,
    )
    names = ("predictions.json", "null_odds.json")
    return {
        name: json.loads((output_dir / name).read_text(encoding="utf-8"))
        for name in names
        if (output_dir / name).exists()
    }


def _export(output_dir: Path, export_dir: Path, *args: str) -> Path:
    _run(export, f"--init_checkpoint={output_dir}", f"--export_dir={export_dir}", *args)
    (version,) = export_dir.iterdir()
    return version


def _serve(path: Path, questions: list[dict]) -> dict[str, np.ndarray]:
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    out = serve(
        question=tf.constant([q["question"] for q in questions]),
        context=tf.constant([q["context"] for q in questions]),
    )
    return {name: value.numpy() for name, value in out.items()}


def _assert_answers_equal(served: dict, questions: list[dict], predictions: dict) -> None:
    """Served text = predictions.json's, for every question; where run_squad found no valid
    span it writes google's placeholder "empty", the export "" with score -inf."""
    answers = [a.decode() for a in served["answer_text"]]
    expected = [predictions[q["id"]] for q in questions]
    mismatches = [
        (q["id"], a, e)
        for q, a, e in zip(questions, answers, expected, strict=True)
        if a != ("" if e == "empty" else e)
    ]
    assert not mismatches, mismatches[:10]
    for i, q in enumerate(questions):
        start, end = int(served["start_char"][i]), int(served["end_char"][i])
        if expected[i] == "empty":
            assert served["score"][i] == -math.inf
        if answers[i]:
            assert DOC_WHITESPACE.sub(" ", q["context"][start:end]) == answers[i], q["id"]
        else:
            assert (start, end) == (0, 0)


def test_v1_export_answers_as_predictions_json(trained, tmp_path):
    questions = _predict_file(TESTDATA / "squad_v1.1.json", tmp_path / "predict.json")
    assert len(questions) >= 50
    small = _predict(trained, tmp_path / "predict.json", "--n_best_size=5")["predictions.json"]
    full = _predict(trained, tmp_path / "predict.json", "--n_best_size=64")["predictions.json"]
    # The top-5 lists change answers (and leave some questions no valid span): a full search
    # would not match run_squad.
    assert any(small[q["id"]] != full[q["id"]] for q in questions)
    # n_best_size (5) and the windows come from the folder's task_info.json.
    version = _export(trained, tmp_path / "squad")
    assert json.loads((version / "assets" / "squad_options.json").read_text())["n_best_size"] == 5
    served = _serve(version, questions)
    _assert_answers_equal(served, questions, small)
    # The odd contexts' answers were mapped back through get_final_text.
    assert any(q["id"].endswith("-odd") and small[q["id"]] for q in questions)


@pytest.mark.parametrize("n_best_size", [5, 3])
def test_v2_export_answers_as_predictions_json(trained, tmp_path, n_best_size):
    questions = _predict_file(TESTDATA / "squad_v2.0.json", tmp_path / "predict.json")
    assert len(questions) >= 50
    v2 = ["--version_2_with_negative", f"--n_best_size={n_best_size}"]
    odds = _predict(trained, tmp_path / "predict.json", *v2)["null_odds.json"]
    full = _predict(trained, tmp_path / "predict.json", *v2[:-1], "--n_best_size=64")
    assert any(odds[i] != full["null_odds.json"][i] for i in odds)  # not a full search
    # Half-way between the two middle odds: about half the questions get "".
    ranked = sorted(odds.values())
    threshold = (ranked[len(ranked) // 2 - 1] + ranked[len(ranked) // 2]) / 2
    v2.append(f"--null_score_diff_threshold={threshold!r}")
    outputs = _predict(trained, tmp_path / "predict.json", *v2)
    predictions = outputs["predictions.json"]
    assert 0 < list(predictions.values()).count("") < len(predictions)
    version = _export(trained, tmp_path / "squad", *v2)
    served = _serve(version, questions)
    _assert_answers_equal(served, questions, predictions)
    np.testing.assert_allclose(
        served["null_score_diff"],
        [outputs["null_odds.json"][q["id"]] for q in questions],
        atol=1e-4,
    )


def test_served_through_our_model_server(trained, tmp_path, server_process):
    questions = _predict_file(TESTDATA / "squad_v2.0.json", tmp_path / "predict.json")
    v2 = ["--version_2_with_negative", "--null_score_diff_threshold=-0.5"]
    predictions = _predict(trained, tmp_path / "predict.json", *v2)["predictions.json"]
    _export(trained, tmp_path / "squad", *v2)
    server = server_process(
        ["--embedded", "--model_name=squad", f"--model_base_path={tmp_path / 'squad'}"],
        tmp_path / "server.log",
    )
    try:
        server.wait_available("squad")
        with ServingClient(server.target) as client:
            served = client.predict(
                "squad",
                {
                    "question": np.array([q["question"] for q in questions], dtype=object),
                    "context": np.array([q["context"] for q in questions], dtype=object),
                },
            )
    finally:
        assert server.stop() == 0, server.log()
    _assert_answers_equal(served, questions, predictions)
