"""bench.run end to end at trivial sizes: every suite runs and writes the documented JSON and PNGs.

No speed is asserted (numbers depend on the machine); the structure, the ratios' consistency
with the measurements and the id parity of the tokenizers are.
"""

import json
import math

import pytest

from bench import report, run


def _positive(stats: dict) -> None:
    assert stats["n"] >= 1
    assert 0 < stats["min"] <= stats["median"] <= stats["max"]


def test_all_suites_tiny(run_main, tmp_path):
    out = tmp_path / "results" / "tiny.json"
    run_main(
        run,
        "--suite=all",
        f"--out={out}",
        # train: tiny, short sequences, one timed round of one step
        "--preset=tiny",
        "--full_presets=",
        "--train_rounds=tiny:1",
        "--steps_per_call=tiny:1",
        "--train_seq_length=16",
        "--train_batch_size=4",
        # scaling: one point per sweep, ours only
        "--scaling_seq_lengths=8",
        "--scaling_layers=1",
        "--scaling_rounds=1",
        "--matmul_size=256",
        # infer: tiny encoder, a few calls, through the server too
        "--infer_preset=tiny",
        "--seq_length=16",
        "--infer_batch_size=4",
        "--latency_calls=3",
        "--latency_rounds=1",
        "--throughput_calls=1",
        "--throughput_rounds=1",
        # tokenize: a slice of the corpus
        "--tokenize_sentences=300",
        "--one_by_one_sentences=20",
        "--tokenize_batch_size=64",
        "--tokenize_rounds=1",
        # serve: two client counts, short runs
        "--serve_preset=tiny",
        "--serve_clients=1,2",
        "--serve_duration=0.5",
        "--serve_rounds=1",
    )
    results = json.loads(out.read_text())
    assert set(results["suites"]) == {"train", "scaling", "infer", "tokenize", "serve"}
    assert results["machine"]["tensorflow"]
    assert set(results["seconds"]) == set(results["load_average_1m"]) == set(results["suites"])
    for suite in ("train", "scaling", "infer", "tokenize", "serve"):
        assert (tmp_path / "results" / f"tiny_{suite}.png").stat().st_size > 0

    train = results["suites"]["train"]
    assert set(train["matmul_peak_flops"]) == {"float32", "bfloat16"}
    rows = train["rows"]
    assert [(r["impl"], r["xla"]) for r in rows] == [("ours", True), ("keras_nlp", True)]
    for r in rows:
        assert (r["preset"], r["seq_length"], r["batch_size"]) == ("tiny", 16, 4)
        _positive(r["step_time_s"])
        assert r["sequences_per_s"] == pytest.approx(4 / r["step_time_s"]["median"])
        assert r["tokens_per_s"] == pytest.approx(16 * r["sequences_per_s"])
        assert r["mfu"] > 0
        assert r["step_memory_mb"] is not None and r["peak_memory_mb"] > 0
    ratio = report.train_pairs(rows)[0]["ratio"]
    assert ratio == pytest.approx(rows[0]["sequences_per_s"] / rows[1]["sequences_per_s"])
    scaling = results["suites"]["scaling"]
    points = {
        sweep: [(r["seq_length"], r["num_layers"], r["impl"]) for r in scaling[sweep]]
        for sweep in ("seq_length", "num_layers")
    }
    assert points == {"seq_length": [(8, 2, "ours")], "num_layers": [(16, 1, "ours")]}
    _positive(scaling["seq_length"][0]["step_time_s"])

    infer = results["suites"]["infer"]
    assert set(infer["latency_batch_1"]) == {"ours", "keras_nlp", "ours via gRPC server"}
    for latency in infer["latency_batch_1"].values():
        assert latency["n"] == 3 and 0 < latency["p50_ms"] <= latency["p99_ms"]
    assert set(infer["throughput"]) == {"ours", "keras_nlp"}
    assert infer["ratio_throughput"] > 0 and math.isfinite(infer["server_overhead"])

    tokenize = results["suites"]["tokenize"]
    assert tokenize["ids_identical"] and tokenize["mismatched_sentences"] == 0
    assert tokenize["num_tokens"]["ours"] == tokenize["num_tokens"]["hf_tokenizers"] > 300
    for mode in ("batched", "one_by_one"):
        _positive(tokenize[mode]["ours"]["sentences_per_s"])
        _positive(tokenize[mode]["hf_tokenizers"]["tokens_per_s"])

    serve = results["suites"]["serve"]
    assert set(serve["clients"]) == {"1", "2"}
    for per_count in serve["clients"].values():
        for mode in ("batching off", "batching on"):
            assert per_count[mode]["failed_requests"] == 0
            _positive(per_count[mode]["requests_per_s"])
        assert per_count["ratio"] > 0

    goals = {g["goal"]: g for g in results["goals"]}
    assert len(goals) == 7
    base_goal = next(g for name, g in goals.items() if "base" in name)
    assert base_goal["met"] is None  # base was not run
    assert all(isinstance(g["met"], bool) for g in goals.values() if g is not base_goal)


def test_bad_flags(run_main, tmp_path, monkeypatch):
    from absl import flags

    from bench import infer_suite

    out = f"--out={tmp_path}/x.json"
    with pytest.raises(SystemExit, match="--suite: expected all or any of"):
        run_main(run, "--suite=training", out)
    # Every selected suite's flags are checked before the first suite runs.
    monkeypatch.setattr(infer_suite, "run", lambda **_: pytest.fail("infer ran"))
    with pytest.raises(SystemExit, match="--train_rounds: no value for preset"):
        run_main(run, "--suite=infer,train", "--preset=medium", out)
    with pytest.raises(SystemExit, match="--full_presets: unknown preset"):
        run_main(run, "--suite=infer,train", "--full_presets=huge", out)
    with pytest.raises(SystemExit, match="--serve_clients: expected integers"):
        run_main(run, "--suite=infer,serve", "--serve_clients=1,x", out)
    with pytest.raises(SystemExit, match=r"--batching_parameters_file=.*: no such file"):
        run_main(run, "--suite=infer,serve", f"--batching_parameters_file={tmp_path}/no", out)
    with pytest.raises(flags.IllegalFlagValueError, match="latency_calls"):
        run_main(run, "--latency_calls=0", out)
    assert not (tmp_path / "x.json").exists()


def test_scaling_inputs_tiny(run_main, tmp_path):
    from bench import scaling_inputs

    out = tmp_path / "scaling_inputs.json"
    run_main(
        scaling_inputs,
        f"--out={out}",
        "--presets=tiny",
        "--seq_lengths=16",
        "--batch_size=2",
        "--rounds=1",
        "--input_batches=2",
    )
    results = json.loads(out.read_text())
    (step,) = results["steps"]
    assert (step["preset"], step["seq_length"], step["batch_size"]) == ("tiny", 16, 2)
    assert step["median_step_s"] > 0 and len(step["step_s"]) == 1
    assert step["tokens_per_s"] == pytest.approx(32 / step["median_step_s"])
    assert step["mfu_vs_matmul_peak"] > 0
    for masking in ("static", "dynamic"):
        assert results["input"][f"{masking}_records_per_s"] > 0
    assert results["input"]["records"] > 0
