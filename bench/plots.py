"""The plots of a benchmark run: one PNG per suite beside its JSON (`bench.report` has the
table and the goals)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench import pipeline_report
from bench.report import threads_label
from bert_tf import fileio


def _save(path: Path, draw: Callable, panels: int) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4))
    draw(axes if panels > 1 else [axes])
    fig.tight_layout()
    try:
        with fileio.atomic_open(path, "wb") as f:
            fig.savefig(f, format="png", dpi=90)
    finally:
        plt.close(fig)


def _bars(ax, labels: list[str], series: dict[str, list[float]], ylabel: str, title: str) -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(labels))], values, width, label=name)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def plot(results: dict, stem: Path) -> list[Path]:
    """One PNG per suite next to the JSON (`<stem>_<suite>.png`); returns their paths."""
    suites = results["suites"]
    written = []

    def out(name: str) -> Path:
        path = stem.with_name(f"{stem.name}_{name}.png")
        written.append(path)
        return path

    if "train" in suites:
        rows = suites["train"]["rows"]
        groups = list(dict.fromkeys((r["preset"], r["precision"]) for r in rows))
        labels = [f"{p}\n{q.replace('mixed_', 'mixed ')}" for p, q in groups]

        def value(impl, xla, key):
            found = {
                (r["preset"], r["precision"]): r[key]
                for r in rows
                if r["impl"] == impl and (impl != "ours" or r["xla"] == xla)
            }
            return [found.get(g) or 0.0 for g in groups]

        series_keys = {
            "ours XLA": ("ours", True),
            "ours no XLA": ("ours", False),
            "keras-nlp": ("keras_nlp", True),
        }

        def draw_train(axes):
            _bars(
                axes[0],
                labels,
                {n: value(i, x, "sequences_per_s") for n, (i, x) in series_keys.items()},
                "sequences/s",
                f"pretraining throughput (seq {rows[0]['seq_length']}, "
                f"batch {rows[0]['batch_size']})",
            )
            _bars(
                axes[1],
                labels,
                {n: value(i, x, "step_memory_mb") for n, (i, x) in series_keys.items()},
                "MB above the pre-step level",
                "peak step memory",
            )

        _save(out("train"), draw_train, 2)
    if "scaling" in suites:
        scaling = suites["scaling"]

        def draw_scaling(axes):
            for ax, sweep, xlabel in (
                (axes[0], "seq_length", "sequence length"),
                (axes[1], "num_layers", "layers"),
            ):
                for impl in ("ours", "keras_nlp"):
                    points = sorted(
                        (r[sweep], r["step_time_s"]["median"])
                        for r in scaling[sweep]
                        if r["impl"] == impl
                    )
                    if points:
                        ax.plot(*zip(*points, strict=True), marker="o", label=impl)
                ax.set_xlabel(xlabel)
                ax.set_ylabel("step time (s)")
                ax.set_title(f"training step time vs {xlabel}")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=8)

        _save(out("scaling"), draw_scaling, 2)
    if "infer" in suites:
        infer = suites["infer"]

        def draw_infer(axes):
            names = list(infer["latency_batch_1"])
            _bars(
                axes[0],
                ["p50", "p99"],
                {
                    n: [
                        infer["latency_batch_1"][n]["p50_ms"],
                        infer["latency_batch_1"][n]["p99_ms"],
                    ]
                    for n in names
                },
                "ms",
                f"latency at batch 1 (raw string in; intra-op threads: {threads_label(infer)})",
            )
            names = list(infer["throughput"])
            _bars(
                axes[1],
                [f"batch {infer['batch_size']}"],
                {n: [infer["throughput"][n]["sequences_per_s"]["median"]] for n in names},
                "sequences/s",
                "throughput",
            )

        _save(out("infer"), draw_infer, 2)
    if "tokenize" in suites:
        tok = suites["tokenize"]

        def draw_tokenize(axes):
            for ax, mode in zip(axes, ("batched", "one_by_one"), strict=True):
                _bars(
                    ax,
                    ["sentences/s"],
                    {
                        n: [tok[mode][n]["sentences_per_s"]["median"]]
                        for n in ("ours", "hf_tokenizers")
                    },
                    "sentences/s",
                    f"tokenization, {mode.replace('_', ' ')}",
                )

        _save(out("tokenize"), draw_tokenize, 2)
    if "serve" in suites:
        serve = suites["serve"]
        counts = sorted(serve["clients"], key=int)

        def draw_serve(axes):
            for mode in ("batching off", "batching on"):
                axes[0].plot(
                    [int(c) for c in counts],
                    [serve["clients"][c][mode]["requests_per_s"]["median"] for c in counts],
                    marker="o",
                    label=mode,
                )
                axes[1].plot(
                    [int(c) for c in counts],
                    [serve["clients"][c][mode]["latency"]["p99_ms"] for c in counts],
                    marker="o",
                    label=mode,
                )
            for ax, ylabel, title in (
                (axes[0], "requests/s", "throughput vs concurrent clients"),
                (axes[1], "p99 latency (ms)", "tail latency vs concurrent clients"),
            ):
                ax.set_xscale("log", base=2)
                ax.set_xticks([int(c) for c in counts], counts)
                ax.set_xlabel("concurrent gRPC clients")
                ax.set_ylabel(ylabel)
                ax.set_title(title)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=8)

        _save(out("serve"), draw_serve, 2)
    if "finetune" in suites:
        ft = suites["finetune"]
        cases = list(
            dict.fromkeys((r["model"], r["seq_length"], r["precision"]) for r in ft["rows"])
        )
        impls = list(dict.fromkeys(r["impl"] for r in ft["rows"]))

        def finetune_value(impl: str, key: str) -> list[float]:
            found = {
                (r["model"], r["seq_length"], r["precision"]): r[key]
                for r in ft["rows"]
                if r["impl"] == impl
            }
            return [found.get(c) or 0.0 for c in cases]

        def draw_finetune(axes):
            labels = [f"{m}\nS{s} {p}" for m, s, p in cases]
            _bars(
                axes[0],
                labels,
                {
                    i: [v["median"] if v else 0.0 for v in finetune_value(i, "sequences_per_s")]
                    for i in impls
                },
                "sequences/s",
                "fine-tuning throughput"
                + (f" (batch {ft['rows'][0]['batch_size']})" if ft["rows"] else ": not run"),
            )
            _bars(
                axes[1],
                labels,
                {i: finetune_value(i, "peak_memory_mb") for i in impls},
                "MB",
                "process RSS high-water (TensorFlow keeps freed memory)",
            )
            labels = [
                f"{i['model']} batch {mode.removeprefix('batch_')}"
                for i in ft["inference"]
                for mode in ("batch_1", f"batch_{i['batch_size']}")
            ]
            _bars(
                axes[2],
                labels,
                {
                    name: [
                        i[mode][name]["sequences_per_s"]["median"]
                        for i in ft["inference"]
                        for mode in ("batch_1", f"batch_{i['batch_size']}")
                    ]
                    for name in ("ours", "hf_transformers")
                },
                "sequences/s",
                "raw text -> pooled output",
            )
            axes[2].set_yscale("log")

        _save(out("finetune"), draw_finetune, 3)
    if "pipeline" in suites:
        pipeline_report.draw(
            suites["pipeline"], lambda draw, panels: _save(out("pipeline"), draw, panels)
        )
    return written
