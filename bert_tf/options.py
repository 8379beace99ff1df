"""Options declared once, as dataclass fields, that become absl flags with their checks.

A field written with `option(default, help, choices=..., minimum=..., maximum=..., above=...)`
carries its help text and allowed values. `define_flags(cls)` defines one flag per field of the
dataclass `cls` (same name; an enum when it has choices; `aliases` as absl aliases),
`from_flags(cls, args)` reads them back into an instance, and `check(options)` raises one
ValueError line naming the first bad value (`--name: expected ..., got ...`). The scripts share
the groups below (model source, training loop, distribution and google's TPU flags, precision),
and `tfx_pipeline.configs` declares the pipelines' options with the same `option`, so a flag
means the same thing, with the same check, everywhere. `shared_options(groups, selector)` and
`define_shared_flags` make one flag of an option that several groups have (the pipelines' three
dataclasses, chosen by `--pipeline`), its help telling each group's default.

This module imports no TensorFlow: scripts check their flags before importing it.

Example:

    from absl import flags
    from bert_tf import options
    flag_values = flags.FlagValues()
    options.define_flags(options.TrainingLoopOptions, flag_values, learning_rate=3e-5)
    flag_values(["prog", "--train_batch_size=16"])
    loop = options.from_flags(options.TrainingLoopOptions, flag_values)
    options.check(loop)          # ValueError("--train_batch_size: expected ...") if bad
    loop.train_batch_size        # 16
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import flags

from bert_tf.modeling.configs import PRESETS

# The flags define_flags defines belong to the script that calls it (its --help), not here.
flags.disclaim_key_flags()


def option(
    default: Any,
    help: str = "",
    *,
    choices: tuple = (),
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    aliases: tuple[str, ...] = (),
):
    """A dataclass field that is also a flag: its help text (given once, where the option first
    appears; a subclass that only changes the default writes a plain default), allowed values,
    bounds (`minimum`/`maximum` inclusive, `above`/`below` exclusive) and older flag names."""
    metadata = {"help": help, "choices": tuple(choices), "aliases": tuple(aliases)}
    metadata.update(minimum=minimum, maximum=maximum, above=above, below=below)
    return dataclasses.field(default=default, metadata=metadata)


def same_as(
    cls: type,
    name: str,
    default: Any = dataclasses.MISSING,
    *,
    aliases: tuple[str, ...] = (),
    note: str = "",
):
    """A field declared as `cls`'s field `name` (help, choices, bounds), with its own default:
    the pipelines' options reuse the scripts' declarations, so the two never drift apart.
    `aliases` adds older names this use of the option still takes, `note` a remark to its help
    (what differs here, as `define_flags`' notes)."""
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    value = field.default if default is dataclasses.MISSING else default
    metadata = dict(field.metadata)
    # Where the option is declared (tests/test_option_definitions.py: one declaration a name).
    metadata.setdefault("declared_in", f"{cls.__module__}.{cls.__qualname__}.{name}")
    metadata["aliases"] = (*metadata.get("aliases", ()), *aliases)
    if note:
        metadata["help"] = f"{metadata.get('help', '').rstrip('.')}; {note}"
    return dataclasses.field(default=value, metadata=metadata)


def shown(value: Any) -> str:
    """`value` as a flag would spell it (`true`, `''`, `0.1`; None: `unset`)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value) if value == "" else value
    return str(value)


def expected(metadata: dict, value: Any) -> str | None:
    """What the option declared by `metadata` expects, if `value` is not allowed, else None.

    NaN is never in bounds (`not value >= minimum`), so `--learning_rate=nan` is an error."""
    if value is None:
        return None  # an optional option left unset
    choices = metadata.get("choices") or ()
    if choices and value not in choices:
        return f"one of {', '.join(map(shown, choices))}"
    low, high, above = metadata.get("minimum"), metadata.get("maximum"), metadata.get("above")
    below = metadata.get("below")
    if (
        (low is not None and not value >= low)
        or (high is not None and not value <= high)
        or (above is not None and not value > above)
        or (below is not None and not value < below)
    ):
        return _range_phrase(low, high, above, below)
    return None


def _range_phrase(low, high, above, below=None) -> str:
    if above is not None and below is not None:
        return f"a number above {shown(above)} and below {shown(below)}"
    if above == 0 and low is None and high is None:
        return "a positive number"
    if above is not None:
        return f"a number above {shown(above)}" + (f" and at most {shown(high)}" if high else "")
    if below is not None:
        return f"a number below {shown(below)}" + (f" and at least {shown(low)}" if low else "")
    if low is not None and high is not None:
        return f"{shown(low)}..{shown(high)}"
    if low is not None:
        return f"at least {shown(low)}"
    return f"at most {shown(high)}"


def errors(options: Any) -> list[str]:
    """One line per field of the dataclass instance `options` whose value is not allowed."""
    lines = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        what = expected(field.metadata, value)
        if what:
            lines.append(f"--{field.name}: expected {what}, got {shown(value)}")
    return lines


def check(options: Any) -> None:
    """ValueError with the first of `errors(options)`."""
    if bad := errors(options):
        raise ValueError(bad[0])


def help_text(field: dataclasses.Field) -> str:
    """The field's help line (absl adds the allowed values of an enum, and the default)."""
    return field.metadata.get("help", "").rstrip(".") + "."


_DEFINERS = {"int": "DEFINE_integer", "float": "DEFINE_float", "bool": "DEFINE_bool"}


def flag_kind(field: dataclasses.Field) -> str:
    """The absl definer of a field: by its annotation (`int`, `float | None`, ...)."""
    return _definer(field.type)


def _definer(annotation: Any) -> str:
    return _DEFINERS.get(str(annotation).replace(" ", "").removesuffix("|None"), "DEFINE_string")


def define_flags(
    cls: type,
    flag_values: flags.FlagValues = flags.FLAGS,
    *,
    notes: dict[str, str] | None = None,
    only: tuple[str, ...] | None = None,
    **defaults,
) -> None:
    """Defines a flag per field of the dataclass `cls` in `flag_values`, with the
    field's help, choices and aliases; `defaults` override the fields' defaults for one script,
    `notes` add a script's own remark to a flag's help, `only` names the fields to define (a
    script that takes part of a group; `from_flags` gives the others their defaults)."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = (set(defaults) | set(notes or ()) | set(only or ())) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no options {sorted(unknown)}")
    for field in dataclasses.fields(cls):
        if only is not None and field.name not in only:
            continue
        default = defaults.get(field.name, field.default)
        text = help_text(field)
        if notes and field.name in notes:
            text = f"{text[:-1]}; {notes[field.name]}."
        if field.metadata.get("choices"):
            flags.DEFINE_enum(
                field.name,
                default,
                [str(c) for c in field.metadata["choices"]],
                text,
                flag_values=flag_values,
            )
        else:
            definer = getattr(flags, flag_kind(field))
            definer(field.name, default, text, flag_values=flag_values)
        for alias in field.metadata.get("aliases", ()):
            flags.DEFINE_alias(alias, field.name, flag_values=flag_values)


def from_flags(cls: type, flag_values: flags.FlagValues = flags.FLAGS):
    """An instance of the dataclass `cls` with the values of its flags (a field whose flag is
    not defined keeps its default)."""
    return cls(
        **{
            f.name: flag_values[f.name].value
            for f in dataclasses.fields(cls)
            if f.name in flag_values
        }
    )


def from_dict(cls: type, values: dict[str, Any], **overrides):
    """An instance of the dataclass `cls` from the entries of `values` named as its fields (a
    pipeline component's custom_config; the others keep their defaults), then `overrides`."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names}, **overrides)


# --- One flag for an option of several groups ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SharedOption:
    """An option of several option groups that one flag chooses between (`selector`; e.g. the
    pipelines' dataclasses and `--pipeline`): one flag, unset by default, each group's default
    told in its help. `shared_options` builds them, `define_shared_flags` defines them."""

    name: str
    type: str  # the field's annotation: "int", "float", "bool", "str", "int | None", ...
    help: str
    defaults: dict[str, Any]  # group -> default, for the groups that have the option
    groups: tuple[str, ...]  # every group `selector` chooses between
    selector: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    below: float | None = None
    aliases: tuple[str, ...] = ()
    declared_in: str | None = None  # the declaration it reuses (`same_as`)

    def flag_help(self) -> str:
        """The help line: what it is, allowed values, each group's default."""
        text = self.help.rstrip(".")
        if self.choices:
            text += f"; one of {', '.join(map(str, self.choices))}"
        values = {shown(v) for v in self.defaults.values()}
        if len(values) == 1 and len(self.defaults) == len(self.groups):
            text += f" (default: {values.pop()})"
        else:
            defaults = ", ".join(f"{g} {shown(v)}" for g, v in self.defaults.items())
            if len(self.defaults) < len(self.groups):
                only = "/".join(self.defaults)
                text += f" (only --{self.selector}={only}; default: {defaults})"
            else:
                text += f" (default: {defaults})"
        return text + "."

    def check(self, value: Any) -> str | None:
        """What the option expects, if `value` is not allowed (see `expected`)."""
        bounds = ("choices", "minimum", "maximum", "above", "below")
        return expected({name: getattr(self, name) for name in bounds}, value)


def shared_options(groups: dict[str, type], selector: str) -> dict[str, SharedOption]:
    """Every field of the dataclasses `groups` (group name -> class), in field order, as one
    `SharedOption`: the help and checks of the first field that declares it (`option` or
    `same_as`; a subclass that only changes a default writes a plain one), each group's default."""
    declared: dict[str, dict] = {}
    defaults: dict[str, dict[str, Any]] = {}
    types: dict[str, str] = {}
    for group, cls in groups.items():
        for field in dataclasses.fields(cls):
            if field.metadata.get("help"):
                declared.setdefault(field.name, dict(field.metadata))
            defaults.setdefault(field.name, {})[group] = field.default
            types[field.name] = str(field.type)
    missing = sorted(set(defaults) - set(declared))
    if missing:  # a field written without option(...): no help to show
        raise TypeError(f"options without help (declare them with options.option): {missing}")
    return {
        name: SharedOption(
            name=name,
            type=types[name],
            defaults=defaults[name],
            groups=tuple(groups),
            selector=selector,
            **declared[name],
        )
        for name in defaults
    }


def define_shared_flags(
    shared: dict[str, SharedOption],
    flag_values: flags.FlagValues = flags.FLAGS,
    *,
    notes: dict[str, str] | None = None,
) -> None:
    """A flag per `SharedOption` (default None: the chosen group's default applies), with its
    help (`notes` adds a program's sentence after it) and aliases."""
    for option_ in shared.values():
        text = option_.flag_help()
        if notes and option_.name in notes:
            text += f" {notes[option_.name]}"
        define = getattr(flags, _definer(option_.type))
        define(option_.name, None, text, flag_values=flag_values)
        for alias in option_.aliases:  # an option's earlier name
            flags.DEFINE_alias(alias, option_.name, flag_values=flag_values)


# --- The groups the scripts share ------------------------------------------------------------


@dataclasses.dataclass
class ModelSourceOptions:
    """Where the model comes from: google-research's flags, resolved by
    `bert_tf.model_source.resolve` (config and vocab default to the files beside
    `--init_checkpoint`) with one set of checks in every script."""

    init_checkpoint: str | None = option(
        None,
        "Pre-trained BERT: a google-research or bert_tf checkpoint (prefix or folder) or an HF "
        "folder (config.json + weights + vocab.txt)",
    )
    bert_config_file: str | None = option(
        None,
        "bert_config.json of the model (default: bert_config.json or HF config.json beside "
        "--init_checkpoint)",
    )
    vocab_file: str | None = option(
        None, "WordPiece vocab, one token per line (default: vocab.txt beside --init_checkpoint)"
    )
    do_lower_case: bool = option(True, "Lowercase and strip accents (uncased models)")
    max_seq_length: int = option(
        128,
        "Tokens per sequence after WordPiece, [CLS]/[SEP] included (at most the model's "
        "max_position_embeddings)",
        minimum=3,
    )


# The dtypes the gradients may cross replicas in (`bert_tf.training.Trainer`'s all-reduce).
ALL_REDUCE_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass
class TrainingLoopOptions:
    """The training loop of every training script (`bert_tf.training.make_trainer`)."""

    train_batch_size: int = option(32, "Examples per optimizer step (all replicas)", above=0)
    learning_rate: float = option(
        5e-5, "Peak learning rate (linear warmup, then linear decay to 0)", above=0
    )
    optimizer: str = option(
        "adamw",
        "adamw: google-research's AdamW (weight decay 0.01, none on LayerNorm and biases); "
        "lamb: LAMB, for large batches",
        choices=("adamw", "lamb"),
    )
    optimizer_recipe: str = option(
        "google",
        "google: google-research's Adam epsilon 1e-6 and decay lr*(1-step/T); hf: HF "
        "transformers' Trainer (torch AdamW, epsilon 1e-8 after bias correction, decay from the "
        "warmup's peak), which trains step for step as HF does (docs/hf_parity.md)",
        choices=("google", "hf"),
    )
    save_checkpoints_steps: int = option(
        1000, "Steps between training checkpoints (and one at the end)", above=0
    )
    keep_checkpoint_max: int = option(5, "Training checkpoints kept", above=0)
    log_steps: int = option(100, "Steps between progress lines and summaries", above=0)
    gradient_accumulation_steps: int = option(
        1, "Micro-batches per optimizer step (must divide the per-replica batch)", above=0
    )
    all_reduce_dtype: str = option(
        "float32",
        "With several replicas: the dtype the gradients cross them in (one all-reduce per "
        "step); bfloat16/float16 halve the bytes, the weights and the update stay float32",
        choices=ALL_REDUCE_DTYPES,
    )
    head_learning_rate_multiplier: float = option(
        1.0,
        "Learning rate of the variables --init_checkpoint lacks (a task head; the masked-LM "
        "transform, its output bias and the next-sentence head of an encoder-only checkpoint), "
        "as a multiple of --learning_rate, same warmup and decay; no effect without "
        "--init_checkpoint",
        above=0,
    )
    seed: int | None = option(
        None,
        "Seed of initialisation, shuffling, masking and dropout (no seed: not reproducible)",
    )


@dataclasses.dataclass
class FineTuningLoopOptions(TrainingLoopOptions):
    """run_classifier's and run_squad's loop: its length in epochs, warmup as a fraction."""

    num_train_epochs: float = option(
        3.0, "Passes over the training examples (may be fractional)", above=0
    )
    warmup_proportion: float = option(
        0.1,
        "Fraction of the training steps with a linear learning-rate warmup",
        minimum=0,
        maximum=1,
    )


@dataclasses.dataclass
class PresetOptions:
    """A paper-size model from scratch (`BertConfig.from_preset`): run_pretraining, the pipelines."""

    preset: str | None = option(
        None,
        "BERT size of a model not started from a checkpoint with its own config (the paper's and "
        "Turc et al.'s sizes; instead of --bert_config_file)",
        choices=tuple(PRESETS),
    )


# The strategies `--distribution_strategy` takes (`bert_tf.training.get_strategy`'s).
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


@dataclasses.dataclass
class DistributionOptions:
    """Where and how the training loop runs (`bert_tf.training.strategy_from_flags`)."""

    distribution_strategy: str = option(
        "one_device", "tf.distribute strategy; --use_tpu is the same as tpu", choices=STRATEGIES
    )
    iterations_per_loop: int = option(
        1000,
        "Training steps per compiled loop (one tf.function call)",
        above=0,
        aliases=("steps_per_loop",),
    )


@dataclasses.dataclass
class TpuOptions:
    """google-research/bert's TPU flags, one spelling for every script; `--use_tpu` selects
    `--distribution_strategy=tpu` (`bert_tf.flags_util.strategy_name`)."""

    use_tpu: bool = option(
        False, "Run on a TPU: the same as --distribution_strategy=tpu (google-research's flag)"
    )
    tpu_name: str | None = option(
        None,
        "Cloud TPU name or grpc:// address for the TPU strategy (default: --master, else the "
        "local TPU)",
        aliases=("tpu",),
    )
    tpu_zone: str | None = option(
        None, "GCE zone of the Cloud TPU --tpu_name (default: detected from the GCE metadata)"
    )
    gcp_project: str | None = option(
        None, "GCP project of the Cloud TPU --tpu_name (default: detected from the GCE metadata)"
    )
    master: str | None = option(
        None,
        "TPU grpc:// address, used when --tpu_name is not given (google-research's non-Cloud TPU)",
    )
    num_tpu_cores: int = option(
        8,
        "TPU cores (google-research's flag). Informational: the TPU strategy uses every core "
        "of the TPU; a warning if given and the TPU has another count",
    )
    tpu_job_name: str | None = option(
        None,
        "Name of the TPU worker job (google-research's flag). Informational: TF 2's TPU "
        "strategy names the job of the cluster it connects to itself; ignored (logged) if given",
    )


@dataclasses.dataclass
class PrecisionOptions:
    """Numerics of training and prediction."""

    use_mixed_precision: bool = option(
        False, "Compute in --mixed_precision_dtype, keep variables in float32"
    )
    mixed_precision_dtype: str = option(
        "float16",
        "Compute dtype of --use_mixed_precision; float16 uses dynamic loss scaling",
        choices=("float16", "bfloat16"),
    )
    use_xla: bool = option(False, "XLA-compile the training and prediction steps")

    @property
    def policy(self) -> str:
        """The Keras dtype policy: float32, mixed_float16 or mixed_bfloat16."""
        return f"mixed_{self.mixed_precision_dtype}" if self.use_mixed_precision else "float32"
