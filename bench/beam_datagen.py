r"""Beam `create_pretraining_data`: DirectRunner with 1 vs 2 worker processes, same records.

    python -m bench.beam_datagen --out=bench/results/beam_datagen.json
    python -m bench.beam_datagen --repeat=2 --dupe_factor=10 --rounds=2

The corpus is the Wikipedia sample (106 articles) plus the Lee background corpus (300 news
documents), written `--repeat` times over `--num_files` files in BERT's text format. Each round
runs the pipeline with `--direct_num_workers=1`, then with 2 (alternating, so that a load
change on a shared machine hits both alike); the single-process path runs once as the
reference for the record set. Every run's records are compared with the single-process ones
(as sorted record digests). Writes `--out` (JSON: machine, load, corpus size, every wall time,
medians, the 2-vs-1 speedup, and the CPU seconds of each run, this process and its worker
processes together) and prints a summary. Wall times include the Beam workers' start (each
imports TensorFlow), which a small corpus does not amortise. On a machine shared with other jobs
the wall-time ratio also depends on how much CPU they leave; the CPU seconds show the work done.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from absl import flags, logging

import bench  # noqa: F401  (quiets TensorFlow's C++ logs before its import)
from bench import data
from bert_tf import fileio, flags_util

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    def define(kind, name, default, help_):
        getattr(flags, f"DEFINE_{kind}")(name, default, help_, flag_values=flag_values)

    define("string", "out", None, "Write the results here (JSON); default: print only.")
    define("integer", "repeat", 1, "Copies of the corpus (each copy's documents are new ones).")
    define("integer", "num_files", 8, "Input files the corpus is spread over.")
    define("integer", "dupe_factor", 5, "create_pretraining_data --dupe_factor.")
    define("integer", "max_seq_length", 128, "create_pretraining_data --max_seq_length.")
    define("integer", "max_predictions_per_seq", 20, "--max_predictions_per_seq.")
    define("integer", "rounds", 2, "Rounds of (1 worker, 2 workers).")
    define("integer", "num_output_shards", 4, "Output shards of the Beam runs.")
    define("string", "work_dir", None, "Scratch folder (default: a temp folder, removed).")


def write_corpus(folder: Path, repeat: int, num_files: int) -> dict:
    """Wikipedia + Lee documents, `repeat` times, round-robin over `num_files` text files."""
    from bert_tf.data import corpora, fetch

    documents = list(corpora.wikipedia_documents(fetch.path("gensim", "enwiki-shortened.xml.bz2")))
    documents += list(corpora.lee_documents(fetch.path("gensim", "lee_background.cor")))
    documents = documents * repeat
    for i in range(num_files):
        corpora.write_documents(documents[i::num_files], folder / f"corpus-{i:02d}.txt")
    return {
        "documents": len(documents),
        "sentences": sum(len(d) for d in documents),
        "characters": sum(len(s) for d in documents for s in d),
        "files": num_files,
    }


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (Beam's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def record_digests(paths: list[str]) -> list[str]:
    """Sorted SHA-1 digests of every record in `paths` (compares record sets cheaply)."""
    import tensorflow as tf

    return sorted(
        hashlib.sha1(r).hexdigest() for r in tf.data.TFRecordDataset(paths).as_numpy_iterator()
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    from bert_tf.tasks import pretraining
    from bert_tf.tasks.pretraining import beam as pretraining_beam

    work = Path(FLAGS.work_dir or tempfile.mkdtemp(prefix="beam_datagen-"))
    work.mkdir(parents=True, exist_ok=True)
    options = {
        "dupe_factor": FLAGS.dupe_factor,
        "max_seq_length": FLAGS.max_seq_length,
        "max_predictions_per_seq": FLAGS.max_predictions_per_seq,
    }
    try:
        corpus_dir = work / "corpus"
        corpus_dir.mkdir(exist_ok=True)
        corpus = write_corpus(corpus_dir, FLAGS.repeat, FLAGS.num_files)
        logging.info("corpus: %s", corpus)
        inputs = str(corpus_dir / "corpus-*.txt")
        vocab = data.vocab_file()

        start, cpu = time.perf_counter(), cpu_seconds()
        single = str(work / "single.tfrecord")
        count = pretraining.create_pretraining_data(inputs, single, vocab, **options)
        single_s = time.perf_counter() - start
        single_cpu_s = cpu_seconds() - cpu
        reference = record_digests([single])
        logging.info("single process: %d records in %.1f s", count, single_s)

        seconds: dict[str, list[float]] = {"1": [], "2": []}
        cpu_s: dict[str, list[float]] = {"1": [], "2": []}
        loads = [os.getloadavg()[0]]
        for round_ in range(FLAGS.rounds):
            for workers in ("1", "2"):
                prefix = work / f"beam-{workers}-{round_}" / "train.tfrecord"
                args = [
                    "--runner=DirectRunner",
                    "--direct_running_mode=multi_processing",
                    f"--direct_num_workers={workers}",
                ]
                start, cpu = time.perf_counter(), cpu_seconds()
                written = pretraining_beam.create_pretraining_data(
                    inputs,
                    str(prefix),
                    vocab,
                    pipeline_args=args,
                    num_output_shards=FLAGS.num_output_shards,
                    **options,
                )
                seconds[workers].append(time.perf_counter() - start)
                cpu_s[workers].append(cpu_seconds() - cpu)
                loads.append(os.getloadavg()[0])
                same = record_digests(sorted(glob.glob(f"{prefix}-*"))) == reference
                if written != count or not same:
                    raise RuntimeError(
                        f"{workers} worker(s), round {round_}: {written} records "
                        f"(single process: {count}), same record set: {same}"
                    )
                logging.info(
                    "round %d, %s worker(s): %.1f s (%.1f CPU s)",
                    round_,
                    workers,
                    seconds[workers][-1],
                    cpu_s[workers][-1],
                )
                shutil.rmtree(prefix.parent)
    finally:
        if not FLAGS.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    medians = {k: float(np.median(v)) for k, v in seconds.items()}
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_1min": loads,
        "corpus": corpus,
        "options": options,
        "records": count,
        "single_process_s": single_s,
        "single_process_cpu_s": single_cpu_s,
        "beam_direct_runner_s": seconds,
        "beam_direct_runner_cpu_s": cpu_s,
        "median_s": medians,
        "speedup_2_vs_1": medians["1"] / medians["2"],
        "same_records_as_single_process": True,
    }
    text = json.dumps(results, indent=1)
    print(text)
    if FLAGS.out:
        out = Path(FLAGS.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        fileio.atomic_write_text(out, text + "\n")


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
