r"""Speed and memory of bert-tfx, side by side with what users would pick instead.

    python -m bench.run --suite=all --out=bench/results/2026-11-29.json
    python -m bench.run --suite=train --preset=tiny,mini --full_presets=tiny,mini
    python -m bench.run --suite=infer,serve --infer_preset=base

Suites (each runs ours and the reference alternately in this process, A B A B ..., discards a
warm-up round and reports the median and the min..max spread):
- `train`: pretraining step throughput and peak memory, ours (`bert_tf.training.Trainer`) vs
  keras-nlp (`BertBackbone` + masked-LM/NSP heads, `model.fit`'s compiled step); XLA on/off and
  mixed precision for `--full_presets`; model-FLOPs utilisation against a `tf.matmul` peak
  measured in the same run (`bench.train_suite`);
- `scaling`: our training step time vs sequence length and vs layers, each sweep's points timed
  alternately (`bench.train_suite.scaling`);
- `infer`: raw strings -> encoder outputs through our TF Serving export vs a keras-nlp export,
  batch-1 latency and batch throughput, and our export through the local model server over gRPC
  (`bench.infer_suite`);
- `tokenize`: our tensorflow-text WordPiece vs HF `tokenizers`, batched and one by one, with id
  parity (`bench.tokenize_suite`);
- `serve`: the local model server under 1/4/16 concurrent gRPC clients, batching off vs on
  (`bench.serve_suite`);
- `pipeline`: the local classify pipeline (README command, per Beam mode) beside the scripts doing
  the same training, evaluation and export, wall and CPU seconds per component, and the model
  server's time to ready beside a bare SavedModel load (`bench.pipeline_suite`);
- `finetune`: fine-tuning step throughput and peak memory, ours (`run_classifier`'s step) vs HF
  transformers on PyTorch (`bench.hf_worker` in `make reference-env`'s .venv-ref), and raw text ->
  pooled output, our TF Serving export vs HF's tokenizer + model (`bench.finetune_suite`).

Writes `--out` (JSON: the machine; per suite its flags, seconds, load average and measurements;
the goals) and one PNG per suite beside it (`<name>_<suite>.png`), and prints the table. The
defaults took about 80 minutes on a loaded 2-core CPU, 61 of them in the train suite
(XLA-compiling `base` alone ~10), before the pipeline suite (~30 minutes more at its defaults:
10,000 reviews train for a while); `--preset=tiny,mini` or one suite at a time with `--merge`
is quicker. On a GPU pass larger settings (see README "Benchmarks").
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import time
from pathlib import Path

from absl import flags, logging

import bench  # noqa: F401  (quiets TensorFlow's C++ logs before its import)
from bench import pipeline_suite
from bench.hf_reference import DEFAULT_REFERENCE_PYTHON
from bert_tf import flags_util, threads
from bert_tf.modeling.configs import PRESETS

FLAGS = flags.FLAGS
# Suite -> (module, function); imported only when the suite runs (TensorFlow, keras-nlp, ...).
SUITE_FUNCTIONS = {
    "train": ("bench.train_suite", "run"),
    "scaling": ("bench.train_suite", "scaling"),
    "infer": ("bench.infer_suite", "run"),
    "tokenize": ("bench.tokenize_suite", "run"),
    "serve": ("bench.serve_suite", "run"),
    "finetune": ("bench.finetune_suite", "run"),
    "pipeline": ("bench.pipeline_suite", "run"),
}
SUITES = tuple(SUITE_FUNCTIONS)
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    def define(kind, name, default, help_, **bounds):
        getattr(flags, f"DEFINE_{kind}")(name, default, help_, flag_values=flag_values, **bounds)

    define("list", "suite", ["all"], f"Suites to run: all or any of {', '.join(SUITES)}.")
    define(
        "string", "out", None, "Results JSON (default bench/results/<date>.json); PNGs beside it."
    )
    define(
        "bool",
        "merge",
        False,
        "Keep the other suites already in --out (run suites separately into one file).",
    )
    define(
        "integer",
        "intra_op_threads",
        0,
        "All suites: threads one TensorFlow op may use in this process, the infer suite's model "
        "server and HF's worker (0: TensorFlow's default, all cores).",
        lower_bound=0,
    )
    define(
        "integer",
        "inter_op_threads",
        0,
        "All suites: threads running independent TensorFlow ops in this process and the infer "
        "suite's model server (0: TensorFlow's default).",
        lower_bound=0,
    )
    # train
    define("list", "preset", ["tiny", "mini", "small", "base"], "Train: presets of the table.")
    define(
        "list",
        "full_presets",
        ["tiny"],
        "Train: presets also run with XLA off and with mixed precision (bfloat16 on CPU, "
        "float16 on GPU); those not in --preset are ignored.",
    )
    define(
        "list",
        "train_rounds",
        ["tiny:3", "mini:3", "small:2", "base:1"],
        "Train: timed rounds per preset (preset:N), after one warm-up round.",
    )
    define(
        "list",
        "steps_per_call",
        ["tiny:2", "mini:1", "small:1", "base:1"],
        "Train: optimizer steps per timed call (preset:N), Trainer's steps_per_loop and Keras' "
        "steps_per_execution.",
    )
    define(
        "integer",
        "train_seq_length",
        128,
        "Train and scaling: sequence length of the train table and of the layer sweep.",
        lower_bound=8,
    )
    define(
        "integer",
        "train_batch_size",
        32,
        "Train and scaling: batch size of every training step.",
        lower_bound=1,
    )
    define(
        "integer",
        "matmul_size",
        0,
        "Train: side of the square matmul measuring the peak (0: 2048 on CPU, 8192 on GPU).",
        lower_bound=0,
    )
    define("string", "scaling_preset", "tiny", "Scaling: preset of both sweeps.")
    define(
        "list",
        "scaling_seq_lengths",
        ["64", "128", "256", "512"],
        "Scaling: sequence lengths (empty: no sequence-length sweep).",
    )
    define(
        "list",
        "scaling_layers",
        ["1", "2", "4", "8"],
        "Scaling: layer counts, at --train_seq_length (empty: no layer sweep).",
    )
    define("integer", "scaling_rounds", 3, "Scaling: timed rounds per point.", lower_bound=1)
    define("bool", "scaling_reference", False, "Scaling: also time keras-nlp at every point.")
    # infer
    define("string", "infer_preset", "mini", "Infer: encoder size.")
    define(
        "integer",
        "seq_length",
        128,
        "Infer and serve: sequence length of the exported encoder.",
        lower_bound=8,
    )
    define(
        "integer",
        "infer_batch_size",
        32,
        "Infer: batch size of the throughput measurement.",
        lower_bound=1,
    )
    define(
        "integer",
        "latency_calls",
        20,
        "Infer: batch-1 calls per candidate and round.",
        lower_bound=1,
    )
    define("integer", "latency_rounds", 5, "Infer: timed rounds of batch-1 calls.", lower_bound=1)
    define(
        "integer", "throughput_calls", 2, "Infer: batches per candidate and round.", lower_bound=1
    )
    define("integer", "throughput_rounds", 3, "Infer: timed rounds of batches.", lower_bound=1)
    define("bool", "infer_server", True, "Infer: also measure ours through the model server.")
    # tokenize
    define(
        "integer",
        "tokenize_sentences",
        0,
        "Tokenize: sentences to tokenize (0: the whole Wikipedia sample, ~18k).",
        lower_bound=0,
    )
    define(
        "integer",
        "one_by_one_sentences",
        1000,
        "Tokenize: sentences tokenized one call each.",
        lower_bound=1,
    )
    define("integer", "tokenize_batch_size", 256, "Tokenize: sentences per batch.", lower_bound=1)
    define("integer", "tokenize_rounds", 3, "Tokenize: timed rounds.", lower_bound=1)
    # serve
    define("string", "serve_preset", "tiny", "Serve: encoder size.")
    define("list", "serve_clients", ["1", "4", "16"], "Serve: concurrent gRPC client counts.")
    define("float", "serve_duration", 4.0, "Serve: seconds of load per run.", lower_bound=0.1)
    define("integer", "serve_rounds", 2, "Serve: timed rounds per client count.", lower_bound=1)
    define(
        "string",
        "batching_parameters_file",
        None,
        "Serve: BatchingParameters of the batching server "
        "(default serving/configs/batching_parameters.txt).",
    )
    # finetune
    define(
        "list",
        "finetune_models",
        ["minilm", "base"],
        "Finetune: minilm (all-MiniLM-L6-v2's shape) and/or presets; random init.",
    )
    define("list", "finetune_seq_lengths", ["64", "128"], "Finetune: sequence lengths.")
    define(
        "list",
        "finetune_precisions",
        ["float32", "bfloat16"],
        "Finetune: float32 and/or bfloat16 (each library's mixed precision).",
    )
    define("integer", "finetune_batch_size", 32, "Finetune: batch size.", lower_bound=1)
    define("integer", "finetune_rounds", 3, "Finetune: timed rounds per case.", lower_bound=1)
    define(
        "integer", "finetune_steps_per_call", 1, "Finetune: steps per timed call.", lower_bound=1
    )
    define("bool", "finetune_xla", False, "Finetune: also time ours with XLA (--use_xla).")
    define(
        "integer",
        "finetune_infer_seq_length",
        128,
        "Finetune: sequence length of the raw-text inference comparison.",
        lower_bound=3,
    )
    define(
        "integer", "finetune_latency_calls", 50, "Finetune: batch-1 calls per round.", lower_bound=1
    )
    define(
        "string",
        "reference_python",
        None,
        "Finetune and infer: the reference environment's python (default .venv-ref/bin/python, "
        "made by `make reference-env`); infer leaves HF transformers out (with a warning) when "
        "there is none.",
    )
    pipeline_suite.define_flags(define)


def _per_preset(flag: str, values: list[str], presets: list[str]) -> dict[str, int]:
    """Parses `preset:N` items; every preset of `presets` must have one."""
    parsed = {}
    for item in values:
        name, sep, number = item.partition(":")
        if not sep or not number.isdigit() or int(number) < 1:
            raise ValueError(f"--{flag}: expected items preset:N with N >= 1, got {item!r}")
        parsed[name] = int(number)
    missing = [p for p in presets if p not in parsed]
    if missing:
        raise ValueError(f"--{flag}: no value for preset(s) {missing}; got {values}")
    return parsed


def _ints(flag: str, values: list[str]) -> list[int]:
    try:
        numbers = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"--{flag}: expected integers, got {values}") from None
    if any(n < 1 for n in numbers):
        raise ValueError(f"--{flag}: expected positive integers, got {values}")
    return numbers


def _presets(flag: str, names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise ValueError(f"--{flag}: unknown preset(s) {unknown}; expected {', '.join(PRESETS)}")
    return names


def _finetune_models(names: list[str]) -> list[str]:
    unknown = [n for n in names if n != "minilm" and n not in PRESETS]
    if unknown or not names:
        raise ValueError(
            f"--finetune_models: expected minilm or presets ({', '.join(PRESETS)}), got {names}"
        )
    return names


def _choices(flag: str, values: list[str], allowed: tuple[str, ...]) -> list[str]:
    if not values or any(v not in allowed for v in values):
        raise ValueError(f"--{flag}: expected any of {', '.join(allowed)}, got {values}")
    return values


def _existing_file(flag: str, path: str | None) -> str | None:
    if path and not os.path.isfile(path):
        raise ValueError(f"--{flag}={path}: no such file")
    return path


def _infer_reference_python(path: str | None) -> str | None:
    """The infer suite's HF side: --reference_python, else .venv-ref's when it exists."""
    if path:
        return _existing_file("reference_python", path)
    if DEFAULT_REFERENCE_PYTHON.is_file():
        return str(DEFAULT_REFERENCE_PYTHON)
    logging.warning(
        "infer: no HF transformers side: no %s (make reference-env)", DEFAULT_REFERENCE_PYTHON
    )
    return None


def suite_arguments(args: flags.FlagValues) -> dict[str, dict]:
    """The keyword arguments of each selected suite's function (`SUITE_FUNCTIONS`), in order.

    Parses every flag of the selected suites before any runs, so that a bad one fails at once
    (ValueError naming it) instead of after an hour of other suites.
    """
    suites = list(SUITES) if args.suite == ["all"] else args.suite
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise ValueError(f"--suite: expected all or any of {', '.join(SUITES)}, got {args.suite}")
    arguments = {
        "train": lambda: {
            "presets": _presets("preset", args.preset),
            "full_presets": _presets("full_presets", args.full_presets),
            "rounds": _per_preset("train_rounds", args.train_rounds, args.preset),
            "steps_per_call": _per_preset("steps_per_call", args.steps_per_call, args.preset),
            "seq_length": args.train_seq_length,
            "batch_size": args.train_batch_size,
            "matmul_size": args.matmul_size or None,
        },
        "scaling": lambda: {
            "preset": _presets("scaling_preset", [args.scaling_preset])[0],
            "seq_lengths": _ints("scaling_seq_lengths", args.scaling_seq_lengths),
            "layers": _ints("scaling_layers", args.scaling_layers),
            "rounds": args.scaling_rounds,
            "seq_length": args.train_seq_length,
            "batch_size": args.train_batch_size,
            "with_reference": args.scaling_reference,
        },
        "infer": lambda: {
            "preset": _presets("infer_preset", [args.infer_preset])[0],
            "seq_length": args.seq_length,
            "batch_size": args.infer_batch_size,
            "latency_calls": args.latency_calls,
            "latency_rounds": args.latency_rounds,
            "throughput_calls": args.throughput_calls,
            "throughput_rounds": args.throughput_rounds,
            "with_server": args.infer_server,
            "reference_python": _infer_reference_python(args.reference_python),
        },
        "tokenize": lambda: {
            "num_sentences": args.tokenize_sentences or None,
            "one_by_one_sentences": args.one_by_one_sentences,
            "batch_size": args.tokenize_batch_size,
            "rounds": args.tokenize_rounds,
        },
        "serve": lambda: {
            "preset": _presets("serve_preset", [args.serve_preset])[0],
            "seq_length": args.seq_length,
            "client_counts": _ints("serve_clients", args.serve_clients),
            "duration": args.serve_duration,
            "rounds": args.serve_rounds,
            "batching_parameters_file": _existing_file(
                "batching_parameters_file", args.batching_parameters_file
            ),
        },
        "finetune": lambda: {
            "models": _finetune_models(args.finetune_models),
            "seq_lengths": _ints("finetune_seq_lengths", args.finetune_seq_lengths),
            "precisions": _choices(
                "finetune_precisions", args.finetune_precisions, ("float32", "bfloat16")
            ),
            "rounds": args.finetune_rounds,
            "steps_per_call": args.finetune_steps_per_call,
            "batch_size": args.finetune_batch_size,
            "xla": args.finetune_xla,
            "infer_seq_length": args.finetune_infer_seq_length,
            "latency_calls": args.finetune_latency_calls,
            "throughput_calls": args.throughput_calls,
            "infer_rounds": args.throughput_rounds,
            "reference_python": _existing_file("reference_python", args.reference_python),
        },
        "pipeline": lambda: {
            "rows": _ints("pipeline_rows", args.pipeline_rows),
            "documents": _ints("pipeline_documents", args.pipeline_documents),
            "pretrain_steps": args.pipeline_pretrain_steps,
            "beam_modes": _choices(
                "pipeline_beam_modes", args.pipeline_beam_modes, tuple(pipeline_suite.BEAM_MODES)
            ),
            "epochs": args.pipeline_epochs,
            "seq_length": args.pipeline_seq_length,
            "batch_size": args.pipeline_batch_size,
            "learning_rate": args.pipeline_learning_rate,
            "server_rounds": args.server_rounds,
            "work_dir": args.pipeline_work_dir,
        },
    }
    return {suite: arguments[suite]() for suite in suites}


def run(args: flags.FlagValues = FLAGS) -> dict:
    """Runs the suites; writes the JSON and plots; returns the results."""
    from bench import plots, report, timing

    arguments = suite_arguments(args)
    threads.configure(
        args.intra_op_threads, args.inter_op_threads, ("intra_op_threads", "inter_op_threads")
    )
    today = datetime.date.today().isoformat()
    out = Path(args.out or RESULTS_DIR / f"{today}.json")
    flag_values = {f.name: f.value for f in args.get_key_flags_for_module(sys.modules[__name__])}
    # Per suite: with --merge the suites of one file may come from runs under different loads.
    results = {"suites": {}, "flags": {}, "seconds": {}, "load_average_1m": {}}
    for suite, kwargs in arguments.items():
        logging.info("suite %s ...", suite)
        start, load = time.perf_counter(), os.getloadavg()[0]
        module, function = SUITE_FUNCTIONS[suite]
        results["suites"][suite] = getattr(importlib.import_module(module), function)(**kwargs)
        results["flags"][suite] = flag_values
        results["seconds"][suite] = time.perf_counter() - start
        results["load_average_1m"][suite] = {"start": load, "end": os.getloadavg()[0]}
        logging.info("suite %s done in %.0f s", suite, results["seconds"][suite])
    if args.merge and out.exists():
        # Read now, not at the start: another run may have written its suites meanwhile.
        earlier = json.loads(out.read_text())
        for key in ("suites", "flags", "seconds", "load_average_1m"):
            results[key] = {**earlier.get(key, {}), **results[key]}
    results = {"date": today, "machine": timing.machine(), **results}
    results["goals"] = report.goals(results)
    report.write_json(out, results)
    written = plots.plot(results, out.with_suffix(""))
    print(report.table(results))
    print(f"\nwrote {out}" + "".join(f"\n      {p}" for p in written))
    return results


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    try:
        run(FLAGS)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
