"""Stage `hf` of experiments/run_all.sh: HF transformers' fine-tuning run (in .venv-ref) and the
summary that sets our accuracy beside it (docs/results.md)."""

import bz2
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bert_tf.data import corpora
from experiments import hf_accuracy_summary

REPO = Path(__file__).resolve().parents[2]
REFERENCE_SCRIPT = REPO / "experiments" / "hf_classifier_reference.py"


def test_reference_script_imports_neither_the_project_nor_tensorflow(reference_script_imports):
    imported = reference_script_imports(REFERENCE_SCRIPT)
    assert {"absl", "numpy", "torch", "transformers"} <= imported
    assert not imported & {"tensorflow", "bert_tf", "serving", "keras"}


def test_rotten_tomatoes_reader_keeps_reviews_and_rejects_unknown_categories(tmp_path):
    good = tmp_path / "rt.csv.bz2"
    good.write_bytes(
        bz2.compress(
            b"category,text,movie_name,has_plot_and_reviews\n"
            b'fresh,"A gem,\n truly.",m,False\nplot,A man.,m,True\nrotten,Dull.,m,False\n'
        )
    )
    assert corpora.rotten_tomatoes_examples(good) == [("A gem, truly.", 1), ("Dull.", 0)]
    bad = tmp_path / "bad.csv.bz2"
    bad.write_bytes(bz2.compress(b"category,text\nfresh,ok\nmeh,what\n"))
    with pytest.raises(ValueError, match=r"bad.csv.bz2:3: expected category fresh/rotten/plot"):
        corpora.rotten_tomatoes_examples(bad)


def _ours(folder: Path, accuracy: float) -> None:
    folder.mkdir(parents=True)
    (folder / "eval_results.txt").write_text(
        f"eval_accuracy = {accuracy}\neval_loss = 0.5\nglobal_step = 10\n"
    )


def _hf(path: Path, accuracy: float, num_dev: int) -> None:
    path.write_text(json.dumps({"eval_accuracy": accuracy, "num_eval_examples": num_dev}))


def test_summary_tells_within_from_outside_one_standard_error(run_main, capsys, tmp_path):
    # dev 400, HF mean 0.80: SE = sqrt(0.8 * 0.2 / 400) = 0.02.
    for seed, (ours, google, hf) in enumerate(((0.79, 0.70, 0.81), (0.80, 0.72, 0.79)), 1):
        _ours(tmp_path / "hf" / "a" / f"ours_hf_seed{seed}", ours)
        _ours(tmp_path / "hf" / "a" / f"ours_google_seed{seed}", google)
        _hf(tmp_path / "hf" / "a" / f"hf_seed{seed}.json", hf, 400)
    _ours(tmp_path / "hf" / "a" / "ours_hf_seed3" / "unfinished", 0.1)  # no results yet: skipped
    run_main(
        hf_accuracy_summary,
        f"--hf_dir={tmp_path / 'hf'}",
        f"--output_file={tmp_path / 'summary.json'}",
    )
    output = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())["a"]
    assert summary["hf_standard_error"] == pytest.approx(0.02)
    rows = summary["implementations"]
    assert rows["ours_hf"]["seeds"] == [1, 2] and rows["ours_hf"]["mean"] == pytest.approx(0.795)
    assert rows["ours_hf"]["within_one_standard_error"] is True  # 0.005 from HF's 0.80
    assert rows["ours_hf"]["verdict"] == "within one SE"
    assert rows["ours_google"]["within_one_standard_error"] is False  # 0.09 below
    assert rows["ours_google"]["verdict"] == "worse"
    assert (tmp_path / "summary.png").stat().st_size > 1000
    assert "| a (400) |" in output
    # ours_hf (0.79, 0.80) vs HF (0.81, 0.79): t = -0.005 / sqrt(0.005**2 + 0.01**2).
    assert rows["ours_hf"]["welch_t"] == pytest.approx(-0.005 / math.sqrt(0.005**2 + 0.01**2))
    assert f"-0.005 (t {rows['ours_hf']['welch_t']:+.2f}, p " in output
    assert "within one SE) |" in output and "; worse) |" in output


