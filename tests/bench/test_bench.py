"""bench.run end to end at trivial sizes: every suite runs and writes the documented JSON and PNGs.

No speed is asserted (numbers depend on the machine); the structure, the ratios' consistency
with the measurements and the id parity of the tokenizers are.
"""

import json
import math

import pytest
import tensorflow as tf

from bench import report, rss, run, timing


def _positive(stats: dict) -> None:
    assert stats["n"] >= 1
    assert stats["min"] > 0  # a time or rate measured, not a zero from a unit or span slip


def test_all_suites_tiny(run_main, tmp_path, reference_python):
    out = tmp_path / "results" / "tiny.json"
    run_main(
        run,
        # Every suite but the pipeline suite (test_bench_pipeline.py: a file of its own, so
        # that `make test` runs it on another worker).
        f"--suite={','.join(s for s in run.SUITES if s != 'pipeline')}",
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
        # finetune: tiny against HF transformers in .venv-ref, both precisions
        "--finetune_models=tiny",
        "--finetune_seq_lengths=16",
        "--finetune_precisions=float32,bfloat16",
        "--finetune_batch_size=4",
        "--finetune_rounds=1",
        "--finetune_infer_seq_length=16",
        "--finetune_latency_calls=3",
        f"--reference_python={reference_python}",
    )
    results = json.loads(out.read_text())
    assert set(results["suites"]) == {"train", "scaling", "infer", "tokenize", "serve", "finetune"}
    assert results["machine"]["tensorflow"]
    # x86 /proc/cpuinfo has "cpu family"; the report names it (ARM's has no such field).
    has_family = results["machine"].get("cpu_family") is not None
    assert (f"{results['machine']['cpu']} (family " in report.table(results)) == has_family
    assert set(results["seconds"]) == set(results["load_average_1m"]) == set(results["suites"])
    for suite in results["suites"]:
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
    assert set(infer["latency_batch_1"]) == {
        "ours",
        "keras_nlp",
        "ours via gRPC server",
        "gRPC round trip, no model",
        "hf_transformers",
    }
    for latency in infer["latency_batch_1"].values():
        assert latency["n"] == 3 and latency["p50_ms"] > 0
    assert set(infer["throughput"]) == {"ours", "keras_nlp", "hf_transformers"}
    _positive(infer["throughput"]["hf_transformers"]["sequences_per_s"])
    assert infer["ratio_throughput_vs_hf"] > 0 and infer["ratio_latency_p50_vs_hf"] > 0
    assert infer["ratio_throughput"] > 0 and math.isfinite(infer["server_overhead"])
    # From the server's metrics: its request latency includes the model run and more.
    assert 0 < infer["server_handler_overhead"] < 10
    assert infer["threads"] == {"tensorflow_intra_op": 0, "tensorflow_inter_op": 0}
    # The no-model call is a part of the model call's round trip.
    round_trip = infer["latency_batch_1"]["gRPC round trip, no model"]["p50_ms"]
    assert round_trip < infer["latency_batch_1"]["ours via gRPC server"]["p50_ms"]

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

    finetune = results["suites"]["finetune"]
    assert finetune["hf_versions"]["transformers"] and finetune["threads"]["torch"] >= 1
    rows = finetune["rows"]
    assert [(r["precision"], r["impl"]) for r in rows] == [
        ("float32", "ours"),
        ("float32", "hf_transformers"),
        ("bfloat16", "ours"),
        ("bfloat16", "hf_transformers"),
    ]
    for ours, hf in (rows[:2], rows[2:]):
        for r in (ours, hf):
            assert (r["model"], r["seq_length"], r["batch_size"]) == ("tiny", 16, 4)
            _positive(r["step_time_s"])
            assert r["sequences_per_s"]["median"] == pytest.approx(4 / r["step_time_s"]["median"])
            assert r["peak_memory_mb"] > 0
        ratio = ours["sequences_per_s"]["median"] / hf["sequences_per_s"]["median"]
        assert ours["ratio_vs_hf"] == pytest.approx(ratio)
        # The same model on both sides: HF's parameter count is our classifier's.
        assert hf["parameters"] == ours["parameters"] > 0
    (infer,) = finetune["inference"]
    assert (infer["model"], infer["seq_length"], infer["batch_size"]) == ("tiny", 16, 4)
    for mode, calls in (("batch_1", 3), ("batch_4", 1)):
        for name in ("ours", "hf_transformers"):
            assert infer[mode][name]["latency"]["n"] == calls
            _positive(infer[mode][name]["sequences_per_s"])
        assert infer[mode]["ratio"] > 0

    goals = {g["goal"]: g for g in results["goals"]}
    assert len(goals) == 12
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
    with pytest.raises(SystemExit, match="--finetune_models: expected minilm or presets"):
        run_main(run, "--suite=infer,finetune", "--finetune_models=bert", out)
    with pytest.raises(SystemExit, match="--finetune_precisions: expected any of"):
        run_main(run, "--suite=infer,finetune", "--finetune_precisions=float16", out)
    with pytest.raises(SystemExit, match=r"--reference_python=.*: no such file"):
        run_main(run, "--suite=infer,finetune", f"--reference_python={tmp_path}/python", out)
    with pytest.raises(SystemExit, match="--pipeline_beam_modes: expected any of auto"):
        run_main(run, "--suite=infer,pipeline", "--pipeline_beam_modes=fast", out)
    with pytest.raises(SystemExit, match="--pipeline_rows: expected positive integers"):
        run_main(run, "--suite=infer,pipeline", "--pipeline_rows=0", out)
    with pytest.raises(flags.IllegalFlagValueError, match="latency_calls"):
        run_main(run, "--latency_calls=0", out)
    # TensorFlow's runtime runs in this process: a new pool size is refused before any suite.
    tf.constant(1.0) + 1.0
    with pytest.raises(SystemExit, match=r"--intra_op_threads=7: .*after initialization"):
        run_main(run, "--suite=infer", "--intra_op_threads=7", out)
    assert not (tmp_path / "x.json").exists()


