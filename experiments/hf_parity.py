r"""Step-level training parity with HF transformers: the same start, batches and optimizer
definition give the same loss at every step and the same final weights.

Our side (this program, in .venv):

1. `BertClassifier` on the `--init_checkpoint` encoder (all-MiniLM-L6-v2 by default), dropout
   off, its head drawn with `--seed`; written as an HF folder (`initial_hf/`: config.json,
   model.safetensors with `classifier.weight/bias` in `BertForSequenceClassification` naming,
   vocab.txt) by `bert_tf.checkpoints.save_hf_checkpoint`;
2. gensim's Pang & Lee polarity sentences tokenized by our `BertPreprocessor` into
   `--steps` batches of `--batch_size` x `--seq_length` (one fixed shuffle, then the
   sentences in that order, round and round): `batches.npz`, which both sides read;
3. trained on exactly those batches by our `Trainer` (one step per loop, the loss logged at
   every step) with `create_optimizer` set to the recipe the flags name;
4. HF's side: `experiments/hf_parity_reference.py` in the reference environment (`.venv-ref`,
   `make reference-env`) trains `BertForSequenceClassification` from `initial_hf/` on the same
   batches with `torch.optim.AdamW` (the same decay exclusions), the recipe's schedule
   (`get_linear_schedule_with_warmup` for HF's) and `clip_grad_norm_`;
5. compares the per-step losses (relative difference), the learning rates each step used and
   the final weights (max absolute difference, and the difference of the two updates relative
   to HF's update), and writes `hf_parity.json` and `hf_parity.png` into `--output_dir`.

The recipe flags default to HF's; each has ours (create_optimizer's default) as the other
value, and both sides take it: `--epsilon=1e-6` (HF 1e-8),
`--noepsilon_after_bias_correction` (Keras' placement of epsilon), `--nodecay_from_warmup_end`
(google-research's decay). `--weight_decay_exclusions=none` decays every variable on both sides.
`--show_defaults_effect` then trains our side again with each of our defaults in turn (and with
google-research's Adam, without decay exclusions, with the head drawn as HF's `_init_weights`
would, and from another seed for scale; `--effects` picks some) and reports how far each moves
the loss curve and the update from the main run's, and whether it would still pass the check
against HF's run (`effects` in the JSON, `hf_parity_effects.png`). Our final weights are kept in
`ours_weights.npz`, HF's in `reference_weights.npz` (HF names, both).

The command docs/hf_parity.md's numbers come from; tests/experiments/test_hf_parity.py runs it
with `--steps=20 --batch_size=8 --seq_length=32 --effects=epsilon --check` added:

    make reference-env && .venv/bin/python -m experiments.hf_parity \
        --output_dir=runs/hf_parity --show_defaults_effect
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from absl import flags, logging

from bert_tf import flags_util, options
from bert_tf.options import option
from experiments import HF_PARITY_LOSSES_FILE, HF_PARITY_WEIGHTS_FILE, save_figure

FLAGS = flags.FLAGS
REPO = Path(__file__).resolve().parents[1]
REFERENCE_MODULE = "experiments.hf_parity_reference"
RESULT_FILE = "hf_parity.json"
PLOT_FILE = "hf_parity.png"
EFFECTS_PLOT_FILE = "hf_parity_effects.png"
BATCHES_FILE = "batches.npz"
OURS_WEIGHTS_FILE = "ours_weights.npz"  # HF names, like the reference's reference_weights.npz
INITIAL_DIR = "initial_hf"
NUM_CLASSES = 2
# Our feature names -> HF's argument names, in batches.npz under HF's.
FEATURE_NAMES = {
    "input_word_ids": "input_ids",
    "input_mask": "attention_mask",
    "input_type_ids": "token_type_ids",
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Where google-research's AdamW recipe (create_optimizer's defaults) and HF's differ; the
    field defaults are HF's."""

    epsilon: float = option(1e-8, "Adam epsilon: HF's 1e-8, ours 1e-6", above=0)
    epsilon_after_bias_correction: bool = option(
        True, "torch's (HF's) placement of epsilon; --no...: Keras' (ours)"
    )
    decay_from_warmup_end: bool = option(
        True, "HF's decay (T - step)/(T - warmup); --no...: google-research's 1 - step/T (ours)"
    )
    bias_correction: bool = option(
        True,
        "Adam's bias correction; --no...: google-research's own Adam (ours only: torch's "
        "always corrects, so there is no reference run without it)",
    )
    weight_decay_exclusions: str = option(
        "bert",
        "bert: no decay on LayerNorm and biases (ours and HF's); none: decay every variable",
        choices=("bert", "none"),
    )

    def optimizer_kwargs(self) -> dict:
        """`create_optimizer`'s keyword options for this recipe."""
        from bert_tf.training.optimization import WEIGHT_DECAY_EXCLUDED

        return {
            "epsilon": self.epsilon,
            "epsilon_after_bias_correction": self.epsilon_after_bias_correction,
            "decay_from_warmup_end": self.decay_from_warmup_end,
            "bias_correction": self.bias_correction,
            "weight_decay_exclusions": (
                WEIGHT_DECAY_EXCLUDED if self.weight_decay_exclusions == "bert" else ()
            ),
        }

    def reference_flags(self) -> list[str]:
        """The same recipe as experiments/hf_parity_reference.py's flags."""
        if not self.bias_correction:
            raise ValueError("torch's AdamW always corrects bias: no reference without it")
        no = lambda on: "" if on else "no"  # noqa: E731
        return [
            f"--epsilon={self.epsilon!r}",
            f"--{no(self.epsilon_after_bias_correction)}epsilon_after_bias_correction",
            f"--{no(self.decay_from_warmup_end)}decay_from_warmup_end",
            f"--weight_decay_exclusions={self.weight_decay_exclusions}",
        ]


