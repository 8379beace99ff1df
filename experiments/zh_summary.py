r"""Summarises stage `zh` of experiments/run_all.sh: dev accuracy of (a) pretrained + fine-tuned
vs (b) from scratch per learning rate and seed, and (c) TF-IDF; JSON and a PNG beside it.

Reads `<zh_dir>/finetune_{pretrained,scratch}_lr<lr>_seed<seed>/eval_results.txt` (written by
`run_classifier --do_eval`) and `<zh_dir>/tfidf.json` (`experiments.baselines`).

    python -m experiments.zh_summary --zh_dir=runs/experiments/zh \
        --output_file=runs/experiments/zh/summary.json
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from absl import app, flags

from experiments import read_eval_results, report, save_figure

FLAGS = flags.FLAGS
RUN_NAME = re.compile(r"finetune_(pretrained|scratch)_lr([0-9.e-]+)_seed(\d+)$")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string("zh_dir", None, "Stage zh's output folder.", flag_values=flag_values)
    flags.DEFINE_string("output_file", None, "Where the JSON goes.", flag_values=flag_values)
    flags.mark_flags_as_required(["zh_dir", "output_file"], flag_values=flag_values)


def eval_accuracy(path: Path) -> float:
    """`eval_accuracy` of an `eval_results.txt`."""
    results = read_eval_results(path)
    if "eval_accuracy" not in results:
        raise ValueError(f"{path}: no 'eval_accuracy = ...' line")
    return results["eval_accuracy"]


def summarize(zh_dir: Path) -> dict:
    """Accuracies by learning rate, init and seed; per-lr mean/min/max and the paired (a) - (b)."""
    runs: dict[str, dict[str, dict[int, float]]] = {}
    for results in sorted(zh_dir.glob("finetune_*/eval_results.txt")):
        match = RUN_NAME.match(results.parent.name)
        if match:
            init, lr, seed = match.groups()
            runs.setdefault(lr, {}).setdefault(init, {})[int(seed)] = eval_accuracy(results)
    if not runs:
        raise ValueError(f"{zh_dir}: no finetune_<init>_lr<lr>_seed<n>/eval_results.txt")
    by_lr = {}
    for lr, inits in sorted(runs.items(), key=lambda item: float(item[0])):
        row = {}
        for init, seeds in sorted(inits.items()):
            values = list(seeds.values())
            row[init] = {
                "by_seed": seeds,
                "mean": float(np.mean(values)),
                "min": min(values),
                "max": max(values),
            }
        paired = sorted(set(inits.get("pretrained", {})) & set(inits.get("scratch", {})))
        row["pretrained_minus_scratch"] = {
            seed: inits["pretrained"][seed] - inits["scratch"][seed] for seed in paired
        }
        by_lr[lr] = row
    tfidf = zh_dir / "tfidf.json"
    return {
        "dev_accuracy_by_learning_rate": by_lr,
        "tfidf_accuracy": (
            float(json.loads(tfidf.read_text())["eval_accuracy"]) if tfidf.exists() else None
        ),
    }


def plot(summary: dict, path: Path) -> None:
    """Grouped bars (mean over seeds) with each seed as a dot; TF-IDF as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    rows = summary["dev_accuracy_by_learning_rate"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = {"pretrained": "(a) pretrained + fine-tuned", "scratch": "(b) from scratch"}
    for offset, (init, label) in zip((-0.2, 0.2), labels.items(), strict=True):
        xs = [i + offset for i, row in enumerate(rows.values()) if init in row]
        results = [row[init] for row in rows.values() if init in row]
        ax.bar(xs, [r["mean"] for r in results], width=0.38, label=label, alpha=0.7)
        for x, r in zip(xs, results, strict=True):
            ax.scatter([x] * len(r["by_seed"]), list(r["by_seed"].values()), color="k", s=10)
    if summary["tfidf_accuracy"] is not None:
        ax.axhline(summary["tfidf_accuracy"], color="gray", ls="--", label="(c) TF-IDF + LR")
    ax.set_xticks(range(len(rows)), [f"lr {lr}" for lr in rows])
    ax.set_ylabel("dev accuracy (1,000 sentences)")
    ax.set_ylim(0.5, 1.0)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
    plt.close(fig)


def main(argv: list[str]) -> None:
    del argv
    summary = summarize(Path(FLAGS.zh_dir))
    report(summary, FLAGS.output_file)
    plot(summary, Path(FLAGS.output_file).with_suffix(".png"))


if __name__ == "__main__":
    define_flags()
    app.run(main)
