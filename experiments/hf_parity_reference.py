r"""HF transformers' side of the training parity run (experiments/hf_parity.py starts it).

`BertForSequenceClassification` loaded from the HF folder our side wrote (our encoder and our
freshly initialised classifier head), dropout off, trained on the batches our tokenizer made
(`batches.npz`), in their order, one optimizer step per batch, the way HF fine-tunes:
`torch.optim.AdamW` over two parameter groups (HF `Trainer`'s: no weight decay on biases and
LayerNorm weights), `transformers.get_linear_schedule_with_warmup`, and
`torch.nn.utils.clip_grad_norm_` to 1.0 before each step. It writes `reference_losses.json`
(per step: the loss before the update, the learning rate the step used, the gradients' global
norm before clipping) and `reference_weights.npz` (every parameter after the last step, by its
HF name) into `--output_dir`.

Where our recipe's defaults differ from HF's, a flag selects ours here too, so both sides can run
either recipe:

- `--epsilon` (HF's 1e-8; ours 1e-6);
- `--noepsilon_after_bias_correction`: Keras' placement of epsilon (added to the uncorrected
  `sqrt(v)`), by giving torch's AdamW `epsilon / sqrt(1 - beta2^t)` at step `t`, which is the
  same update;
- `--nodecay_from_warmup_end`: google-research's decay `1 - step / T` after warmup instead of
  `(T - step) / (T - warmup)`;
- `--weight_decay_exclusions=none`: decay every parameter (one parameter group).

google-research's Adam without bias correction has no flag here: torch's AdamW always corrects.

It runs in the reference environment, never in .venv: it imports no project package and no
TensorFlow, only torch, transformers, absl and numpy.

    make reference-env && .venv-ref/bin/python -m experiments.hf_parity_reference \
        --model_dir=<output_dir>/initial_hf --batches=<output_dir>/batches.npz \
        --output_dir=<output_dir> --num_warmup_steps=20
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import numpy as np
from absl import app, flags

from experiments import HF_PARITY_LOSSES_FILE, HF_PARITY_WEIGHTS_FILE

FLAGS = flags.FLAGS
BATCH_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels")
# HF Trainer's `get_decay_parameter_names`: every parameter but biases and LayerNorm weights.
NO_DECAY = ("bias", "LayerNorm.weight")
BETAS = (0.9, 0.999)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string(
        "model_dir", None, "HF BertForSequenceClassification folder.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "batches",
        None,
        "npz: input_ids, attention_mask, token_type_ids [steps, batch, seq]; labels [steps, batch].",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_dir", None, "Where the two result files go.", flag_values=flag_values
    )
    flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate.", flag_values=flag_values)
    flags.DEFINE_integer(
        "num_warmup_steps", 0, "Linear warmup steps from 0.", flag_values=flag_values
    )
    flags.DEFINE_float(
        "weight_decay", 0.01, "Decoupled weight decay (AdamW).", flag_values=flag_values
    )
    flags.DEFINE_float(
        "clip_norm", 1.0, "Global gradient norm clip (0: none).", flag_values=flag_values
    )
    flags.DEFINE_float("epsilon", 1e-8, "Adam epsilon (HF's 1e-8).", flag_values=flag_values)
    flags.DEFINE_bool(
        "epsilon_after_bias_correction",
        True,
        "torch's placement of epsilon; --no...: Keras' (added to the uncorrected sqrt(v)).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "decay_from_warmup_end",
        True,
        "HF's decay (T - step) / (T - warmup); --no...: google-research's 1 - step / T.",
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "weight_decay_exclusions",
        "bert",
        ["bert", "none"],
        "bert: no decay on biases and LayerNorm weights (HF Trainer, google-research); "
        "none: decay every parameter.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "threads", 0, "torch CPU threads (0: torch's default).", flag_values=flag_values
    )
    for name in ("model_dir", "batches", "output_dir"):
        flags.mark_flag_as_required(name, flag_values=flag_values)


def make_scheduler(optimizer, num_warmup_steps: int, num_train_steps: int, from_warmup_end: bool):
    """`transformers.get_linear_schedule_with_warmup` itself when `from_warmup_end`, else
    google-research's schedule (ours by default): the same warmup, then `1 - step / T`."""
    import torch
    import transformers

    if from_warmup_end:
        return transformers.get_linear_schedule_with_warmup(
            optimizer, num_warmup_steps, num_train_steps
        )

    def google(step: int) -> float:
        if step < num_warmup_steps:
            return step / num_warmup_steps
        return max(0.0, 1.0 - step / num_train_steps)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, google)


def train(args) -> dict:
    """Trains as the module docstring says; returns the losses file's contents."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # never the hub: everything comes from the folder
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = np.load(args.batches)
    batches = {k: torch.from_numpy(data[k].astype(np.int64)) for k in BATCH_KEYS}
    steps = batches["labels"].shape[0]
    model = transformers.BertForSequenceClassification.from_pretrained(
        args.model_dir,
        dtype=torch.float32,
        attn_implementation="eager",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        classifier_dropout=0.0,
    )
    model.train()  # dropout is 0 everywhere: training mode changes nothing else in BERT
    named = list(model.named_parameters())
    if args.weight_decay_exclusions == "bert":
        decayed = [p for n, p in named if not any(x in n for x in NO_DECAY)]
        kept = [p for n, p in named if any(x in n for x in NO_DECAY)]
        groups = [
            {"params": decayed, "weight_decay": args.weight_decay},
            {"params": kept, "weight_decay": 0.0},
        ]
    else:
        groups = [{"params": [p for _, p in named], "weight_decay": args.weight_decay}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=BETAS, eps=args.epsilon)
    scheduler = make_scheduler(optimizer, args.num_warmup_steps, steps, args.decay_from_warmup_end)
    params = [p for _, p in named]
    losses, rates, norms = [], [], []
    for step in range(steps):
        if not args.epsilon_after_bias_correction:
            # Keras: lr*sqrt(bc2)/bc1 * m/(sqrt(v)+eps) == lr/bc1 * m/(sqrt(v/bc2) + eps/sqrt(bc2))
            for group in optimizer.param_groups:
                group["eps"] = args.epsilon / (1 - BETAS[1] ** (step + 1)) ** 0.5
        optimizer.zero_grad(set_to_none=True)
        batch = {k: v[step] for k, v in batches.items()}
        loss = model(**batch).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.clip_norm) if args.clip_norm else None
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        norms.append(float(norm) if norm is not None else None)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    np.savez(
        output_dir / HF_PARITY_WEIGHTS_FILE,
        **{n: p.detach().numpy() for n, p in model.named_parameters()},
    )
    return {
        "loss": losses,
        "learning_rate": rates,
        "grad_norm": norms,
        "num_decayed_parameters": len(groups[0]["params"]),
        "num_parameters": len(named),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str]) -> None:
    del argv
    result = train(FLAGS)
    path = Path(FLAGS.output_dir) / HF_PARITY_LOSSES_FILE
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(path)


if __name__ == "__main__":
    define_flags()
    app.run(main)
