r"""The measured inputs of docs/scaling.md: step time and MFU of BERT-base, input pipeline rate.

    python -m bench.scaling_inputs --out=bench/results/scaling_inputs.json
    python -m bench.scaling_inputs --presets=base,large --seq_lengths=128,512 --batch_size=8

For each preset and sequence length: `Trainer`'s compiled pretraining step (what `run_pretraining`
runs; float32, XLA on) on a synthetic full-length batch, the median of `--rounds` timed calls after
a warm-up, its model FLOPs (`bench.train_suite.model_flops_per_step`) and the model-FLOPs
utilisation against the best `tf.matmul` rate measured in the same process. Then the input side:
records per second that `bert_tf.tasks.pretraining.pretraining_dataset` delivers (read, parse,
shuffle, batch) with static masks and with dynamic re-masking, on records made by
`create_pretraining_data` from the Lee corpus. Writes `--out` (JSON) and prints it.

Every rate is given per wall second and per CPU second of this process (all its threads): on a
machine shared with other jobs the wall rates depend on the CPU they leave, while the MFU per CPU
second (model FLOPs per CPU second over matmul FLOPs per CPU second) is what the code does with
the CPU it gets.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from absl import flags, logging

import bench  # noqa: F401  (quiets TensorFlow's C++ logs before its import)
from bert_tf import flags_util

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    def define(kind, name, default, help_):
        getattr(flags, f"DEFINE_{kind}")(name, default, help_, flag_values=flag_values)

    define("string", "out", None, "Write the results here (JSON); default: print only.")
    define("list", "presets", ["base"], "Model presets to time.")
    define("list", "seq_lengths", ["128"], "Sequence lengths to time.")
    define("integer", "batch_size", 8, "Sequences per step.")
    define("integer", "rounds", 3, "Timed calls per case (after one warm-up call).")
    define("integer", "steps_per_call", 1, "Optimizer steps per timed call.")
    define("integer", "input_batches", 200, "Batches read per input-pipeline measurement.")


def step_times(
    presets: list[str], seq_lengths: list[int], batch_size: int, peak: dict[str, float]
) -> list[dict]:
    """One row per (preset, sequence length); MFU against the matmul `peak` (see main)."""
    import numpy as np

    from bench import train_suite

    rows = []
    for preset in presets:
        for seq_length in seq_lengths:
            case = train_suite.Case(preset, "float32", seq_length, batch_size)
            with tempfile.TemporaryDirectory(prefix="scaling-") as workdir:
                step = train_suite.ours_step(
                    case, train_suite.synthetic_batch(case), FLAGS.steps_per_call, True, workdir
                )
                step()  # trace + XLA compile
                seconds, cpu_seconds = [], []
                for _ in range(FLAGS.rounds):
                    start, cpu = time.perf_counter(), time.process_time()
                    step()
                    seconds.append((time.perf_counter() - start) / FLAGS.steps_per_call)
                    cpu_seconds.append((time.process_time() - cpu) / FLAGS.steps_per_call)
            flops = train_suite.model_flops_per_step(case)
            median, median_cpu = float(np.median(seconds)), float(np.median(cpu_seconds))
            rows.append(
                {
                    "preset": preset,
                    "seq_length": seq_length,
                    "batch_size": batch_size,
                    "step_s": seconds,
                    "median_step_s": median,
                    "step_cpu_s": cpu_seconds,
                    "median_step_cpu_s": median_cpu,
                    "model_flops_per_step": flops,
                    "model_flops_per_s": flops / median,
                    "tokens_per_s": batch_size * seq_length / median,
                    "mfu_vs_matmul_peak": flops / median / peak["flops_per_s"],
                    "mfu_per_cpu_second": flops / median_cpu / peak["flops_per_cpu_s"],
                }
            )
            logging.info("%s S%d: %.2f s/step", preset, seq_length, median)
    return rows


def input_rates(batches: int) -> dict:
    """Records/s of the training input pipeline, static and dynamic masking."""
    from bert_tf.data import corpora, fetch
    from bert_tf.tasks import pretraining
    from bert_tf.tasks.pretraining import create_pretraining_data
    from bert_tf.text.masking import MaskedLmMasker
    from bert_tf.text.tokenization import load_vocab

    vocab_file = fetch.path("minilm", "vocab.txt")
    with tempfile.TemporaryDirectory(prefix="scaling-input-") as folder:
        corpus = Path(folder) / "lee.txt"
        corpora.write_documents(
            corpora.lee_documents(fetch.path("gensim", "lee_background.cor")), corpus
        )
        records = str(Path(folder) / "train.tfrecord")
        count = create_pretraining_data(str(corpus), records, vocab_file, dupe_factor=2)
        masker = MaskedLmMasker.from_vocab(load_vocab(vocab_file), max_predictions_per_seq=20)
        rates = {"records": count, "batch_size": 32}
        for name, with_masker in (("static", None), ("dynamic", masker)):
            data = pretraining.pretraining_dataset(
                records, 128, 20, 32, training=True, seed=1, masker=with_masker
            )
            iterator = iter(data)
            next(iterator)  # builds the pipeline and fills the shuffle buffer
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(batches):
                next(iterator)
            rates[f"{name}_records_per_s"] = batches * 32 / (time.perf_counter() - start)
            rates[f"{name}_records_per_cpu_s"] = batches * 32 / (time.process_time() - cpu)
            logging.info("input, %s masking: %.0f records/s", name, rates[f"{name}_records_per_s"])
    return rates


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}")
    from bench import report, timing

    load_before = os.getloadavg()[0]
    size, repeats = 2048, 5
    cpu = time.process_time()
    peak = {"flops_per_s": timing.matmul_peak_flops("float32", size, repeats)}
    # matmul_peak_flops makes one untimed call, then `repeats` timed ones.
    peak["flops_per_cpu_s"] = (1 + repeats) * 2.0 * size**3 / (time.process_time() - cpu)
    steps = step_times(FLAGS.presets, [int(s) for s in FLAGS.seq_lengths], FLAGS.batch_size, peak)
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": timing.machine(),
        "load_average_1m_before": load_before,
        "matmul_peak_float32": peak,
        "steps": steps,
        "input": input_rates(FLAGS.input_batches),
    }
    print(json.dumps(results, indent=1))
    if FLAGS.out:
        report.write_json(Path(FLAGS.out), results)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
