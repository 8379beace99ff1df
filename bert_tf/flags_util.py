"""Helpers shared by the scripts: their entry point, text decoding, flag checks, the strategy the
TPU flags select.

Every script ends with `flags_util.run(main)`, absl's `app.run` plus `expand_home`: a flag
given as `--output_dir=~/out` means the same as `--output_dir ~/out`, which the shell expands.

`decode_utf8` turns bytes that are not UTF-8 into an error naming the file and line, so every
text input fails the same clear way. `check_positive` gives flags that must be above zero one
message in every script. The flag groups (model source, training loop, distribution, google's
TPU flags, precision) are dataclasses in `bert_tf.options`; the model source is resolved by
`bert_tf.model_source`.

Example:

    from bert_tf.flags_util import check_positive, decode_utf8
    text = decode_utf8(open("train.tsv", "rb").read(), "train.tsv")  # ValueError if not UTF-8
    check_positive(FLAGS, ["batch_size"])  # ValueError naming the flag

`strategy_name` is the `--distribution_strategy` that google-research's `--use_tpu` and ours
select (`options.TpuOptions`, `options.DistributionOptions`);
`bert_tf.training.strategy_from_flags` turns it into the `tf.distribute` strategy (there,
because that needs TensorFlow).

    strategy = training.strategy_from_flags(FLAGS)  # --use_tpu: TPUStrategy on --tpu_name
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from absl import app, flags


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


def expand_home(flag_values: flags.FlagValues = flags.FLAGS, literal: Iterable[str] = ()) -> None:
    """Expands a leading `~` (`os.path.expanduser`) in every string and list flag given.

    The shell expands `--init_checkpoint ~/bert` but not `--init_checkpoint=~/bert` (no tilde
    expansion after `=`), which then names a folder "~" in the working directory. Applied to
    every string flag, path or not, so both spellings always mean the same; `literal` names
    flags of free text (the client's `--text`), left as typed.
    """
    for name in flag_values:
        flag = flag_values[name]
        if not flag.present or name in literal:
            continue
        value = flag.value
        if isinstance(value, str):
            expanded = _expand_home(value)
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            expanded = [_expand_home(item) for item in value]
        else:
            continue
        if expanded != value:
            flag.value = expanded


def _expand_home(value: str) -> str:
    return os.path.expanduser(value) if value.startswith("~") else value


def run(main: Callable[[list[str]], None], literal: Iterable[str] = ()) -> None:
    """`absl.app.run(main)` with `expand_home` applied to the parsed flags: every script's
    entry point (its main block: `define_flags(); flags_util.run(main)`)."""
    literal = tuple(literal)

    def parse(argv: list[str]) -> list[str]:
        rest = app.parse_flags_with_usage(argv)
        expand_home(flags.FLAGS, literal)
        return rest

    app.run(main, flags_parser=parse)


# Flags that only mean something on a TPU; given without it they are ignored, as google's are.
TPU_ONLY_FLAGS = ("tpu_name", "tpu_zone", "gcp_project", "master", "tpu_job_name")


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
