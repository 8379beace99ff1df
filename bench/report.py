"""The results table, the issue's goals (met or not) and the JSON of a benchmark run (its plots:
`bench.plots`)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import pipeline_report
from bert_tf import fileio

TRAIN_RATIO_GOAL = 1.0
BASE_MFU_GOAL = 0.5
INFER_RATIO_GOAL = 1.2
INFER_LATENCY_GOAL = 0.9  # ours / keras-nlp, batch-1 p50 (the served case)
SERVER_OVERHEAD_GOAL = 0.10
TOKENIZE_RATIO_GOAL = 1.0
BATCHING_RATIO_GOAL = 2.0
FINETUNE_RATIO_GOAL = 1.2  # ours / HF transformers (PyTorch): fine-tune step and batch inference


def _spread(stats: dict) -> str:
    return f"±{stats['spread_pct']:.0f}%" if stats["n"] > 1 else "(1 run)"


def train_pairs(rows: list[dict]) -> list[dict]:
    """Ours (XLA on and off) against the reference of the same preset, precision and shape."""

    def key(r):
        return (r["preset"], r["precision"], r["num_layers"], r["seq_length"])

    reference = {key(r): r for r in rows if r["impl"] != "ours"}
    pairs = []
    for row in rows:
        ref = reference.get(key(row))
        if row["impl"] == "ours" and ref:
            pairs.append(
                {
                    "preset": row["preset"],
                    "precision": row["precision"],
                    "xla": row["xla"],
                    "ratio": row["sequences_per_s"] / ref["sequences_per_s"],
                }
            )
    return pairs


def goals(results: dict) -> list[dict]:
    """Each goal of the issue with its measured value; `met` is None when not measured."""
    suites = results["suites"]
    out = []

    def add(goal: str, value: float | None, met: bool | None, detail: str = "") -> None:
        out.append({"goal": goal, "value": value, "met": met, "detail": detail})

    train = suites.get("train")
    if train:
        pairs = [p for p in train_pairs(train["rows"]) if p["xla"]]
        worst = min(pairs, key=lambda p: p["ratio"]) if pairs else None
        add(
            f"training >= {TRAIN_RATIO_GOAL}x keras-nlp at every preset and precision (XLA on)",
            worst["ratio"] if worst else None,
            worst["ratio"] >= TRAIN_RATIO_GOAL if worst else None,
            f"lowest: {worst['preset']} {worst['precision']}" if worst else "",
        )
        base = [r for r in train["rows"] if r["impl"] == "ours" and r["preset"] == "base"]
        best = max(base, key=lambda r: r["mfu"]) if base else None
        add(
            f"best base configuration >= {BASE_MFU_GOAL:.0%} of the measured matmul peak",
            best["mfu"] if best else None,
            best["mfu"] >= BASE_MFU_GOAL if best else None,
            f"{best['precision']}, XLA {'on' if best['xla'] else 'off'}"
            if best
            else "base not run",
        )
    infer = suites.get("infer")
    if infer:
        add(
            f"inference >= {INFER_RATIO_GOAL}x keras-nlp at batch {infer['batch_size']}",
            infer["ratio_throughput"],
            infer["ratio_throughput"] >= INFER_RATIO_GOAL,
        )
        add(
            f"batch-1 p50 <= {INFER_LATENCY_GOAL}x keras-nlp's",
            1 / infer["ratio_latency_p50"],
            1 / infer["ratio_latency_p50"] <= INFER_LATENCY_GOAL,
        )
        if "ratio_latency_p50_vs_hf" in infer:
            all_cores = infer.get("ratio_latency_p50_vs_hf_all_cores")
            add(
                "batch-1 p50 <= HF transformers' (as many threads per op)",
                1 / infer["ratio_latency_p50_vs_hf"],
                infer["ratio_latency_p50_vs_hf"] >= 1.0,
                f"vs HF on every core: {1 / all_cores:.2f}" if all_cores else "",
            )
        overhead = infer.get("server_overhead")
        add(
            f"server overhead <= {SERVER_OVERHEAD_GOAL:.0%} of in-process latency at batch 1 (p50)",
            overhead,
            None if overhead is None else overhead <= SERVER_OVERHEAD_GOAL,
            "client, gRPC and server together",
        )
        handler = infer.get("server_handler_overhead")
        add(
            f"server's own time per request <= {SERVER_OVERHEAD_GOAL:.0%} of the model run "
            "(batch 1)",
            handler,
            None if handler is None else handler <= SERVER_OVERHEAD_GOAL,
            "request latency minus runtime latency, from its metrics",
        )
    tokenize = suites.get("tokenize")
    if tokenize:
        ratio = tokenize["batched"]["ratio"]
        add(
            f"tokenization >= {TOKENIZE_RATIO_GOAL}x HF tokenizers, batched",
            ratio,
            ratio >= TOKENIZE_RATIO_GOAL,
        )
        add(
            "tokenization ids identical to HF tokenizers",
            tokenize["mismatched_sentences"],
            tokenize["ids_identical"],
            f"{tokenize['mismatched_sentences']} of {tokenize['num_sentences']} sentences differ",
        )
    serve = suites.get("serve")
    if serve:
        most = max(serve["clients"], key=int)
        ratio = serve["clients"][most]["ratio"]
        add(
            f"batching: {most} clients reach >= {BATCHING_RATIO_GOAL}x the unbatched throughput",
            ratio,
            ratio >= BATCHING_RATIO_GOAL,
        )
    finetune = suites.get("finetune")
    if finetune:
        ours = [r for r in finetune["rows"] if r["impl"] == "ours"]
        worst = min(ours, key=lambda r: r["ratio_vs_hf"]) if ours else None
        add(
            f"fine-tuning >= {FINETUNE_RATIO_GOAL}x HF transformers at every size (our default)",
            worst["ratio_vs_hf"] if worst else None,
            worst["ratio_vs_hf"] >= FINETUNE_RATIO_GOAL if worst else None,
            f"lowest: {worst['model']} seq {worst['seq_length']} {worst['precision']}"
            if worst
            else "",
        )
        for infer in finetune["inference"]:
            mode = f"batch_{infer['batch_size']}"
            add(
                f"raw-text inference >= {FINETUNE_RATIO_GOAL}x HF transformers at batch "
                f"{infer['batch_size']} ({infer['model']})",
                infer[mode]["ratio"],
                infer[mode]["ratio"] >= FINETUNE_RATIO_GOAL,
            )
    if "pipeline" in suites:
        pipeline_report.goals(suites["pipeline"], add)
    return out


def threads_label(infer: dict) -> str:
    """The infer suite's intra-op pool size (results from before it was recorded: default)."""
    return str(infer.get("threads", {}).get("tensorflow_intra_op") or "default")