HF_RECIPE = Recipe()
# create_optimizer's defaults: google-research's epsilon and schedule on Keras' AdamW.
OUR_RECIPE = Recipe(epsilon=1e-6, epsilon_after_bias_correction=False, decay_from_warmup_end=False)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything but the recipe that both sides share."""

    steps: int = option(200, "Optimizer steps", above=0)
    batch_size: int = option(32, "Sentences per step", above=0)
    seq_length: int = option(64, "Tokens per sentence", minimum=3)
    learning_rate: float = option(2e-5, "Peak learning rate", above=0)
    warmup_proportion: float = option(
        0.1, "Warmup steps as a fraction of --steps", minimum=0, maximum=1
    )
    weight_decay: float = option(0.01, "AdamW weight decay", minimum=0)
    clip_norm: float = option(1.0, "Global gradient norm clip", above=0)
    seed: int = option(1, "Head initialisation and batch order")

    @property
    def num_warmup_steps(self) -> int:
        return int(self.steps * self.warmup_proportion)


@dataclasses.dataclass(frozen=True)
class Effect:
    """One --show_defaults_effect run: our side with one difference from the main run."""

    label: str
    about: str
    recipe: Recipe | None = None  # None: the main run's
    head_init: str | None = None  # None: the main run's
    head_seed_offset: int = 0


EFFECTS = {
    "epsilon": Effect(
        "epsilon 1e-6",
        "ours (google-research); HF 1e-8",
        dataclasses.replace(HF_RECIPE, epsilon=1e-6),
    ),
    "epsilon_placement": Effect(
        "epsilon before bias correction",
        "ours (Keras' AdamW: added to the uncorrected sqrt(v)); HF after (torch)",
        dataclasses.replace(HF_RECIPE, epsilon_after_bias_correction=False),
    ),
    "decay": Effect(
        "decay 1 - step/T",
        "ours (google-research); HF (T - step)/(T - warmup)",
        dataclasses.replace(HF_RECIPE, decay_from_warmup_end=False),
    ),
    "our_defaults": Effect(
        "all our defaults", "create_optimizer's defaults: the three above together", OUR_RECIPE
    ),
    "google_adam": Effect(
        "no bias correction",
        "google-research's own Adam (and our three defaults); ours and HF correct",
        dataclasses.replace(OUR_RECIPE, bias_correction=False),
    ),
    "decay_every_variable": Effect(
        "decay on every variable",
        "torch AdamW without parameter groups; ours and HF exclude LayerNorm and biases",
        dataclasses.replace(HF_RECIPE, weight_decay_exclusions="none"),
    ),
    "head_init": Effect(
        "head init normal",
        "HF's _init_weights (normal, std 0.02); ours truncated at 2 std (google-research)",
        head_init="normal",
    ),
    "head_seed": Effect(
        "head seed + 1",
        "another draw of our head: the scale of a seed's effect",
        head_seed_offset=1,
    ),
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`); called only when run as a program."""
    flags.DEFINE_string(
        "init_checkpoint",
        None,
        "Encoder to start from (HF folder or any checkpoint load_pretrained reads, with its "
        "config and vocab beside it); default: all-MiniLM-L6-v2 from the data cache.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "polarity_file",
        None,
        "gensim's pang_lee_polarity.cor; default: the data cache's.",
        flag_values=flag_values,
    )
    flags.DEFINE_string("output_dir", None, "Where everything goes.", flag_values=flag_values)
    options.define_flags(Settings, flag_values)
    options.define_flags(Recipe, flag_values)
    flags.DEFINE_enum(
        "head_init",
        "truncated_normal",
        ["truncated_normal", "normal"],
        "The classifier kernel's draw (std initializer_range): ours truncated at 2 std, or "
        "HF's plain normal. Both sides start from the same drawn values either way.",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "loss_rtol",
        1e-4,
        "Parity holds when every step's |loss - HF's| / HF's is at most this...",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "weight_atol",
        1e-5,
        "... and every final weight within weight_atol + weight_rtol * |HF's| of HF's.",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "weight_rtol",
        1e-5,
        "(See --weight_atol: numpy.allclose's rtol.)",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "show_defaults_effect",
        False,
        "Also train our side with each of our defaults in turn (module docstring).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "effects",
        list(EFFECTS),
        f"The --show_defaults_effect runs, of {list(EFFECTS)}.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "reference_python",
        str(REPO / ".venv-ref" / "bin" / "python"),
        "The reference environment's python (make reference-env).",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        "reference_flag",
        [],
        "An extra flag for the reference side only, after the recipe's (e.g. --epsilon=1e-6 "
        "to see parity fail on a mismatch).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "check",
        False,
        "Exit with status 1 when parity does not hold (the JSON is written either way).",
        flag_values=flag_values,
    )
    flags.mark_flag_as_required("output_dir", flag_values=flag_values)


