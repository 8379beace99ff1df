r"""HF transformers' side of the accuracy comparison: fine-tune and evaluate as an HF user would.

The same job `python -m bert_tf.run_classifier --task_name=text_classification` does, written
the way HF transformers' users write it (the loop of HF's `run_glue_no_trainer` example, with
`Trainer`'s optimizer): `BertTokenizerFast` on the same vocab, `BertForSequenceClassification`
either from an HF folder (`--model_dir`: pretrained encoder, new head) or randomly initialised
from a google-research `bert_config.json` (`--bert_config_file`: HF's `BertConfig` takes the
same field names), dropout as configured (0.1), `torch.optim.AdamW` over `Trainer`'s two
parameter groups (no weight decay on biases and LayerNorm weights, epsilon 1e-8),
`get_linear_schedule_with_warmup`, `clip_grad_norm_(1.0)`, a shuffle per epoch seeded by
`--seed`. Dev accuracy goes to `--output_file` (JSON) with the run's settings and versions.

It runs in the reference environment, never in .venv: it imports no project package and no
TensorFlow, only torch, transformers, absl and numpy.

    make reference-env && .venv-ref/bin/python -m experiments.hf_classifier_reference \
        --data_dir=runs/experiments/data/en_rt --model_dir=$HOME/.cache/bert_tfx/minilm \
        --max_seq_length=64 --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=1 \
        --seed=1 --output_file=runs/experiments/hf/en_rt/hf_seed1.json
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
# HF Trainer's `get_decay_parameter_names`: every parameter but biases and LayerNorm weights.
NO_DECAY = ("bias", "LayerNorm.weight")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string(
        "data_dir",
        None,
        "Folder with train.tsv and dev.tsv (text<TAB>label, header).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_dir",
        None,
        "HF BERT folder (config.json, weights, vocab.txt).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "bert_config_file",
        None,
        "google-research bert_config.json: random initialisation.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "vocab_file",
        None,
        "WordPiece vocab (default: <model_dir>/vocab.txt).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "do_lower_case", True, "Lower-case and strip accents.", flag_values=flag_values
    )
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per sequence.", flag_values=flag_values)
    flags.DEFINE_integer("train_batch_size", 32, "Training batch.", flag_values=flag_values)
    flags.DEFINE_integer("eval_batch_size", 64, "Evaluation batch.", flag_values=flag_values)
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.", flag_values=flag_values)
    flags.DEFINE_float("num_train_epochs", 3.0, "Training epochs.", flag_values=flag_values)
    flags.DEFINE_float(
        "warmup_proportion", 0.1, "Fraction of steps with linear warmup.", flag_values=flag_values
    )
    flags.DEFINE_float("weight_decay", 0.01, "AdamW decoupled decay.", flag_values=flag_values)
    flags.DEFINE_float("epsilon", 1e-8, "Adam epsilon (HF's default).", flag_values=flag_values)
    flags.DEFINE_float("clip_norm", 1.0, "Global gradient-norm clip.", flag_values=flag_values)
    flags.DEFINE_integer(
        "seed", 1, "Seed of initialisation, shuffling, dropout.", flag_values=flag_values
    )
    flags.DEFINE_integer("threads", 0, "torch CPU threads (0: default).", flag_values=flag_values)
    flags.DEFINE_integer("log_steps", 50, "Steps between progress lines.", flag_values=flag_values)
    flags.DEFINE_string("output_file", None, "Result JSON.", flag_values=flag_values)
    for name in ("data_dir", "output_file"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def read_tsv(path: Path) -> tuple[list[str], list[str]]:
    """Texts and labels of a `text<TAB>label` file with a header; a bad row is an error."""
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        rows = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header != ["text", "label"]:
            raise ValueError(f"{path}: expected the header text<TAB>label, got {header}")
        for line, row in enumerate(rows, 2):
            if len(row) != 2:
                raise ValueError(f"{path}:{line}: expected 2 tab-separated fields, got {len(row)}")
            texts.append(row[0])
            labels.append(row[1])
    return texts, labels


def run(args) -> dict:
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the hub: everything comes from local files
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if bool(args.model_dir) == bool(args.bert_config_file):
        raise SystemExit("error: give exactly one of --model_dir and --bert_config_file")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data_dir = Path(args.data_dir)
    train_texts, train_labels = read_tsv(data_dir / "train.tsv")
    dev_texts, dev_labels = read_tsv(data_dir / "dev.tsv")
    label_list = sorted(set(train_labels))
    unknown = sorted(set(dev_labels) - set(label_list))
    if unknown:
        raise SystemExit(f"error: {data_dir}/dev.tsv: labels {unknown} are not in train.tsv")
    label_id = {label: i for i, label in enumerate(label_list)}

    vocab_file = args.vocab_file or os.path.join(args.model_dir, "vocab.txt")
    # transformers 5 takes the file as `vocab`; `vocab_file=` would be silently ignored and
    # leave a 5-token vocabulary that maps every word to [UNK].
    tokenizer = transformers.BertTokenizerFast(vocab=vocab_file, do_lower_case=args.do_lower_case)
    lines = len(Path(vocab_file).read_bytes().splitlines())  # not str: U+001C etc. are tokens
    if len(tokenizer) != lines:
        raise SystemExit(
            f"error: {vocab_file}: {lines} tokens, the HF tokenizer has {len(tokenizer)}"
        )
    if args.model_dir:
        model = transformers.BertForSequenceClassification.from_pretrained(
            args.model_dir, num_labels=len(label_list), dtype=torch.float32
        )
    else:
        config = json.loads(Path(args.bert_config_file).read_text(encoding="utf-8"))
        model = transformers.BertForSequenceClassification(
            transformers.BertConfig(**config, num_labels=len(label_list))
        )

    def encode(texts: list[str]) -> dict:
        return tokenizer(
            texts,
            truncation=True,
            max_length=args.max_seq_length,
            padding=True,
            return_tensors="pt",
        )

    named = list(model.named_parameters())
    groups = [
        {
            "params": [p for n, p in named if not any(x in n for x in NO_DECAY)],
            "weight_decay": args.weight_decay,
        },
        {"params": [p for n, p in named if any(x in n for x in NO_DECAY)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, eps=args.epsilon)
    steps_per_epoch = math.ceil(len(train_texts) / args.train_batch_size)
    num_steps = int(steps_per_epoch * args.num_train_epochs)
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, int(num_steps * args.warmup_proportion), num_steps
    )
    targets = torch.tensor([label_id[label] for label in train_labels])
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    start, step, losses = time.monotonic(), 0, []
    while step < num_steps:
        order = torch.randperm(len(train_texts), generator=generator).tolist()
        for i in range(0, len(order), args.train_batch_size):
            if step == num_steps:
                break
            index = order[i : i + args.train_batch_size]
            batch = encode([train_texts[j] for j in index])
            loss = model(**batch, labels=targets[index]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            if step % args.log_steps == 0 or step == num_steps:
                elapsed = time.monotonic() - start
                rate = step * args.train_batch_size / elapsed
                eta = (num_steps - step) * args.train_batch_size / rate
                print(
                    f"step {step}/{num_steps} loss {np.mean(losses[-args.log_steps :]):.4f} "
                    f"{rate:.1f} examples/s ETA {eta:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    train_seconds = time.monotonic() - start

    model.train(False)  # dropout off for evaluation
    correct, eval_losses = 0, []
    dev_targets = torch.tensor([label_id[label] for label in dev_labels])
    with torch.inference_mode():
        for i in range(0, len(dev_texts), args.eval_batch_size):
            out = model(
                **encode(dev_texts[i : i + args.eval_batch_size]),
                labels=dev_targets[i : i + args.eval_batch_size],
            )
            eval_losses.append(out.loss.item() * len(out.logits))
            correct += int((out.logits.argmax(-1) == dev_targets[i : i + len(out.logits)]).sum())
    return {
        "eval_accuracy": correct / len(dev_texts),
        "eval_loss": sum(eval_losses) / len(dev_texts),
        "num_eval_examples": len(dev_texts),
        "num_train_examples": len(train_texts),
        "num_train_steps": num_steps,
        "final_train_loss": float(np.mean(losses[-args.log_steps :])),
        "train_seconds": train_seconds,
        "settings": {
            k: getattr(args, k)
            for k in (
                "data_dir",
                "model_dir",
                "bert_config_file",
                "max_seq_length",
                "train_batch_size",
                "learning_rate",
                "num_train_epochs",
                "warmup_proportion",
                "weight_decay",
                "epsilon",
                "clip_norm",
                "seed",
            )
        },
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str]) -> None:
    del argv
    result = run(FLAGS)
    path = Path(FLAGS.output_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"eval_accuracy = {result['eval_accuracy']:.4f} -> {path}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
