r"""Summarises stage `hf` of experiments/run_all.sh: dev accuracy, ours vs HF transformers.

For every labelled set under `--hf_dir` (`<set>/ours_<optimizer>_seed<n>/eval_results.txt` from
`run_classifier`, `<set>/hf_seed<n>.json` from `experiments/hf_classifier_reference.py`): mean
± standard deviation over the seeds of each implementation and, for each of ours against HF:

- Welch's t-test over the seeds (`scipy.stats.ttest_ind(equal_var=False)`: t and two-sided p),
  which asks whether the two implementations' mean accuracies on this dev set differ by more
  than their seed-to-seed spread explains;
- the verdict of the issue that asked for the comparison (#41): ours within one standard error
  of HF's mean, better, or worse. The standard error is that of an accuracy measured on the
  set's `n` dev examples, sqrt(p (1 - p) / n) at HF's mean p (the standard error of HF's mean
  over seeds, std / sqrt(seeds), is in the JSON too).

Writes `--output_file` (JSON), a PNG beside it, and prints a markdown table.

    python -m experiments.hf_accuracy_summary --hf_dir=runs/experiments/hf \
        --output_file=runs/experiments/hf/summary.json
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
from absl import app, flags
from scipy import stats

from experiments import read_eval_results, save_figure, write_json

FLAGS = flags.FLAGS
HF = "hf"
IMPLEMENTATIONS = {  # key -> label
    "ours_hf": "ours, HF's optimizer (--optimizer_recipe=hf)",
    "ours_google": "ours, our default optimizer (google-research's)",
    HF: "HF transformers (PyTorch)",
}
_RUN = re.compile(r"^(ours_(?:hf|google))_seed(\d+)$|^hf_seed(\d+)\.json$")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string("hf_dir", None, "Stage hf's output folder.", flag_values=flag_values)
    flags.DEFINE_string("output_file", None, "Summary JSON.", flag_values=flag_values)
    for name in ("hf_dir", "output_file"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def collect(set_dir: Path) -> tuple[dict[str, dict[int, float]], int | None]:
    """Accuracy per implementation and seed, and the dev size (from HF's results)."""
    accuracy: dict[str, dict[int, float]] = {name: {} for name in IMPLEMENTATIONS}
    num_dev = None
    for entry in sorted(set_dir.iterdir()):
        match = _RUN.match(entry.name)
        if not match:
            continue
        if match.group(1):
            results = entry / "eval_results.txt"
            if not results.is_file():
                continue  # still training
            accuracy[match.group(1)][int(match.group(2))] = read_eval_results(results)[
                "eval_accuracy"
            ]
        else:
            result = json.loads(entry.read_text(encoding="utf-8"))
            accuracy[HF][int(match.group(3))] = result["eval_accuracy"]
            num_dev = result["num_eval_examples"]
    return accuracy, num_dev


def welch(ours: list[float], hf: list[float]) -> tuple[float | None, float | None]:
    """Welch's t (ours minus HF) and its two-sided p; None where undefined (fewer than two
    seeds on a side, or no spread on either: scipy's NaN, which JSON cannot hold)."""
    if len(ours) < 2 or len(hf) < 2 or (np.ptp(ours) == 0 and np.ptp(hf) == 0):
        return None, None
    result = stats.ttest_ind(ours, hf, equal_var=False)
    t, p = float(result.statistic), float(result.pvalue)
    return (t, p) if math.isfinite(t) and math.isfinite(p) else (None, None)


def verdict(diff: float, standard_error: float) -> str:
    """Ours minus HF against one standard error of HF's mean: #41's acceptance test."""
    if abs(diff) <= standard_error:
        return "within one SE"
    return "better" if diff > 0 else "worse"


def summarise(accuracy: dict[str, dict[int, float]], num_dev: int | None) -> dict:
    rows = {}
    for name, by_seed in accuracy.items():
        values = np.array([by_seed[s] for s in sorted(by_seed)])
        rows[name] = {
            "seeds": sorted(by_seed),
            "accuracy": values.tolist(),
            "mean": float(values.mean()) if len(values) else None,
            "std": float(values.std(ddof=1)) if len(values) > 1 else None,
        }
    out: dict = {"implementations": rows, "num_dev_examples": num_dev}
    hf = rows[HF]
    if hf["mean"] is not None and num_dev:
        p = hf["mean"]
        out["hf_standard_error"] = math.sqrt(p * (1 - p) / num_dev)
        out["hf_seed_standard_error"] = (
            hf["std"] / math.sqrt(len(hf["seeds"])) if hf["std"] is not None else None
        )
        for name in ("ours_hf", "ours_google"):
            row = rows[name]
            if row["mean"] is not None:
                diff = row["mean"] - p
                row["minus_hf"] = diff
                row["within_one_standard_error"] = abs(diff) <= out["hf_standard_error"]
                row["verdict"] = verdict(diff, out["hf_standard_error"])
                row["welch_t"], row["welch_p"] = welch(row["accuracy"], hf["accuracy"])
    return out


def comparison(row: dict) -> str:
    """'+0.002 (t 0.61, p 0.56; within one SE)': one of ours against HF, for tables and plots."""
    if row.get("minus_hf") is None:
        return "–"
    welch_text = (
        f"t {row['welch_t']:+.2f}, p {row['welch_p']:.2f}; "
        if row.get("welch_t") is not None
        else ""
    )
    return f"{row['minus_hf']:+.3f} ({welch_text}{row['verdict']})"


def plot(summary: dict, path: Path) -> None:
    """Per set: each implementation's seeds (dots) and mean ± std (bar), HF's mean ± one
    standard error (grey band), and ours (HF's optimizer) minus HF with Welch's t and p."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    sets = list(summary)
    width = 0.8 / len(IMPLEMENTATIONS)
    fig, ax = plt.subplots(figsize=(3.4 * len(sets) + 1.5, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, label) in enumerate(IMPLEMENTATIONS.items()):
        for i, s in enumerate(sets):
            row = summary[s]["implementations"][name]
            if row["mean"] is None:
                continue
            x = i + (k - 1) * width
            jitter = np.linspace(-0.15, 0.15, len(row["accuracy"])) * width
            ax.scatter(x + jitter, row["accuracy"], color=colors[k], s=14, alpha=0.6, zorder=3)
            ax.errorbar(
                x,
                row["mean"],
                yerr=row["std"] or 0.0,
                fmt="_",
                markersize=22,
                capsize=4,
                color=colors[k],
                label=label if i == 0 else None,
                zorder=4,
            )
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, s in enumerate(sets):
        se, hf_mean = summary[s].get("hf_standard_error"), summary[s]["implementations"][HF]["mean"]
        if se is None:
            continue
        ax.fill_between(
            [i - 0.45, i + 0.45], hf_mean - se, hf_mean + se, color="0.6", alpha=0.2, zorder=1
        )
        ax.text(
            i,
            0.98,
            "ours (HF's optimizer) − HF:\n" + comparison(summary[s]["implementations"]["ours_hf"]),
            transform=top,
            ha="center",
            va="top",
            fontsize=7,
        )
    values = [
        a for s in sets for r in summary[s]["implementations"].values() for a in r["accuracy"]
    ]
    low, high = min(values, default=0.5), max(values, default=1.0)
    ax.set_ylim(max(0.0, low - 0.03), min(1.0, high + 0.25 * (high - low) + 0.03))
    ax.set_xticks(
        np.arange(len(sets)), [f"{s} ({summary[s]['num_dev_examples']} dev)" for s in sets]
    )
    ax.set_ylabel("dev accuracy (dots: seeds; bars: mean ± std)")
    ax.set_title(
        "Fine-tuning accuracy: ours vs HF transformers, same recipe\n"
        "(grey band: HF's mean ± one standard error of a dev-set accuracy; Welch's t-test)",
        fontsize=9,
    )
    fig.legend(fontsize=7, loc="lower center", ncol=len(IMPLEMENTATIONS), frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))  # room for the legend below the axes
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def table(summary: dict) -> str:
    def cell(row: dict) -> str:
        if row["mean"] is None:
            return "–"
        std = f" ± {row['std']:.3f}" if row["std"] is not None else ""
        return f"{row['mean']:.3f}{std} (n={len(row['seeds'])})"

    lines = [
        "| set (dev size) | "
        + " | ".join(IMPLEMENTATIONS.values())
        + " | HF's SE | ours (HF's optimizer) − HF | ours (our default) − HF |",
        "|---|" + "---|" * (len(IMPLEMENTATIONS) + 3),
    ]
    for name, s in summary.items():
        rows = s["implementations"]
        se = s.get("hf_standard_error")
        se_cell = f"{se:.3f}" if se is not None else "–"
        cells = " | ".join(cell(rows[k]) for k in IMPLEMENTATIONS)
        lines.append(
            f"| {name} ({s['num_dev_examples']}) | {cells} | {se_cell} | "
            f"{comparison(rows['ours_hf'])} | {comparison(rows['ours_google'])} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    del argv
    hf_dir = Path(FLAGS.hf_dir)
    sets = sorted(p for p in hf_dir.iterdir() if p.is_dir()) if hf_dir.is_dir() else []
    if not sets:
        raise SystemExit(f"error: --hf_dir={hf_dir}: no set folders (run stage hf first)")
    summary = {p.name: summarise(*collect(p)) for p in sets}
    write_json(summary, FLAGS.output_file)
    plot(summary, Path(FLAGS.output_file).with_suffix(".png"))
    print(table(summary))


if __name__ == "__main__":
    define_flags()
    app.run(main)
