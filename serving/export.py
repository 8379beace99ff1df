r"""`python -m serving.export`: a TF Serving SavedModel (raw text in, tokenization in the graph)
from a checkpoint; the exports themselves, their signatures and version folders are
`serving/export_lib.py`'s.

The script reads a training output folder of `bert_tf.run_classifier` / `bert_tf.run_squad`
(`--init_checkpoint=<output_dir>` or a `ckpt-<step>` in it) with no other flag: beside the
checkpoints lie `bert_config.json`, `vocab.txt` and `task_info.json` (the task, its labels in
order or regression, single sentence or pair, `do_lower_case`, `max_seq_length`; for SQuAD
the decoding options), which give `--task` and the defaults of `--label_names`,
`--regression`, `--single_segment`, `--do_lower_case`, `--max_seq_length`, `--doc_stride`,
`--max_query_length`, `--max_answer_length`, `--n_best_size`, `--version_2_with_negative` and
`--null_score_diff_threshold` (a SQuAD export answers as `run_squad --do_predict` with them).
Flags given explicitly override them; one that cannot fit the trained model (another number of
labels, regression vs classes, a vocab of another size, `--max_seq_length` above the config's
`max_position_embeddings`) is a one-line error naming the flag and the file.

Every version is checked before it appears: an op that the stock `tensorflow_model_server`
2.16.1 does not register (`serving/op_check.py`: core TF + tensorflow-text 2.12.1's `ops_lib`,
as in TF Serving 2.13-2.19) refuses the export with a one-line error naming the op(s), and no
version folder is left; `--allow_ops=OpA,OpB` names ops a custom-built target server has.

Example:

    python -m serving.export --task=encoder --init_checkpoint=$HOME/.cache/bert_tfx/minilm \
        --export_dir=/models/bert_encoder --max_seq_length=128
    # -> /models/bert_encoder/1 (the next free version)
    python -m bert_tf.run_classifier --task_name=sst-2 --output_dir=out/sst2 ...
    python -m serving.export --task=classifier --init_checkpoint=out/sst2 --export_dir=models/sst2
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import tensorflow as tf
from absl import flags, logging

from bert_tf import checkpoints, fileio, flags_util, model_source, options
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from bert_tf.tasks.options import SquadOptions
from bert_tf.text.tokenization import BertPreprocessor
from serving import op_check
from serving.export_lib import export_classifier, export_encoder, export_squad

FLAGS = flags.FLAGS
TASKS = ("encoder", "classifier", "squad")
_SQUAD_OPTION_NAMES = tuple(f.name for f in dataclasses.fields(SquadOptions))


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues (see tests/conftest.py).
    """
    flags.DEFINE_enum(
        "task",
        None,
        TASKS,
        "What to export (default: the task in task_info.json beside --init_checkpoint).",
        flag_values=flag_values,
    )
    # --init_checkpoint --bert_config_file --vocab_file --do_lower_case --max_seq_length
    from_folder = "default: task_info.json's beside --init_checkpoint, else this"
    options.define_flags(
        options.ModelSourceOptions,
        flag_values,
        notes={"do_lower_case": from_folder, "max_seq_length": from_folder},
    )
    flags.DEFINE_string(
        "export_dir", None, "The model's base path: <base>/<model_name>.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "version",
        None,
        "Model version (the version folder's name; default: the next integer).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "num_labels",
        None,
        "Classifier classes (default: len(label_names)).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "label_names",
        None,
        "Classifier class names, comma-separated (default: task_info.json's labels).",
        flag_values=flag_values,
    )
    flags.DEFINE_bool(
        "regression", False, "Classifier is a 1-output regression model.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "single_segment",
        False,
        "Classifier of a single-sentence task: serving_default takes text_a alone "
        "(default: from task_info.json beside --init_checkpoint, else text_a and text_b).",
        flag_values=flag_values,
    )
    # --doc_stride ... --null_score_diff_threshold: run_squad's, for --task=squad
    options.define_flags(
        SquadOptions,
        flag_values,
        notes={name: "--task=squad; " + from_folder for name in _SQUAD_OPTION_NAMES},
    )
    flags.DEFINE_list(
        "allow_ops",
        [],
        "Ops the target model server registers beyond the stock tensorflow_model_server's "
        f"({op_check.stock_server()}; serving/tf_serving_ops.txt), comma-separated. The export "
        "is refused, no version written, if it uses any other op outside that list.",
        flag_values=flag_values,
    )