def _welch_by_hand(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's t and two-sided p from the textbook formulas (Welch-Satterthwaite dof)."""
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    t = (np.mean(a) - np.mean(b)) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t, 2 * stats.t.sf(abs(t), dof)


def test_welch_t_test_and_verdicts_over_unequal_spreads(tmp_path):
    rng = np.random.default_rng(0)
    hf = (0.85 + 0.004 * rng.standard_normal(5)).tolist()
    close = (0.85 + 0.02 * rng.standard_normal(4)).tolist()  # other spread, other seed count
    below = [a - 0.05 for a in hf]  # 5 points below, the same spread: clearly worse
    summary = hf_accuracy_summary.summarise(
        {
            "ours_hf": dict(enumerate(close, 1)),
            "ours_google": dict(enumerate(below, 1)),
            "hf": dict(enumerate(hf, 1)),
        },
        num_dev=1000,
    )
    rows = summary["implementations"]
    for name, ours in (("ours_hf", close), ("ours_google", below)):
        t, p = _welch_by_hand(ours, hf)
        assert rows[name]["welch_t"] == pytest.approx(t)
        assert rows[name]["welch_p"] == pytest.approx(p)
    assert rows["ours_google"]["welch_p"] < 1e-6 and rows["ours_google"]["verdict"] == "worse"
    assert rows["ours_hf"]["welch_p"] > 0.05
    assert rows["hf"]["std"] == pytest.approx(np.std(hf, ddof=1))
    # One standard error of HF's mean on 1,000 dev examples: sqrt(p (1 - p) / 1000) ~ 0.0113.
    se = summary["hf_standard_error"]
    assert se == pytest.approx(math.sqrt(np.mean(hf) * (1 - np.mean(hf)) / 1000))
    assert hf_accuracy_summary.verdict(se * 0.99, se) == "within one SE"
    assert hf_accuracy_summary.verdict(-se * 0.99, se) == "within one SE"
    assert hf_accuracy_summary.verdict(se * 1.01, se) == "better"
    assert hf_accuracy_summary.verdict(-se * 1.01, se) == "worse"


def test_welch_is_absent_where_undefined(run_main, tmp_path):
    """One seed on a side, or no spread on either: no t and p (null in the JSON, not NaN)."""
    for seed in (1, 2):
        _ours(tmp_path / "hf" / "a" / f"ours_hf_seed{seed}", 0.8)  # no spread
        _hf(tmp_path / "hf" / "a" / f"hf_seed{seed}.json", 0.8, 100)  # no spread
    _ours(tmp_path / "hf" / "a" / "ours_google_seed1", 0.7)  # one seed
    run_main(
        hf_accuracy_summary,
        f"--hf_dir={tmp_path / 'hf'}",
        f"--output_file={tmp_path / 'summary.json'}",
    )
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text
    rows = json.loads(text)["a"]["implementations"]
    for name in ("ours_hf", "ours_google"):
        assert rows[name]["welch_t"] is None and rows[name]["welch_p"] is None
    assert (
        rows["ours_hf"]["verdict"] == "within one SE" and rows["ours_google"]["verdict"] == "worse"
    )


def test_summary_rejects_a_malformed_results_file(run_main, tmp_path):
    folder = tmp_path / "hf" / "a" / "ours_hf_seed1"
    folder.mkdir(parents=True)
    (folder / "eval_results.txt").write_text("eval_accuracy: 0.8\n")
    with pytest.raises(ValueError, match=r"eval_results.txt:1: expected 'key = value'"):
        run_main(
            hf_accuracy_summary,
            f"--hf_dir={tmp_path / 'hf'}",
            f"--output_file={tmp_path / 'summary.json'}",
        )


@pytest.mark.slow
def test_hf_side_learns_with_the_full_vocabulary(reference_python, clean_env, minilm_dir, tmp_path):
    """The HF run tokenizes with the whole vocab (a tokenizer that silently ignored the vocab file
    mapped every word to [UNK] and could not learn) and fits a separable toy task."""
    data = tmp_path / "data"
    data.mkdir()
    good = ["a wonderful, moving film", "brilliant and funny", "a joy to watch", "superb acting"]
    bad = ["dull and lifeless", "a tedious mess", "boring, flat, awful", "poorly written"]
    rows = [f"{t}\t1" for t in good] + [f"{t}\t0" for t in bad]
    for split in ("train", "dev"):
        (data / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    output = tmp_path / "hf.json"
    run = subprocess.run(
        [
            str(reference_python),
            "-m",
            "experiments.hf_classifier_reference",
            f"--data_dir={data}",
            f"--model_dir={minilm_dir}",
            "--max_seq_length=16",
            "--train_batch_size=8",
            "--learning_rate=1e-4",
            "--num_train_epochs=15",
            "--warmup_proportion=0",
            "--seed=1",
            "--threads=2",
            f"--output_file={output}",
        ],
        cwd=REPO,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["num_train_steps"] == 15 and result["num_eval_examples"] == 8
    assert result["eval_accuracy"] == 1.0 and result["final_train_loss"] < 0.6  # chance: 0.69
    assert "examples/s ETA" in run.stderr  # progress lines


@pytest.mark.parametrize(("stages", "needs_reference_env"), [("hf", True), ("zh", False)])
def test_make_experiments_runs_the_stages_with_the_reference_env_for_hf(
    stages, needs_reference_env
):
    """`make experiments STAGES=hf` (docs/results.md) is run_all.sh's stage after the reference
    environment's setup (forced stale here: `make -n` only prints what it would do)."""
    # Under CI's `make test` this runs inside make: its MAKEFLAGS would add "Entering/Leaving
    # directory" lines to the output.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    make = ["make", "-n", "--no-print-directory", "-W", "requirements-reference.txt"]
    shown = subprocess.run(
        [*make, "experiments", f"STAGES={stages}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown[-1] == f"bash experiments/run_all.sh {stages}"
    assert any(".venv-ref" in line for line in shown) == needs_reference_env