# --- our side ---------------------------------------------------------------------------------


def build_classifier(init_checkpoint: str, seed: int, head_init: str, seed_offset: int = 0):
    """(BertClassifier with dropout off and the encoder of `init_checkpoint`, its vocab file);
    the head's kernel drawn from `head_init` with `seed + seed_offset`, its bias 0."""
    from bert_tf import checkpoints, model_source, training
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier

    training.set_seed(seed)  # also TF op determinism
    source = model_source.resolve(init_checkpoint)
    config = dataclasses.replace(
        source.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    model = BertClassifier(build_encoder(config), NUM_CLASSES, dropout=0.0)
    checkpoints.load_pretrained(model, init_checkpoint)
    draw_head(model, seed + seed_offset, head_init)
    return model, source.vocab_file


def draw_head(model, seed: int, head_init: str) -> None:
    """Sets the classifier kernel to a fresh draw (std `initializer_range`), the bias to 0."""
    import keras

    std = model.encoder.bert_config.initializer_range
    initializer = (
        keras.initializers.TruncatedNormal(stddev=std, seed=seed)
        if head_init == "truncated_normal"
        else keras.initializers.RandomNormal(stddev=std, seed=seed)
    )
    dense = model.head.dense
    dense.kernel.assign(initializer(dense.kernel.shape))
    dense.bias.assign(np.zeros(dense.bias.shape, "float32"))


def make_batches(
    examples: list[tuple[str, int]], vocab_file: str, settings: Settings
) -> dict[str, np.ndarray]:
    """`settings.steps` batches in HF's names: `[steps, batch, seq]` int32 features (our
    tokenizer's) and `[steps, batch]` labels; the examples in one seeded shuffle, cycled."""
    import tensorflow as tf

    from bert_tf.text.tokenization import BertPreprocessor

    preprocessor = BertPreprocessor(vocab_file, seq_length=settings.seq_length)
    features = preprocessor(tf.constant([text for text, _ in examples]))
    labels = np.array([label for _, label in examples], np.int32)
    order = np.random.default_rng(settings.seed).permutation(len(examples))
    total = settings.steps * settings.batch_size
    picks = order[np.arange(total) % len(examples)]
    shape = (settings.steps, settings.batch_size)
    batches = {
        FEATURE_NAMES[name]: np.asarray(value)[picks].reshape(*shape, settings.seq_length)
        for name, value in features.items()
    }
    batches["labels"] = labels[picks].reshape(shape)
    return batches


def train_ours(
    model, initial: list, batches: dict, settings: Settings, recipe: Recipe, work_dir: Path
) -> dict:
    """Trains `model` from the weights `initial` on `batches` with our Trainer and
    `create_optimizer(**recipe)`; returns per-step losses, the rates used and HF-named weights.

    The Trainer and optimizer every script uses, built as `training.make_trainer` builds them
    but directly, since `make_trainer` takes the optimizer's settings from
    `TrainingLoopOptions`, which has no flags for the recipe options; one step per loop and a log
    entry per step give each step's loss, before its update, as HF's side records it."""
    import tensorflow as tf

    from bert_tf import checkpoints
    from bert_tf.tasks.classification import classification_loss_fn
    from bert_tf.training import LOG_FILE, Trainer
    from bert_tf.training.optimization import create_optimizer

    shutil.rmtree(work_dir, ignore_errors=True)  # a checkpoint there would be resumed
    model.set_weights(initial)
    optimizer = create_optimizer(
        settings.learning_rate,
        settings.steps,
        settings.num_warmup_steps,
        "adamw",
        settings.weight_decay,
        settings.clip_norm,
        **recipe.optimizer_kwargs(),
    )
    first_rate = float(optimizer.learning_rate)
    trainer = Trainer(
        model,
        optimizer,
        classification_loss_fn(NUM_CLASSES),
        work_dir,
        steps_per_loop=1,
        log_steps=1,
        save_checkpoints_steps=settings.steps,
        keep_checkpoint_max=1,
    )
    features = {ours: batches[hf] for ours, hf in FEATURE_NAMES.items()}
    dataset = tf.data.Dataset.from_tensor_slices((features, batches["labels"]))
    start = time.perf_counter()
    trainer.train(dataset, settings.steps)
    seconds = time.perf_counter() - start
    history = json.loads((work_dir / LOG_FILE).read_text())["history"]
    for path in work_dir.glob("ckpt-*"):  # 3x the model's size, and nothing reads them
        path.unlink()
    return {
        "loss": [entry["loss"] for entry in history],
        # Each entry's rate is the next step's (the optimizer's after that step).
        "learning_rate": [first_rate] + [entry["learning_rate"] for entry in history[:-1]],
        "weights": checkpoints.get_hf_weights(model),
        "seconds": seconds,
    }


# --- HF's side --------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """This environment minus what would point the reference's python at .venv."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))
    }