def _num_classes(num_labels: int | None, label_names: list[str] | None, regression: bool) -> int:
    if regression:
        if label_names or num_labels not in (None, 1):
            raise ValueError("--regression: takes no --label_names and --num_labels must be 1")
        return 1
    if label_names and num_labels is not None and num_labels != len(label_names):
        raise ValueError(
            f"--num_labels={num_labels} but --label_names has {len(label_names)} names"
        )
    num_classes = num_labels if num_labels is not None else len(label_names or [])
    if num_classes < 2:
        raise ValueError(
            "--num_labels/--label_names: a classifier needs >= 2 classes (or use --regression)"
        )
    return num_classes


# Defaults of the options a training folder's task_info.json may give: the declarations'.
_MODEL_SOURCE = options.ModelSourceOptions()
_OPTION_DEFAULTS = {
    "do_lower_case": _MODEL_SOURCE.do_lower_case,
    "max_seq_length": _MODEL_SOURCE.max_seq_length,
    "single_segment": False,
    **dataclasses.asdict(SquadOptions()),
}


def _classifier_head(
    info_path: str,
    info: dict,
    num_labels: int | None,
    label_names: list[str] | None,
    regression: bool | None,
) -> tuple[list[str] | None, bool]:
    """(label names, regression) of a classifier described by `info`; flags must fit its head."""
    trained_regression = bool(info.get("regression"))
    trained_labels = [] if trained_regression else list(info.get("labels") or [])
    trained = "a regression model" if trained_regression else f"labels {trained_labels}"
    if regression is not None and regression != trained_regression:
        flag = "--regression" if regression else "--noregression"
        raise ValueError(f"{flag} but {info_path} describes {trained}")
    expected = 1 if trained_regression else len(trained_labels)
    if num_labels is not None and num_labels != expected:
        raise ValueError(f"--num_labels={num_labels} but {info_path} describes {trained}")
    if label_names and len(label_names) != expected:
        raise ValueError(
            f"--label_names has {len(label_names)} names but {info_path} describes {trained}"
        )
    return (label_names or trained_labels or None), trained_regression


