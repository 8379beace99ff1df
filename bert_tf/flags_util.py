"""Helpers shared by the scripts: text decoding, flag checks, the distribution/TPU flags.

`decode_utf8` turns bytes that are not UTF-8 into an error naming the file and line, so every
text input fails the same clear way. `check_positive` gives flags that must be above zero one
message in every script. The other flag groups (model source, training loop, precision) are
dataclasses in `bert_tf.options`; the model source is resolved by `bert_tf.model_source`.

Example:

    from bert_tf.flags_util import check_positive, decode_utf8
    text = decode_utf8(open("train.tsv", "rb").read(), "train.tsv")  # ValueError if not UTF-8
    check_positive(FLAGS, ["batch_size"])  # ValueError naming the flag

google-research/bert's TPU flags (`--use_tpu --tpu_name --tpu_zone --gcp_project --master
--num_tpu_cores --iterations_per_loop`) are defined once, by `define_tpu_flags`, for every
script, with `--distribution_strategy` beside them; `bert_tf.training.strategy_from_flags`
turns them into the `tf.distribute` strategy (there, because that needs TensorFlow). Old
spellings stay as aliases: `--tpu` (`--tpu_name`) and `--steps_per_loop`
(`--iterations_per_loop`).

    define_tpu_flags(flag_values)                   # in a script's define_flags
    strategy = training.strategy_from_flags(FLAGS)  # --use_tpu: TPUStrategy on --tpu_name
"""

from __future__ import annotations

from collections.abc import Iterable

from absl import flags

# The flags `define_tpu_flags` defines belong to the script that calls it (absl's key flags:
# they show in its `--help`, under its name in `--helpfull`), not to this module.
flags.disclaim_key_flags()


def decode_utf8(data: bytes, source: str) -> str:
    """`data` decoded; ValueError naming `source`, the line and the byte if it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{source}:{line}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}); "
            "expected a UTF-8 file"
        ) from None


def check_positive(args: flags.FlagValues, names: Iterable[str]) -> None:
    """ValueError naming the first of the flags `names` whose value is not above zero."""
    for name in names:
        if not args[name].value > 0:
            raise ValueError(f"--{name}: expected a positive number, got {args[name].value}")


# The strategies `--distribution_strategy` takes (bert_tf.training.get_strategy's), kept here so
# that defining the flags needs no TensorFlow import.
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
# Flags that only mean something on a TPU; given without it they are ignored, as google's are.
TPU_ONLY_FLAGS = ("tpu_name", "tpu_zone", "gcp_project", "master")


def define_tpu_flags(
    flag_values: flags.FlagValues = flags.FLAGS,
    *,
    iterations_per_loop: int | None = 1000,
    distribution_strategy: bool = True,
) -> None:
    """Defines google-research/bert's TPU flags in `flag_values`, one spelling for every script.

    `--use_tpu --tpu_name --tpu_zone --gcp_project --master --num_tpu_cores`, `--tpu` as an
    alias of `--tpu_name`; with `distribution_strategy`, `--distribution_strategy`; unless
    `iterations_per_loop` is None, `--iterations_per_loop` with that default and
    `--steps_per_loop` as its alias.
    """
    flags.DEFINE_bool(
        "use_tpu",
        False,
        "Run on a TPU: the same as --distribution_strategy=tpu (google-research's flag).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "tpu_name",
        None,
        "Cloud TPU name or grpc:// address for the TPU strategy (default: --master, else the "
        "local TPU).",
        flag_values=flag_values,
    )
    flags.DEFINE_alias("tpu", "tpu_name", flag_values=flag_values)
    flags.DEFINE_string(
        "tpu_zone",
        None,
        "GCE zone of the Cloud TPU --tpu_name (default: detected from the GCE metadata).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "gcp_project",
        None,
        "GCP project of the Cloud TPU --tpu_name (default: detected from the GCE metadata).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "master",
        None,
        "TPU grpc:// address, used when --tpu_name is not given (google-research's non-Cloud TPU).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "num_tpu_cores",
        8,
        "TPU cores (google-research's flag). Informational: the TPU strategy uses every core "
        "of the TPU; a warning if given and the TPU has another count.",
        flag_values=flag_values,
    )
    if distribution_strategy:
        flags.DEFINE_enum(
            "distribution_strategy",
            "one_device",
            list(STRATEGIES),
            "tf.distribute strategy; --use_tpu is the same as tpu.",
            flag_values=flag_values,
        )
    if iterations_per_loop is not None:
        flags.DEFINE_integer(
            "iterations_per_loop",
            iterations_per_loop,
            "Training steps per compiled loop (one tf.function call).",
            flag_values=flag_values,
        )
        flags.DEFINE_alias("steps_per_loop", "iterations_per_loop", flag_values=flag_values)


def strategy_name(args: flags.FlagValues) -> str:
    """The `--distribution_strategy` that `--use_tpu` and `--distribution_strategy` select;
    ValueError when both are given and disagree."""
    name = args.distribution_strategy
    if args.use_tpu and name != "tpu":
        if args["distribution_strategy"].present:
            raise ValueError(
                f"--use_tpu conflicts with --distribution_strategy={name}: give one of them"
            )
        name = "tpu"
    elif not args.use_tpu and args["use_tpu"].present and name == "tpu":
        raise ValueError(
            "--use_tpu=false conflicts with --distribution_strategy=tpu: give one of them"
        )
    return name


def define_squad_v2_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """google-research `run_squad.py`'s v2.0 flags, for run_squad and the SQuAD export."""
    flags.DEFINE_bool(
        "version_2_with_negative",
        False,
        "SQuAD v2.0: questions may be unanswerable.",
        flag_values=flag_values,
    )
    flags.DEFINE_float(
        "null_score_diff_threshold",
        0.0,
        "SQuAD v2.0: answer '' when the null score beats the best span by more than this.",
        flag_values=flag_values,
    )