def run_reference(
    python: str,
    model_dir: Path,
    batches_file: Path,
    output_dir: Path,
    settings: Settings,
    recipe: Recipe,
    extra_flags: list[str] = (),
) -> dict:
    """Runs experiments/hf_parity_reference.py; returns its losses file and final weights."""

    command = [
        python,
        "-m",
        REFERENCE_MODULE,
        f"--model_dir={model_dir}",
        f"--batches={batches_file}",
        f"--output_dir={output_dir}",
        f"--learning_rate={settings.learning_rate!r}",
        f"--num_warmup_steps={settings.num_warmup_steps}",
        f"--weight_decay={settings.weight_decay!r}",
        f"--clip_norm={settings.clip_norm!r}",
        *recipe.reference_flags(),
        *extra_flags,
    ]
    logging.info("reference: %s", " ".join(command))
    start = time.perf_counter()
    run = subprocess.run(
        command, cwd=REPO, env=clean_env(), capture_output=True, text=True, check=False
    )
    if run.returncode:
        raise RuntimeError(
            f"{REFERENCE_MODULE} failed ({run.returncode}); is the reference environment there "
            f"(make reference-env)?\n{run.stderr[-3000:]}"
        )
    result = json.loads((output_dir / HF_PARITY_LOSSES_FILE).read_text())
    with np.load(output_dir / HF_PARITY_WEIGHTS_FILE) as weights:
        result["weights"] = {k: weights[k] for k in weights.files}
    result["seconds"] = time.perf_counter() - start
    result["command"] = command[1:]
    return result