def build_and_export(
    task: str | None,
    init_checkpoint: str,
    export_dir: str,
    bert_config_file: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    max_seq_length: int | None = None,
    version: int | None = None,
    num_labels: int | None = None,
    label_names: list[str] | None = None,
    regression: bool | None = None,
    doc_stride: int | None = None,
    max_query_length: int | None = None,
    max_answer_length: int | None = None,
    n_best_size: int | None = None,
    version_2_with_negative: bool | None = None,
    null_score_diff_threshold: float | None = None,
    single_segment: bool | None = None,
    allow_ops: Sequence[str] = (),
) -> str:
    """Builds the `task` model, loads `init_checkpoint` and exports it (the script's work).

    Options left None come from the `task_info.json` beside `init_checkpoint` (a run_classifier
    / run_squad output folder; `task` too), else from the flags' defaults; given ones override
    it. Raises ValueError (naming the flag, and the file it disagrees with) on bad arguments,
    and `op_check.OpsOutsideError` (a ValueError; no version written) if the model uses an op
    that the stock TF Serving does not register and `allow_ops` does not name.
    """
    info_path, info = checkpoints.read_task_info(init_checkpoint) or ("", {})
    if task is None:
        if not info:
            raise ValueError(
                f"--task is required: no {checkpoints.TASK_INFO_NAME} beside "
                f"--init_checkpoint={init_checkpoint}"
            )
        task = info["task"]
    if task not in TASKS:
        raise ValueError(f"--task: expected one of {list(TASKS)}, got {task!r}")
    if info and task != "encoder" and task != info["task"]:
        raise ValueError(f"--task={task} but {info_path} describes a {info['task']} model")
    if single_segment is not None and task != "classifier":
        raise ValueError(f"--single_segment: only for --task=classifier, not {task}")

    def option(name: str, value):
        if value is None:
            return info.get(name, _OPTION_DEFAULTS[name])
        if name in info and info[name] != value:
            logging.warning(
                "--%s=%s overrides %s=%s of %s", name, value, name, info[name], info_path
            )
        return value

    do_lower_case = option("do_lower_case", do_lower_case)
    seq_length = option("max_seq_length", max_seq_length)
    source = model_source.resolve(
        init_checkpoint,
        bert_config_file,
        vocab_file,
        seq_length,
        "" if max_seq_length is not None else f" (from {info_path})",
    )
    config = source.config
    preprocessor = BertPreprocessor(source.vocab, seq_length=seq_length, lower_case=do_lower_case)
    encoder = build_encoder(config)
    if task == "encoder":
        # Export fill_mask too when the checkpoint has the masked-LM head.
        has_head = checkpoints.read_checkpoint(init_checkpoint).has_masked_lm_head
        model = BertPretrainer(encoder) if has_head else encoder
    elif task == "classifier":
        if info:
            label_names, regression = _classifier_head(
                info_path, info, num_labels, label_names, regression
            )
        regression = bool(regression)
        model = BertClassifier(encoder, _num_classes(num_labels, label_names, regression))
    else:
        # The same bounds as run_squad's flags, on the values given or from task_info.json.
        given = {
            "doc_stride": doc_stride,
            "max_query_length": max_query_length,
            "max_answer_length": max_answer_length,
            "n_best_size": n_best_size,
            "version_2_with_negative": version_2_with_negative,
            "null_score_diff_threshold": null_score_diff_threshold,
        }
        squad_options = SquadOptions(**{name: option(name, value) for name, value in given.items()})
        options.check(squad_options)
        model = BertSpanLabeler(encoder)
    checkpoints.load_pretrained(model, init_checkpoint)
    if task == "encoder":
        return export_encoder(model, preprocessor, export_dir, version, allow_ops=allow_ops)
    if task == "classifier":
        return export_classifier(
            model,
            preprocessor,
            export_dir,
            version,
            label_names or None,
            regression,
            single_segment=bool(option("single_segment", single_segment)),
            allow_ops=allow_ops,
        )
    return export_squad(
        model,
        preprocessor,
        export_dir,
        version,
        **dataclasses.asdict(squad_options),
        allow_ops=allow_ops,
    )


# Flags whose default comes from a training folder's task_info.json unless given.
_INFO_FLAGS = (
    "do_lower_case",
    "max_seq_length",
    "regression",
    "single_segment",
    *(field.name for field in dataclasses.fields(SquadOptions)),
)


def main(argv: list[str]) -> None:
    del argv
    for name in ("init_checkpoint", "export_dir"):
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required")
    if not fileio.exists(FLAGS.init_checkpoint) and not tf.io.gfile.exists(
        FLAGS.init_checkpoint + ".index"
    ):
        sys.exit(f"error: --init_checkpoint={FLAGS.init_checkpoint}: no such checkpoint")
    given = {name: FLAGS[name].value for name in _INFO_FLAGS if FLAGS[name].present}
    try:
        path = build_and_export(
            FLAGS.task,
            FLAGS.init_checkpoint,
            FLAGS.export_dir,
            bert_config_file=FLAGS.bert_config_file,
            vocab_file=FLAGS.vocab_file,
            version=FLAGS.version,
            num_labels=FLAGS.num_labels,
            label_names=FLAGS.label_names,
            allow_ops=FLAGS.allow_ops,
            **given,
        )
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    print(path)


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
