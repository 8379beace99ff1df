"""The pipeline suite's table lines, goals and plot (`bench.pipeline_suite` measures)."""

from __future__ import annotations

PIPELINE_RATIO_GOAL = 2.0  # pipeline wall <= 2x the scripts' for the same work
OUTSIDE_TRAINING_GOAL_S = 90.0  # everything but the Trainer's training loop, small data
SERVER_READY_RATIO_GOAL = 1.5  # model server ready <= 1.5x a bare load in a fresh process


def goals(result: dict, add) -> None:
    """The suite's goals: `add(goal, value, met, detail)` for each."""
    for case in result["cases"]:
        if case["task"] != "classify":
            continue
        for run in case["runs"]:
            if run.get("beam") != "auto":
                continue
            add(
                f"classify pipeline, {case['size']} rows: <= {PIPELINE_RATIO_GOAL:g}x the "
                "scripts' wall time",
                run["ratio_vs_scripts"],
                run["ratio_vs_scripts"] <= PIPELINE_RATIO_GOAL,
                f"{run['wall_s']:.0f} s vs {case['runs'][0]['wall_s']:.0f} s",
            )
            add(
                f"classify pipeline, {case['size']} rows: all but the training loop <= "
                f"{OUTSIDE_TRAINING_GOAL_S:g} s",
                run["outside_training_s"],
                run["outside_training_s"] <= OUTSIDE_TRAINING_GOAL_S,
                "",
            )
    server = result.get("server")
    if server:
        add(
            f"model server ready <= {SERVER_READY_RATIO_GOAL:g}x a bare load in a fresh process",
            server["ratio"],
            server["ratio"] <= SERVER_READY_RATIO_GOAL,
            f"{server['server']['median']:.1f} s vs {server['bare_load']['median']:.1f} s",
        )


def table_lines(result: dict) -> list[str]:
    lines = [
        "",
        "PIPELINE vs SCRIPTS (wall and CPU seconds; loop: the training loop; outside: the rest;"
        f" classify: MiniLM, {' '.join(result['classify_options'])}; pretrain: tiny from scratch)",
        f"{'task':<9}{'size':>6}  {'path / component':<32}{'wall':>7}{'cpu':>7}{'loop':>7}"
        f"{'outside':>8}{'vs scripts':>11}",
    ]
    for case in result["cases"]:
        for run in case["runs"]:
            lines.append(
                f"{case['task']:<9}{case['size']:>6}  {run['path']:<32}{run['wall_s']:>7.0f}"
                f"{run['cpu_s']:>7.0f}{run['training_loop_s']:>7.0f}"
                f"{run['outside_training_s']:>8.0f}{run['ratio_vs_scripts']:>10.2f}x"
            )
            lines += [
                f"{'':<17}  {part['component']:<30}{part['wall_s']:>7.1f}{part['cpu_s']:>7.1f}"
                for part in run["parts"]
            ]
    server = result.get("server")
    if server:
        lines.append(
            f"model server ready {server['server']['median']:.1f} s (spread "
            f"{server['server']['spread_pct']:.0f}%) vs a bare load in a fresh process "
            f"{server['bare_load']['median']:.1f} s: {server['ratio']:.2f}x"
        )
    return lines


def draw(result: dict, save) -> None:
    """Per task, stacked wall seconds per component of every run (`save(draw_fn, panels)`)."""
    tasks = list(dict.fromkeys(c["task"] for c in result["cases"]))

    def draw_task(ax, task: str) -> None:
        runs = [(c["size"], r) for c in result["cases"] if c["task"] == task for r in c["runs"]]
        names = list(dict.fromkeys(p["component"] for _, r in runs for p in r["parts"]))
        bottoms = [0.0] * len(runs)
        for name in names:
            heights = [
                sum(p["wall_s"] for p in r["parts"] if p["component"] == name) for _, r in runs
            ]
            if max(heights) >= 1:  # a legend of the components that take time
                ax.bar(range(len(runs)), heights, bottom=bottoms, label=name)
                bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        ax.scatter(
            range(len(runs)),
            [r["wall_s"] for _, r in runs],
            color="k",
            marker="_",
            s=400,
            label="whole run (start-up included)",
            zorder=3,
        )
        labels = [f"{size}\n{r['path'].replace(' (', chr(10) + '(')}" for size, r in runs]
        ax.set_xticks(range(len(runs)), labels, fontsize=7)
        ax.set_ylabel("wall seconds")
        ax.set_title(f"{task}: the scripts vs the pipeline, per component")
        ax.legend(fontsize=6, ncol=2)
        ax.grid(axis="y", alpha=0.3)

    def draw_all(axes):
        for ax, task in zip(axes, tasks, strict=True):
            draw_task(ax, task)

    if tasks:
        save(draw_all, len(tasks))