# --- comparison -------------------------------------------------------------------------------


def rel_diff(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.abs(a - b) / np.abs(b)


def compare_weights(
    ours: dict, theirs: dict, initial: dict, atol: float = 0.0, rtol: float = 0.0
) -> dict:
    """Max |ours - theirs| over every weight (and where); the largest
    `|ours - theirs| / (atol + rtol * |theirs|)` (at most 1: numpy.allclose(ours, theirs, rtol,
    atol) holds), when a tolerance is given; and ||ours - theirs|| relative to the size of the
    update `theirs - initial` (how much of the training they disagree on)."""
    if set(ours) != set(theirs):
        raise ValueError(
            f"weight names differ: only ours {sorted(set(ours) - set(theirs))}, "
            f"only HF's {sorted(set(theirs) - set(ours))}"
        )
    worst, worst_name, ratio, diff_sq, update_sq = 0.0, "", 0.0, 0.0, 0.0
    for name in sorted(ours):
        a = ours[name].astype(np.float64)
        b = theirs[name].astype(np.float64)
        diff = np.abs(a - b)
        if diff.max() > worst:
            worst, worst_name = float(diff.max()), name
        if atol or rtol:
            ratio = max(ratio, float((diff / (atol + rtol * np.abs(b))).max()))
        diff_sq += float(np.sum(diff**2))
        update_sq += float(np.sum((b - initial[name].astype(np.float64)) ** 2))
    result = {
        "max_abs_diff": worst,
        "max_abs_diff_weight": worst_name,
        "update_rel_diff": (diff_sq / update_sq) ** 0.5 if update_sq else float("nan"),
        "update_norm": update_sq**0.5,
    }
    if atol or rtol:
        result["max_tolerance_ratio"] = ratio
    return result


def compare(
    ours: dict,
    theirs: dict,
    initial: dict,
    loss_rtol: float,
    weight_atol: float,
    weight_rtol: float,
) -> dict:
    """The parity numbers of two runs (`train_ours` / `run_reference` results); `passed`: every
    step's loss within `loss_rtol` of HF's (relative), and every final weight within
    `weight_atol + weight_rtol * |HF's|` of HF's."""
    loss_diff = rel_diff(ours["loss"], theirs["loss"])
    lr_diff = np.abs(np.subtract(ours["learning_rate"], theirs["learning_rate"])) / max(
        max(theirs["learning_rate"]), 1e-30
    )
    weights = compare_weights(ours["weights"], theirs["weights"], initial, weight_atol, weight_rtol)
    worst = int(np.argmax(loss_diff))
    return {
        "max_loss_rel_diff": float(loss_diff.max()),
        "max_loss_rel_diff_step": worst + 1,
        "mean_loss_rel_diff": float(loss_diff.mean()),
        "max_lr_diff_rel_to_peak": float(lr_diff.max()),
        "final_weights": weights,
        "passed": bool(loss_diff.max() <= loss_rtol and weights["max_tolerance_ratio"] <= 1.0),
    }


def effect(variant: dict, base: dict, initial: dict) -> dict:
    """How far a variant of our run is from the base run."""
    diff = np.abs(np.subtract(variant["loss"], base["loss"]))
    weights = compare_weights(variant["weights"], base["weights"], initial)
    last = max(1, len(diff) // 10)
    return {
        "max_abs_loss_diff": float(diff.max()),
        "max_loss_rel_diff": float(rel_diff(variant["loss"], base["loss"]).max()),
        "mean_abs_loss_diff_last_10pct": float(diff[-last:].mean()),
        "final_loss": float(variant["loss"][-1]),
        "update_rel_diff": weights["update_rel_diff"],
    }


def plot(result: dict, ours: dict, theirs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(ours["loss"]) + 1)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(steps, theirs["loss"], label="HF transformers (torch)", lw=2.5, alpha=0.6)
    top.plot(steps, ours["loss"], label="ours (TF/Keras)", lw=1, color="black", ls="--")
    top.set_ylabel("training loss")
    if max(theirs["loss"]) > 10 * min(theirs["loss"]):
        top.set_yscale("log")
    top.legend()
    top.grid(alpha=0.3)
    s = result["settings"]
    top.set_title(
        f"{s['steps']} steps, batch {s['batch_size']} x {s['seq_length']}, lr {s['learning_rate']}, "
        f"recipe {'HF' if result['recipe'] == dataclasses.asdict(HF_RECIPE) else 'custom'}",
        fontsize=10,
    )
    diff = np.maximum(rel_diff(ours["loss"], theirs["loss"]), 1e-12)
    bottom.semilogy(steps, diff, marker=".", lw=0.8)
    bottom.axhline(result["tolerance"]["loss_rtol"], color="red", ls=":", label="tolerance")
    bottom.set_ylabel("|ours - HF| / HF")
    bottom.set_xlabel("step")
    bottom.legend()
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)


def plot_effects(base: dict, variants: dict[str, dict], theirs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.arange(1, len(base["loss"]) + 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    floor = 1e-9
    ax.semilogy(
        steps,
        np.maximum(np.abs(np.subtract(theirs["loss"], base["loss"])), floor),
        color="black",
        lw=2,
        label="HF transformers (parity)",
    )
    for name, run in variants.items():
        ax.semilogy(
            steps, np.maximum(np.abs(np.subtract(run["loss"], base["loss"])), floor), label=name
        )
    ax.set_xlabel("step")
    ax.set_ylabel("|loss - our HF-recipe run's|")
    ax.set_title("Each of our defaults vs HF's, one at a time", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)


def _versions() -> dict:
    import keras
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "keras": keras.__version__}


def run(args) -> dict:
    """The program (module docstring); returns the result written to hf_parity.json."""
    from bert_tf import checkpoints
    from bert_tf.data import corpora, fetch

    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    init_checkpoint = args.init_checkpoint or str(fetch.fetch("minilm"))
    polarity = args.polarity_file or fetch.path("gensim", "pang_lee_polarity.cor")
    settings = options.from_flags(Settings, args)
    recipe = options.from_flags(Recipe, args)
    for problem in options.errors(settings) + options.errors(recipe):
        raise ValueError(problem)
    model, vocab_file = build_classifier(init_checkpoint, settings.seed, args.head_init)
    initial_dir = checkpoints.save_hf_checkpoint(model, output_dir / INITIAL_DIR, vocab_file)
    initial = model.get_weights()
    initial_hf = checkpoints.get_hf_weights(model)
    batches = make_batches(corpora.polarity_examples(polarity), vocab_file, settings)
    np.savez(output_dir / BATCHES_FILE, **batches)

    ours = train_ours(model, initial, batches, settings, recipe, output_dir / "ours")
    np.savez(output_dir / OURS_WEIGHTS_FILE, **ours["weights"])
    theirs = run_reference(
        args.reference_python,
        initial_dir,
        output_dir / BATCHES_FILE,
        output_dir,
        settings,
        recipe,
        list(args.reference_flag),
    )
    tolerance = {
        "loss_rtol": args.loss_rtol,
        "weight_atol": args.weight_atol,
        "weight_rtol": args.weight_rtol,
    }
    result = {
        "made": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "command": " ".join(["python -m experiments.hf_parity", *sys.argv[1:]]),
        "init_checkpoint": init_checkpoint,
        "settings": dataclasses.asdict(settings) | {"num_warmup_steps": settings.num_warmup_steps},
        "recipe": dataclasses.asdict(recipe),
        "head_init": args.head_init,
        "reference_flags": list(args.reference_flag),
        "tolerance": tolerance,
        "versions": _versions()
        | {k: theirs[k] for k in ("transformers", "torch", "threads")}
        | {"python": platform.python_version(), "reference_python": theirs["python"]},
        "seconds": {"ours": round(ours["seconds"], 1), "hf": round(theirs["seconds"], 1)},
        **compare(ours, theirs, initial_hf, **tolerance),
        "loss": {"ours": ours["loss"], "hf": theirs["loss"]},
        "learning_rate": {"ours": ours["learning_rate"], "hf": theirs["learning_rate"]},
        "hf_grad_norm": theirs["grad_norm"],
    }
    plot(result, ours, theirs, output_dir / PLOT_FILE)

    if args.show_defaults_effect:
        unknown = sorted(set(args.effects) - set(EFFECTS))
        if unknown:
            raise ValueError(f"--effects: unknown {unknown}; expected some of {list(EFFECTS)}")
        variants, effects = {}, {}
        for key in args.effects:
            spec = EFFECTS[key]
            logging.info("effect run: %s", spec.label)
            head_init = spec.head_init or args.head_init
            if head_init != args.head_init or spec.head_seed_offset:
                draw_head(model, settings.seed + spec.head_seed_offset, head_init)
                start = model.get_weights()
            else:
                start = initial
            run = train_ours(
                model, start, batches, settings, spec.recipe or recipe, output_dir / "effect"
            )
            variants[spec.label] = run
            effects[key] = {
                "label": spec.label,
                "about": spec.about,
                **effect(run, ours, initial_hf),
                # The same check as the main run's, of this variant against HF's run.
                "vs_hf": compare(run, theirs, initial_hf, **tolerance),
            }
        shutil.rmtree(output_dir / "effect", ignore_errors=True)
        effects["hf"] = {
            "label": "HF transformers",
            "about": "the main run's HF side, for scale",
            **effect(theirs, ours, initial_hf),
        }
        result["effects_base"] = "our side of the main run (HF's recipe by default)"
        result["effects"] = effects
        result["effects_loss"] = {label: run["loss"] for label, run in variants.items()}
        plot_effects(ours, variants, theirs, output_dir / EFFECTS_PLOT_FILE)
    return result


def main(argv: list[str]) -> None:
    del argv
    result = run(FLAGS)
    path = Path(FLAGS.output_dir) / RESULT_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    per_step = ("loss", "learning_rate", "hf_grad_norm", "effects_loss")
    print(json.dumps({k: v for k, v in result.items() if k not in per_step}, indent=2))
    if FLAGS.check and not result["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