def table(results: dict) -> str:
    """The printed report: one block per suite, then the goals."""
    machine = results["machine"]
    cpu = machine["cpu"]
    if machine.get("cpu_family"):  # results files before 2026-12-05 lack it
        flags = ", ".join(machine["cpu_flags"]) or "no AVX2"
        cpu += f" (family {machine['cpu_family']} model {machine['cpu_model']}; {flags})"
    lines = [f"bert-tfx benchmarks, {results['date']}, {cpu}"]
    suites = results["suites"]
    if "train" in suites:
        train = suites["train"]
        peaks = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in train["matmul_peak_flops"].items())
        lines += [
            "",
            f"TRAIN (pretraining step, MLM+NSP, AdamW); matmul peak GFLOP/s: {peaks}; "
            f"memory: {train['memory_kind']}",
            f"{'preset':<7}{'precision':<16}{'impl':<10}{'xla':<5}{'seq/s':>9}{'spread':>8}"
            f"{'tokens/s':>10}{'step MB':>9}{'peak MB':>9}{'MFU':>7}{'vs ref':>8}",
        ]
        ratios = {
            (p["preset"], p["precision"], p["xla"]): p["ratio"] for p in train_pairs(train["rows"])
        }
        for r in train["rows"]:
            ratio = (
                ratios.get((r["preset"], r["precision"], r["xla"])) if r["impl"] == "ours" else None
            )
            lines.append(
                f"{r['preset']:<7}{r['precision']:<16}{r['impl']:<10}{'on' if r['xla'] else 'off':<5}"
                f"{r['sequences_per_s']:>9.2f}{_spread(r['step_time_s']):>8}"
                f"{r['tokens_per_s']:>10.0f}{_mb(r['step_memory_mb']):>9}{_mb(r['peak_memory_mb']):>9}"
                f"{r['mfu']:>7.1%}{f'{ratio:.2f}x' if ratio else '':>8}"
            )
    if "scaling" in suites:
        scaling = suites["scaling"]
        lines += [
            "",
            f"SCALING ({scaling['preset']}, float32, XLA on, batch {scaling['batch_size']}): "
            "step time (s); the points of a sweep are timed alternately",
            f"{'sweep':<12}{'layers':<8}{'seq':<6}{'ours':>9}{'keras_nlp':>11}{'ratio':>8}",
        ]
        for sweep in ("seq_length", "num_layers"):
            points: dict[tuple, dict] = {}
            for r in scaling[sweep]:
                points.setdefault((r["num_layers"], r["seq_length"]), {})[r["impl"]] = r
            for (layers, seq), impls in sorted(points.items()):
                ours, ref = impls.get("ours"), impls.get("keras_nlp")
                t_ours = ours["step_time_s"]["median"] if ours else None
                t_ref = ref["step_time_s"]["median"] if ref else None
                ratio = f"{t_ref / t_ours:.2f}x" if t_ours and t_ref else "-"
                lines.append(
                    f"{sweep:<12}{layers:<8}{seq:<6}{_num(t_ours):>9}{_num(t_ref):>11}{ratio:>8}"
                )
    if "infer" in suites:
        infer = suites["infer"]
        lines += [
            "",
            f"INFER ({infer['preset']}, seq {infer['seq_length']}, raw strings in, SavedModel, "
            f"TensorFlow intra-op threads: {threads_label(infer)})",
            f"{'impl':<28}{'p50 ms':>9}{'p99 ms':>9}{'seq/s @' + str(infer['batch_size']):>12}"
            f"{'spread':>8}",
        ]
        for name, lat in infer["latency_batch_1"].items():
            thr = infer["throughput"].get(name)
            rate = f"{thr['sequences_per_s']['median']:.1f}" if thr else "-"
            spread = _spread(thr["sequences_per_s"]) if thr else ""
            lines.append(
                f"{name:<28}{lat['p50_ms']:>9.2f}{lat['p99_ms']:>9.2f}{rate:>12}{spread:>8}"
            )
        lines.append(
            f"ours vs keras_nlp: throughput {infer['ratio_throughput']:.2f}x, "
            f"p50 latency {infer['ratio_latency_p50']:.2f}x faster"
            + (
                f"; vs HF transformers: throughput {infer['ratio_throughput_vs_hf']:.2f}x, "
                f"p50 latency {infer['ratio_latency_p50_vs_hf']:.2f}x faster"
                if "ratio_throughput_vs_hf" in infer
                else ""
            )
            + (
                f"; server overhead at batch 1: {infer['server_overhead']:+.0%}, of which "
                f"{infer['round_trip_overhead']:.0%} is a gRPC round trip without a model"
                if "server_overhead" in infer
                else ""
            )
            + (
                f" and {infer['server_handler_overhead']:.0%} the server's own time"
                if "server_handler_overhead" in infer
                else ""
            )
        )
    if "tokenize" in suites:
        tok = suites["tokenize"]
        lines += [
            "",
            f"TOKENIZE ({tok['num_sentences']} Wikipedia sentences; one-by-one: first "
            f"{tok['one_by_one_sentences']}; batches of {tok['batch_size']})",
            f"{'mode':<12}{'impl':<15}{'sent/s':>10}{'spread':>8}{'tokens/s':>11}",
        ]
        for mode in ("batched", "one_by_one"):
            for name in ("ours", "hf_tokenizers"):
                r = tok[mode][name]
                lines.append(
                    f"{mode:<12}{name:<15}{r['sentences_per_s']['median']:>10.0f}"
                    f"{_spread(r['sentences_per_s']):>8}{r['tokens_per_s']['median']:>11.0f}"
                )
            lines.append(f"{'':<12}ours / hf: {tok[mode]['ratio']:.2f}x")
        lines.append(
            f"ids identical: {tok['ids_identical']} "
            f"({tok['mismatched_sentences']} sentences differ)"
        )
    if "serve" in suites:
        serve = suites["serve"]
        lines += [
            "",
            f"SERVE ({serve['preset']} encoder, 1 sentence per Predict, closed loop, "
            f"{serve['duration_s']:g} s per run)",
            f"{'clients':<9}{'batching':<10}{'req/s':>9}{'spread':>8}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'failed':>8}",
        ]
        for count, r in serve["clients"].items():
            for mode in ("batching off", "batching on"):
                m = r[mode]
                lines.append(
                    f"{count:<9}{mode.split()[1]:<10}{m['requests_per_s']['median']:>9.1f}"
                    f"{_spread(m['requests_per_s']):>8}{m['latency']['p50_ms']:>9.1f}"
                    f"{m['latency']['p99_ms']:>9.1f}{m['failed_requests']:>8}"
                )
            lines.append(f"{'':<9}on / off: {r['ratio']:.2f}x")
    if "finetune" in suites:
        ft = suites["finetune"]
        versions = ft["hf_versions"]
        lines += [
            "",
            f"FINETUNE (classifier step, AdamW, dropout on; HF transformers "
            f"{versions['transformers']}, torch {versions['torch']}; threads "
            f"{ft['threads']}; memory: {ft['memory_kind']})",
            f"{'model':<8}{'seq':>5}{'precision':>10}  {'impl':<17}{'seq/s':>8}{'spread':>8}"
            f"{'step MB':>9}{'peak MB':>9}{'vs HF':>7}",
        ]
        for r in ft["rows"]:
            ratio = f"{r['ratio_vs_hf']:.2f}x" if "ratio_vs_hf" in r else ""
            lines.append(
                f"{r['model']:<8}{r['seq_length']:>5}{r['precision']:>10}  {r['impl']:<17}"
                f"{r['sequences_per_s']['median']:>8.1f}{_spread(r['sequences_per_s']):>8}"
                f"{_mb(r['step_memory_mb']):>9}{_mb(r['peak_memory_mb']):>9}{ratio:>7}"
            )
        lines += [
            "",
            "RAW-TEXT INFERENCE (ours: TF Serving export, in-graph WordPiece; HF: tokenizer + "
            "model, inference_mode)",
            f"{'model':<8}{'seq':>5}{'batch':>7}  {'impl':<17}{'p50 ms':>8}{'p99 ms':>8}"
            f"{'seq/s':>9}{'spread':>8}{'vs HF':>7}",
        ]
        for infer in ft["inference"]:
            for mode in ("batch_1", f"batch_{infer['batch_size']}"):
                for name in ("ours", "hf_transformers"):
                    m = infer[mode][name]
                    ratio = f"{infer[mode]['ratio']:.2f}x" if name == "ours" else ""
                    lines.append(
                        f"{infer['model']:<8}{infer['seq_length']:>5}"
                        f"{mode.removeprefix('batch_'):>7}  {name:<17}"
                        f"{m['latency']['p50_ms']:>8.1f}{m['latency']['p99_ms']:>8.1f}"
                        f"{m['sequences_per_s']['median']:>9.1f}"
                        f"{_spread(m['sequences_per_s']):>8}{ratio:>7}"
                    )
    if "pipeline" in suites:
        lines += pipeline_report.table_lines(suites["pipeline"])
    lines += ["", "GOALS"]
    for g in results["goals"]:
        status = {True: "MET", False: "NOT MET", None: "not measured"}[g["met"]]
        value = "" if g["value"] is None else f" ({_fmt(g['value'])})"
        detail = f" [{g['detail']}]" if g["detail"] else ""
        lines.append(f"  {status:<13}{g['goal']}{value}{detail}")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def write_json(path: Path, results: dict) -> None:
    """Writes `results` to `path` through a temporary file, so a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fileio.atomic_write_text(path, json.dumps(results, indent=1) + "\n")
