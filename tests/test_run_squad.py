"""run_squad end to end: train a tiny BERT, predict, and score like the official scripts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bert_tf import run_squad, testing, training
from bert_tf.tasks import squad

TESTDATA = Path(__file__).parent / "testdata"


@pytest.fixture(scope="module")
def bert_config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    testing.tiny_config(
        vocab_size=30522, hidden_size=64, num_attention_heads=2, max_position_embeddings=128
    ).to_json_file(path)
    return path


def _argv(**flag_values) -> list[str]:
    return [f"--{name}={value}" for name, value in flag_values.items()]


def _eval_results(output_dir: Path) -> dict[str, float]:
    lines = (output_dir / training.EVAL_RESULTS_FILE).read_text().splitlines()
    return {key: float(value) for key, value in (line.split(" = ") for line in lines)}


def test_overfits_ten_questions_and_scores_like_the_official_script(
    run_main, tmp_path, minilm_dir, bert_config_file, official_squad
):
    # 11 questions on 3 contexts; 120 steps of the full set teach a random tiny BERT them.
    data = json.loads((TESTDATA / "squad_v1.1.json").read_text(encoding="utf-8"))
    data["data"] = data["data"][:3]
    train_file = tmp_path / "train.json"
    train_file.write_text(json.dumps(data), encoding="utf-8")
    output_dir = tmp_path / "out"
    run_main(
        run_squad,
        *_argv(
            vocab_file=minilm_dir / "vocab.txt",
            bert_config_file=bert_config_file,
            do_train="true",
            train_file=train_file,
            do_predict="true",
            predict_file=train_file,
            train_batch_size=11,
            num_train_epochs=120,
            learning_rate=3e-3,
            max_seq_length=128,
            steps_per_loop=40,
            save_checkpoints_steps=1000,
            output_dir=output_dir,
        ),
    )
    predictions = json.loads((output_dir / "predictions.json").read_text(encoding="utf-8"))
    nbest = json.loads((output_dir / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert set(predictions) == set(nbest) == {qa["id"] for qa in squad.iter_questions(data["data"])}
    assert not (output_dir / "null_odds.json").exists()
    official = official_squad[0].evaluate(data["data"], predictions)
    results = _eval_results(output_dir)
    assert results["exact_match"] == pytest.approx(100 * official["exact_match"])
    assert results["f1"] == pytest.approx(100 * official["final_f1"])
    assert results["exact_match"] >= 80.0


def test_v2_train_then_predict_from_checkpoint(
    run_main, tmp_path, minilm_dir, bert_config_file, official_squad
):
    predict_file = TESTDATA / "squad_v2.0.json"
    output_dir = tmp_path / "out"
    common = {
        "vocab_file": minilm_dir / "vocab.txt",
        "bert_config_file": bert_config_file,
        "predict_file": predict_file,
        "version_2_with_negative": "true",
        "max_seq_length": 64,
        "doc_stride": 24,
        "max_query_length": 16,
        "output_dir": output_dir,
        "do_predict": "true",
    }
    run_main(
        run_squad,
        *_argv(
            do_train="true",
            train_file=predict_file,
            train_batch_size=8,
            num_train_epochs=1,
            **common,
        ),
    )
    predictions = json.loads((output_dir / "predictions.json").read_text(encoding="utf-8"))
    null_odds = json.loads((output_dir / "null_odds.json").read_text(encoding="utf-8"))
    assert set(predictions) == set(null_odds)
    for qas_id, text in predictions.items():  # threshold 0: "" exactly when the odds are > 0
        assert (text == "") == (null_odds[qas_id] > 0), qas_id
    dataset = squad.read_squad_json(predict_file)
    official = official_squad[1].evaluate(dataset, predictions)
    results = _eval_results(output_dir)
    assert results["total"] == 38
    for key, value in results.items():
        assert value == pytest.approx(official[key]), key

    # Predicting again without --do_train restores the last training checkpoint.
    (output_dir / "predictions.json").unlink()
    run_main(run_squad, *_argv(**common))
    again = json.loads((output_dir / "predictions.json").read_text(encoding="utf-8"))
    assert again == predictions


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "at least one of --do_train and --do_predict"),
        (["--do_train", "--output_dir=/tmp/x"], "--train_file is required"),
        (
            ["--do_predict", "--output_dir=/tmp/x", "--predict_file=/nonexistent.json"],
            "--predict_file=/nonexistent.json: no such file",
        ),
        (
            [
                "--do_predict",
                "--output_dir=/tmp/x",
                f"--predict_file={__file__}",
                "--max_seq_length=64",
                "--max_query_length=64",
            ],
            "--max_seq_length (64) must exceed --max_query_length (64) + 3",
        ),
    ],
)
def test_bad_flags_are_clear_errors(run_main, args, message):
    with pytest.raises(SystemExit) as exit_info:
        run_main(run_squad, *args)
    assert str(exit_info.value.code).startswith(f"error: {message}")


def test_script_runs_as_a_program_and_reports_errors_in_one_line():
    result = subprocess.run(
        [sys.executable, "-m", "bert_tf.run_squad", "--do_train", "--output_dir=/tmp/x"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == "error: --train_file is required"


def test_bad_vocab_for_config_is_a_clear_error(run_main, tmp_path, bert_config_file, chinese_vocab):
    with pytest.raises(SystemExit, match=r"21128 tokens but .* has vocab_size 30522"):
        run_main(
            run_squad,
            *_argv(
                vocab_file=chinese_vocab,
                bert_config_file=bert_config_file,
                do_predict="true",
                predict_file=TESTDATA / "squad_v1.1.json",
                max_seq_length=64,
                max_query_length=16,
                output_dir=tmp_path,
            ),
        )
