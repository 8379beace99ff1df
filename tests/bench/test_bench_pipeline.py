"""`bench.run --suite=pipeline` end to end at trivial sizes: the classify and pretrain pipelines
beside their scripts, each run's components, and the model server's time to ready.

No speed is asserted; the structure, each part's place inside its run and the ratios'
consistency with the measurements are.
"""

import json

import pytest

from bench import pipeline_report, pipeline_suite, report, run

pytestmark = pytest.mark.slow


def test_pipeline_suite_tiny(run_main, tmp_path):
    out = tmp_path / "results" / "tiny.json"
    run_main(
        run,
        "--suite=pipeline",
        f"--out={out}",
        "--pipeline_rows=100",  # one step of 32 reviews
        "--pipeline_epochs=0.32",
        "--pipeline_documents=10",
        "--pipeline_pretrain_steps=2",
        "--server_rounds=1",
        f"--pipeline_work_dir={tmp_path / 'work'}",
    )
    results = json.loads(out.read_text())
    assert (tmp_path / "results" / "tiny_pipeline.png").stat().st_size > 0
    suite = results["suites"]["pipeline"]
    classify, pretrain = suite["cases"]
    assert (classify["task"], classify["size"], pretrain["task"], pretrain["size"]) == (
        "classify",
        100,
        "pretrain",
        10,
    )
    expected = {
        "classify": (
            ["bert_tf.run_classifier", "serving.export"],
            {"TextClassificationExampleGen", "Transform", "Trainer", "Evaluator", "Pusher"},
        ),
        "pretrain": (
            ["bert_tf.create_pretraining_data", "bert_tf.run_pretraining", "serving.export"],
            {"PretrainingExampleGen", "Transform", "Trainer", "PretrainingEvaluator", "Pusher"},
        ),
    }
    for case in suite["cases"]:
        scripts, piped = case["runs"]
        assert (scripts["path"], piped["path"], piped["beam"]) == (
            "scripts",
            "pipeline (auto)",
            "auto",
        )
        script_parts, components = expected[case["task"]]
        assert [p["component"] for p in scripts["parts"]] == script_parts
        assert components <= {p["component"] for p in piped["parts"]}
        for r in (scripts, piped):
            # The training loop is a part of the run, and so is each component or script.
            assert 0 < r["training_loop_s"] < r["wall_s"]
            assert r["outside_training_s"] == pytest.approx(r["wall_s"] - r["training_loop_s"])
            assert r["ratio_vs_scripts"] == pytest.approx(r["wall_s"] / scripts["wall_s"])
            assert 0 < sum(p["wall_s"] for p in r["parts"]) <= r["wall_s"]
            assert r["cpu_s"] > 0 and all(p["cpu_s"] >= 0 for p in r["parts"])
        trainer = next(p for p in piped["parts"] if p["component"] == "Trainer")
        assert trainer["wall_s"] > piped["training_loop_s"] and trainer["cpu_s"] > 0
    server = suite["server"]
    assert server["server"]["n"] == server["bare_load"]["n"] == 1
    assert server["ratio"] == pytest.approx(
        server["server"]["median"] / server["bare_load"]["median"]
    )
    goals = {g["goal"]: g for g in results["goals"]}
    assert len(goals) == 3 and all(isinstance(g["met"], bool) for g in goals.values())
    ratio_goal = next(g for name, g in goals.items() if "scripts' wall time" in name)
    assert ratio_goal["value"] == classify["runs"][1]["ratio_vs_scripts"]
    assert ratio_goal["met"] == (ratio_goal["value"] <= pipeline_report.PIPELINE_RATIO_GOAL)
    table = report.table(results)
    assert "PIPELINE vs SCRIPTS" in table and "PretrainingEvaluator" in table


def test_the_loop_time_and_the_cpu_between_two_moments(tmp_path):
    log = {"global_batch_size": 4, "history": [{"step": 10, "examples_per_sec": 20.0}]}
    log["history"].append({"step": 15, "examples_per_sec": 10.0})
    (tmp_path / "training_log.json").write_text(json.dumps(log))
    # 10 x 4 examples at 20/s, then 5 x 4 at 10/s.
    assert pipeline_suite.training_loop_seconds(str(tmp_path / "training_log.json")) == 4.0
    samples = [(100.0, 1.0), (101.0, 1.5), (102.0, 3.0)]
    assert pipeline_suite.cpu_between(samples, 100.5, 102.0) == 2.0
    assert pipeline_suite.cpu_between(samples, 99.0, 101.2) == 1.5  # before any sample: 0


def test_a_failed_command_names_its_log_and_shows_its_end(tmp_path):
    with pytest.raises(RuntimeError, match=r"exited 3; .*fails\.log:\n.*boom"):
        pipeline_suite.run_command(
            ["python3", "-c", "import sys; print('boom'); sys.exit(3)"], tmp_path / "fails.log"
        )
    result = pipeline_suite.run_command(
        ["python3", "-c", "sum(range(3 * 10**7))"], tmp_path / "busy.log"
    )
    # One thread: its CPU seconds are at most its wall seconds; the samples saw it run.
    assert 0 < result["cpu_s"] <= result["wall_s"] + 0.05
    assert result["samples"] and result["samples"][-1][1] <= result["cpu_s"] + 0.1