def test_hf_worker_errors_name_the_request(reference_python, tmp_path):
    from bench.finetune_suite import HFWorker

    with pytest.raises(
        ValueError, match=r"--reference_python=.*: no such interpreter.*reference-env"
    ):
        HFWorker(tmp_path / "python", tmp_path / "log")
    with HFWorker(reference_python, tmp_path / "worker.log") as worker:
        assert worker.request("versions")["torch"].startswith("2.")
        with pytest.raises(RuntimeError, match="HF worker, 'train_steps': KeyError"):
            worker.request("train_steps")  # nothing to train yet
        with pytest.raises(RuntimeError, match="precision: expected float32 or bfloat16"):
            worker.request(
                "train", config={}, batch={}, precision="float16", steps_per_call=1, seed=0
            )
        worker.process.kill()  # the worker dies: the next request says so, with its log
        worker.process.wait(timeout=60)
        with pytest.raises(RuntimeError, match="HF worker exited during 'versions'"):
            worker.request("versions")


def test_hf_worker_imports_only_the_reference_environments_packages(reference_script_imports):
    from pathlib import Path

    # Besides torch, transformers and numpy, only bench.rss (standard library only) of ours.
    bench_dir = Path(run.__file__).parent
    for script in ("hf_worker.py", "rss.py"):
        imported = reference_script_imports(bench_dir / script, allow={"bench"})
        assert imported <= {
            "__future__",
            "bench",
            "ctypes",
            "json",
            "numpy",
            "pathlib",
            "platform",
            "re",
        } | {
            "sys",
            "time",
            "torch",
            "transformers",
        }


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


def test_memory_is_measured_on_an_untimed_call_after_the_timed_rounds(monkeypatch):
    """Resetting the RSS high-water mark (and trimming malloc) before a timed call would time
    the page faults it causes; the memory call comes after the timed rounds, one per candidate."""
    events = []
    monkeypatch.setattr(rss, "reset_peak", lambda: events.append("reset") or 1.0)
    monkeypatch.setattr(rss, "peak_mb", lambda: events.append("peak") or 6.0)
    candidates = {name: (lambda name=name: events.append(name)) for name in ("a", "b")}
    samples = timing.alternate(candidates, rounds=2, warmup=1, measure_memory=True)
    assert events == ["a", "b"] * 3 + ["reset", "a", "peak", "reset", "b", "peak"]
    for sample in samples.values():
        assert len(sample.seconds) == 2
        assert (sample.step_memory_mb, sample.peak_memory_mb) == ([5.0], [6.0])


def test_cpu_info_reads_family_model_and_vector_flags_of_the_first_processor(tmp_path):
    processor = (
        "processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 {extra}\n"
    )
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        processor.format(n=0, extra="") + "\n" + processor.format(n=1, extra="amx_bf16")
    )
    assert timing.cpu_info(str(cpuinfo)) == {
        "cpu": "AMD EPYC",
        "cpu_family": "26",
        "cpu_model": "2",
        "cpu_flags": ["avx2", "avx512f", "avx512_bf16"],
    }
    assert timing.cpu_info(str(tmp_path / "absent")) == {"cpu": "unknown"}
