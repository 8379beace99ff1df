r"""Exports BERT models as TF Serving SavedModels with tokenization inside the graph.

Each export is one version folder under a model's base path (a local path or any tf.io.gfile
URI, e.g. gs://), written to a temporary folder beside it and renamed (`fileio.atomic_dir`; on an
object store file by file, `saved_model.pb` last), so a model server polling `export_dir` never
sees a half-written version:

    <export_dir>/<version>/saved_model.pb, variables/, assets/vocab.txt (for users; the
    tokenizer has the vocab baked into the graph), assets.extra/tf_serving_warmup_requests,
    and for SQuAD assets/squad_options.json (its decoding options, also baked into the graph)

Signatures (all inputs are string tensors [batch] unless noted):

| export              | signature         | inputs                   | outputs                       |
|---------------------|-------------------|--------------------------|-------------------------------|
| `export_encoder`    | `serving_default` | `text`                   | `pooled_output`, `sequence_output` (0 where `input_mask` is), `input_mask` |
| (BertPretrainer)    | `fill_mask`       | `text` with `[MASK]`s, `top_k` (int32 scalar) | `top_k_tokens`, `top_k_ids`, `top_k_probabilities` [batch, masks, k], `mask_positions`, `mask_valid` [batch, masks] |
|                     | `pretraining_logits` | int32 `input_word_ids`, `input_mask`, `input_type_ids` [batch, S], `masked_lm_positions` [batch, P] | `mlm_logits` [batch, P, V], `nsp_logits` [batch, 2] (for PretrainingEvaluator) |
| `export_classifier` | `serving_default` | `text_a`, `text_b` ("" = single sentence) | `logits`, `probabilities`, `label` |
| (single_segment=True) | `serving_default` | `text_a` only          | the same                      |
|                     | `classify`        | `inputs` (tf.Examples with `text_a` [, `text_b`]) | `classes`, `scores` [batch, C] |
| (regression=True)   | `serving_default` | `text_a`, `text_b` (single_segment: `text_a`) | `outputs` [batch] |
|                     | `regress`         | `inputs`                 | `outputs` [batch]             |
| `export_squad`      | `serving_default` | `question`, `context`    | `answer_text`, `start_char`, `end_char`, `score` |
| (v2.0)              | `serving_default` | `question`, `context`    | the same ("" = no answer) and `null_score_diff` |

A classifier of a single-sentence task (SST-2, CoLA, a `text_classification` file without a
second text column) is exported with `single_segment=True`: its `serving_default` takes `text_a`
alone (the name of the tf.Example feature and of the pair signature's first input, so REST
`{"instances": [{"text_a": "..."}]}` works), as TF Serving rejects requests that lack a
signature input. Sentence-pair classifiers keep `text_a` and `text_b`.

The encoder and classifier signatures run the encoder on the request's longest row only
(`trim_to_longest`): outputs are those of the full `max_seq_length` (the padding never reaches
a real position), at the cost of the request's own length.

Loading an export needs `import tensorflow_text` first (its ops); nothing else from this repo.

The script reads a training output folder of `bert_tf.run_classifier` / `bert_tf.run_squad`
(`--init_checkpoint=<output_dir>` or a `ckpt-<step>` in it) with no other flag: beside the
checkpoints lie `bert_config.json`, `vocab.txt` and `task_info.json` (the task, its labels in
order or regression, single sentence or pair, `do_lower_case`, `max_seq_length`; for SQuAD
the decoding options), which give `--task` and the defaults of `--label_names`,
`--regression`, `--single_segment`, `--do_lower_case`, `--max_seq_length`, `--doc_stride`,
`--max_query_length`, `--max_answer_length`, `--version_2_with_negative` and
`--null_score_diff_threshold`. Flags given explicitly override them; one that cannot fit the
trained model (another number of labels, regression vs classes, a vocab of another size,
`--max_seq_length` above the config's `max_position_embeddings`) is a one-line error naming the
flag and the file.

Example:

    python -m serving.export --task=encoder --init_checkpoint=$HOME/.cache/bert_tfx/minilm \
        --export_dir=/models/bert_encoder --max_seq_length=128
    # -> /models/bert_encoder/1 (the next free version)
    python -m bert_tf.run_classifier --task_name=sst-2 --output_dir=out/sst2 ...
    python -m serving.export --task=classifier --init_checkpoint=out/sst2 --export_dir=models/sst2
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from bert_tf import checkpoints, fileio, model_source, options
from bert_tf.checkpoints import find_encoder, has_pretraining_heads
from bert_tf.flags_util import define_squad_v2_flags
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertClassifier, BertPretrainer, BertSpanLabeler
from bert_tf.tasks.squad import ingraph
from bert_tf.text.tokenization import (
    BertPreprocessor,
    mask_aware_features,
    pair_features,
)
from serving.signatures import WARMUP_FILE, set_method_names

VOCAB_ASSET = os.path.join("assets", "vocab.txt")
SQUAD_OPTIONS_ASSET = os.path.join("assets", "squad_options.json")

_STRINGS = tf.TensorSpec([None], tf.string)
_ENCODER_WARMUP = [
    {"text": ["A man is eating food."]},
    {"text": ["Hello world!", "BERT in TF Serving."]},
]
_PAIR_WARMUP = [
    {"text_a": ["The movie was great."], "text_b": [""]},
    {"text_a": ["Is it sunny?", "A dog runs."], "text_b": ["Yes, it is.", ""]},
]
_SINGLE_WARMUP = [
    {"text_a": ["The movie was great."]},
    {"text_a": ["Is it sunny?", "A dog runs."]},
]
_SQUAD_WARMUP = [
    {"question": ["Who wrote it?"], "context": ["The book was written by Jane Austen in 1813."]}
]


# --- Writing a version folder -----------------------------------------------------------------


def next_version(export_dir: str | os.PathLike) -> int:
    """1 + the largest numeric version folder in `export_dir` (1 when there is none)."""
    export_dir = os.fspath(export_dir)
    if not tf.io.gfile.isdir(export_dir):
        return 1
    versions = [int(name) for name in tf.io.gfile.listdir(export_dir) if name.strip("/").isdigit()]
    return max(versions, default=0) + 1


def _warmup_log(model_name: str, inputs: dict) -> prediction_log_pb2.PredictionLog:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
    for name, texts in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(np.array(texts, dtype=object)))
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.CopyFrom(request)
    return log


def _write_version(
    archive: keras.export.ExportArchive,
    export_dir: str | os.PathLike,
    version: int | None,
    vocabulary: Sequence[str],
    warmup: list[dict[str, list[str]]],
    method_names: dict[str, str] | None = None,
    extra_files: dict[str, str] | None = None,
) -> str:
    """Writes `archive` as `<export_dir>/<version>` (atomically); returns that path.

    `extra_files`: {path relative to the version folder: text} written beside the model.
    """
    export_dir = os.fspath(export_dir)
    if not fileio.is_remote(export_dir):
        export_dir = os.path.abspath(export_dir)
    version = next_version(export_dir) if version is None else version
    if version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version}")
    target = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(target):
        raise ValueError(f"{target} already exists: choose another version")
    tf.io.gfile.makedirs(export_dir)
    # Written under a non-numeric name beside the versions, which TF Serving's poller ignores,
    # then renamed; default permissions, so a model server running as another user (a TF
    # Serving container with runAsNonRoot) reads it. Local or any tf.io.gfile URI (gs://).
    with fileio.atomic_dir(target, prefix=f".tmp-export-{version}-") as tmp:
        archive.write_out(tmp, verbose=False)
        if method_names:
            set_method_names(tmp, method_names)
        tf.io.gfile.makedirs(os.path.join(tmp, "assets"))
        with tf.io.gfile.GFile(os.path.join(tmp, VOCAB_ASSET), "w") as f:
            f.write("".join(token + "\n" for token in vocabulary))
        for name, text in (extra_files or {}).items():
            with tf.io.gfile.GFile(os.path.join(tmp, name), "w") as f:
                f.write(text)
        tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
        with tf.io.TFRecordWriter(os.path.join(tmp, WARMUP_FILE)) as writer:
            for inputs in warmup:
                writer.write(_warmup_log(os.path.basename(export_dir), inputs).SerializeToString())
    logging.info("exported %s", target)
    return target


def _archive(
    trackables: Sequence, endpoints: dict[str, tuple[Callable, list[tf.TensorSpec]]]
) -> keras.export.ExportArchive:
    archive = keras.export.ExportArchive()
    for trackable in trackables:
        archive.track(trackable)
    for name, (fn, signature) in endpoints.items():
        archive.add_endpoint(name, fn, input_signature=signature)
    return archive


# --- Encoder and masked LM ----------------------------------------------------------------------


def trim_to_longest(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The packed features without the columns that are padding in every row.

    The packer pads every row to `seq_length`; a request's sentences are usually far shorter
    (Wikipedia sentences average 34 tokens), and the encoder's cost grows with the padded
    length. Padded keys get -10000 added to their attention logits, whose softmax weight is
    exactly 0 in float32 (and bfloat16), so every real position's output is the same without
    them (to float round-off of the shorter sums): only the work on padding is saved.
    """
    mask = features["input_mask"]
    longest = tf.maximum(tf.reduce_max(tf.reduce_sum(mask, axis=1)), 1)
    return {name: value[:, :longest] for name, value in features.items()}


def _pad_to(values: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """[batch, S', ...] -> [batch, length, ...], zeros after S' (the padding `trim_to_longest`
    dropped), so a signature keeps its documented `seq_length`."""
    paddings = tf.concat(
        [[[0, 0], [0, length - tf.shape(values)[1]]], tf.zeros([tf.rank(values) - 2, 2], tf.int32)],
        axis=0,
    )
    return tf.pad(values, paddings)


def _fill_mask(model: keras.Model, preprocessor: BertPreprocessor):
    tokenizer = preprocessor.tokenizer

    def fill_mask(text, top_k):
        features = mask_aware_features(preprocessor, text)
        seq_length = tf.shape(features["input_word_ids"])[1]
        is_mask = tf.equal(features["input_word_ids"], tokenizer.special_ids.mask)
        positions = tf.ragged.boolean_mask(
            tf.broadcast_to(tf.range(seq_length), tf.shape(is_mask)), is_mask
        )
        mask_positions = positions.to_tensor()
        mask_valid = tf.sequence_mask(positions.row_lengths(), tf.shape(mask_positions)[1])
        logits = model({**features, "masked_lm_positions": mask_positions}, training=False)
        probabilities = tf.nn.softmax(tf.cast(logits["mlm_logits"], tf.float32))
        k = tf.clip_by_value(top_k, 1, tokenizer.vocabulary_size)
        top = tf.math.top_k(probabilities, k=k)
        valid = mask_valid[:, :, None]
        return {
            "top_k_tokens": tf.where(valid, tokenizer.id_to_token(top.indices), ""),
            "top_k_ids": tf.where(valid, top.indices, -1),
            "top_k_probabilities": tf.where(valid, top.values, 0.0),
            "mask_positions": mask_positions,
            "mask_valid": mask_valid,
        }

    return fill_mask


# The pretraining heads on packed, masked features: what `PretrainingEvaluator` scores, so a
# pushed (served) version can be the baseline of the next candidate without its Keras file.
PRETRAINING_SIGNATURE = "pretraining_logits"


def _pretraining_logits(model: keras.Model):
    def pretraining_logits(input_word_ids, input_mask, input_type_ids, masked_lm_positions):
        outputs = model(
            {
                "input_word_ids": input_word_ids,
                "input_mask": input_mask,
                "input_type_ids": input_type_ids,
                "masked_lm_positions": masked_lm_positions,
            },
            training=False,
        )
        return {name: tf.cast(outputs[name], tf.float32) for name in ("mlm_logits", "nsp_logits")}

    return pretraining_logits


def export_encoder(
    model: keras.Model,
    preprocessor: BertPreprocessor,
    export_dir: str | os.PathLike,
    version: int | None = None,
) -> str:
    """Exports a `BertEncoder` (or a task model's encoder); returns the version path.

    `serving_default`: `text` -> `pooled_output` [batch, H], `sequence_output` [batch, S, H],
    `input_mask` [batch, S] (S = `preprocessor.seq_length`). A `BertPretrainer` also gets
    `fill_mask` and `pretraining_logits` (see the module docstring). `version` defaults to the
    next free integer.
    """
    encoder = find_encoder(model)

    def serve(text):
        features = preprocessor(text)
        outputs = encoder(trim_to_longest(features), training=False)
        mask = features["input_mask"]
        sequence_output = _pad_to(
            tf.cast(outputs["sequence_output"], tf.float32), tf.shape(mask)[1]
        )
        return {
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            # Padding rows are 0: what the encoder computes there is meaningless either way.
            "sequence_output": sequence_output * tf.cast(mask, tf.float32)[:, :, None],
            "input_mask": mask,
        }

    endpoints = {"serving_default": (serve, [_STRINGS])}
    if has_pretraining_heads(model):
        top_k = tf.TensorSpec([], tf.int32)
        endpoints["fill_mask"] = (_fill_mask(model, preprocessor), [_STRINGS, top_k])
        ids = tf.TensorSpec([None, None], tf.int32)
        endpoints[PRETRAINING_SIGNATURE] = (_pretraining_logits(model), [ids] * 4)
    archive = _archive([model, preprocessor], endpoints)
    return _write_version(
        archive, export_dir, version, preprocessor.tokenizer.vocabulary, _ENCODER_WARMUP
    )


# --- Classification / regression ----------------------------------------------------------------


def export_classifier(
    classifier: keras.Model,
    preprocessor: BertPreprocessor,
    export_dir: str | os.PathLike,
    version: int | None = None,
    label_names: Sequence[str] | None = None,
    regression: bool = False,
    single_segment: bool = False,
) -> str:
    """Exports a `BertClassifier` with `serving_default` and `classify` (or `regress`).

    `serving_default`: `text_a`, `text_b` -> `logits`, `probabilities` [batch, C] and `label`
    (the name from `label_names`, else the int32 class id); with `regression=True` (a
    1-output classifier) -> `outputs` [batch]. With `single_segment=True` (a model trained on
    single sentences) `serving_default` takes `text_a` alone. `classify` / `regress` take
    serialized tf.Examples (`inputs`) with bytes features `text_a` and optionally `text_b`.
    """
    num_classes = classifier.output_shape[-1]
    if regression and num_classes != 1:
        raise ValueError(f"regression needs a 1-output classifier, this one has {num_classes}")
    if label_names is not None and len(label_names) != num_classes:
        raise ValueError(
            f"label_names has {len(label_names)} names for a {num_classes}-class classifier"
        )
    names = tf.constant(list(label_names or [str(i) for i in range(num_classes)]))

    def logits_of(text_a, text_b):
        features = trim_to_longest(pair_features(preprocessor, text_a, text_b))
        return tf.cast(classifier(features, training=False), tf.float32)

    def parse(inputs):
        spec = {
            "text_a": tf.io.FixedLenFeature([], tf.string),
            "text_b": tf.io.FixedLenFeature([], tf.string, default_value=""),
        }
        features = tf.io.parse_example(inputs, spec)
        return logits_of(features["text_a"], features["text_b"])

    def serve_outputs(logits):
        if regression:
            return {"outputs": logits[:, 0]}
        ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        label = tf.gather(names, ids) if label_names is not None else ids
        return {"logits": logits, "probabilities": tf.nn.softmax(logits), "label": label}

    if single_segment:
        # As run_classifier's input pipeline packs a single-sentence task: `text_a` alone.
        def serve(text_a):
            features = trim_to_longest(preprocessor(text_a))
            return serve_outputs(tf.cast(classifier(features, training=False), tf.float32))

        serve_spec = [tf.TensorSpec([None], tf.string, name="text_a")]
        warmup_inputs = _SINGLE_WARMUP
    else:

        def serve(text_a, text_b):
            return serve_outputs(logits_of(text_a, text_b))

        serve_spec = [
            tf.TensorSpec([None], tf.string, name="text_a"),
            tf.TensorSpec([None], tf.string, name="text_b"),
        ]
        warmup_inputs = _PAIR_WARMUP

    if regression:

        def regress(inputs):
            return {"outputs": parse(inputs)[:, 0]}

        examples_key, examples_fn = "regress", regress
        method = tf.saved_model.REGRESS_METHOD_NAME
    else:

        def classify(inputs):
            scores = tf.nn.softmax(parse(inputs))
            return {"classes": tf.tile(names[None], [tf.shape(scores)[0], 1]), "scores": scores}

        examples_key, examples_fn = "classify", classify
        method = tf.saved_model.CLASSIFY_METHOD_NAME
    examples_spec = [tf.TensorSpec([None], tf.string, name="inputs")]
    archive = _archive(
        [classifier, preprocessor],
        {"serving_default": (serve, serve_spec), examples_key: (examples_fn, examples_spec)},
    )
    return _write_version(
        archive,
        export_dir,
        version,
        preprocessor.tokenizer.vocabulary,
        warmup_inputs,
        {examples_key: method},
    )


# --- SQuAD ----------------------------------------------------------------------------------------


def export_squad(
    span_model: keras.Model,
    preprocessor: BertPreprocessor,
    export_dir: str | os.PathLike,
    version: int | None = None,
    doc_stride: int = 128,
    max_query_length: int = 64,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> str:
    """Exports a `BertSpanLabeler`: `serving_default` (`question`, `context`) ->
    `bert_tf.tasks.squad.ingraph.squad_answers`.

    `preprocessor.seq_length` is the window length (google-research `max_seq_length`). A SQuAD
    v2.0 model (`version_2_with_negative`) answers "" when its null score wins by more than
    `null_score_diff_threshold` (a constant in the graph) and also returns `null_score_diff`.
    The decoding options are written to `assets/squad_options.json` for users to read.
    """
    if not 1 <= max_query_length <= preprocessor.seq_length - 4:
        raise ValueError(
            f"max_query_length must be in 1..{preprocessor.seq_length - 4} (seq_length "
            f"{preprocessor.seq_length} minus [CLS], two [SEP] and one context token), "
            f"got {max_query_length}"
        )
    for name, value in (("doc_stride", doc_stride), ("max_answer_length", max_answer_length)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    null_score_diff_threshold = float(null_score_diff_threshold)
    if not math.isfinite(null_score_diff_threshold):
        raise ValueError(
            f"null_score_diff_threshold must be a finite number, got {null_score_diff_threshold}"
        )
    if null_score_diff_threshold and not version_2_with_negative:
        # A v1.1 model never answers "": a threshold there is a forgotten v2.0 flag.
        raise ValueError(
            f"null_score_diff_threshold={null_score_diff_threshold} needs "
            "version_2_with_negative (SQuAD v2.0)"
        )
    options = {
        "max_seq_length": preprocessor.seq_length,
        "do_lower_case": preprocessor.tokenizer.lower_case,
        "doc_stride": doc_stride,
        "max_query_length": max_query_length,
        "max_answer_length": max_answer_length,
        "version_2_with_negative": bool(version_2_with_negative),
        "null_score_diff_threshold": null_score_diff_threshold,
    }

    def serve(question, context):
        return ingraph.squad_answers(
            span_model,
            preprocessor,
            question,
            context,
            doc_stride,
            max_query_length,
            max_answer_length,
            bool(version_2_with_negative),
            null_score_diff_threshold,
        )

    spec = [
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="context"),
    ]
    archive = _archive([span_model, preprocessor], {"serving_default": (serve, spec)})
    return _write_version(
        archive,
        export_dir,
        version,
        preprocessor.tokenizer.vocabulary,
        _SQUAD_WARMUP,
        extra_files={SQUAD_OPTIONS_ASSET: json.dumps(options, indent=2) + "\n"},
    )


# --- Command line ---------------------------------------------------------------------------------

FLAGS = flags.FLAGS
TASKS = ("encoder", "classifier", "squad")


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
        "version", None, "Version folder name (default: the next integer).", flag_values=flag_values
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
    flags.DEFINE_integer(
        "doc_stride", 128, "SQuAD: tokens between window starts.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "max_query_length", 64, "SQuAD: question tokens kept.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "max_answer_length", 30, "SQuAD: longest answer in tokens.", flag_values=flag_values
    )
    define_squad_v2_flags(flag_values)


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


# Defaults of the options a training folder's task_info.json may give.
_OPTION_DEFAULTS = {
    "do_lower_case": True,
    "max_seq_length": 128,
    "single_segment": False,
    "doc_stride": 128,
    "max_query_length": 64,
    "max_answer_length": 30,
    "version_2_with_negative": False,
    "null_score_diff_threshold": 0.0,
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
    version_2_with_negative: bool | None = None,
    null_score_diff_threshold: float | None = None,
    single_segment: bool | None = None,
) -> str:
    """Builds the `task` model, loads `init_checkpoint` and exports it (the script's work).

    Options left None come from the `task_info.json` beside `init_checkpoint` (a run_classifier
    / run_squad output folder; `task` too), else from the flags' defaults; given ones override
    it. Raises ValueError (naming the flag, and the file it disagrees with) on bad arguments.
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
        model = BertSpanLabeler(encoder)
    checkpoints.load_pretrained(model, init_checkpoint)
    if task == "encoder":
        return export_encoder(model, preprocessor, export_dir, version)
    if task == "classifier":
        return export_classifier(
            model,
            preprocessor,
            export_dir,
            version,
            label_names or None,
            regression,
            single_segment=bool(option("single_segment", single_segment)),
        )
    return export_squad(
        model,
        preprocessor,
        export_dir,
        version,
        doc_stride=option("doc_stride", doc_stride),
        max_query_length=option("max_query_length", max_query_length),
        max_answer_length=option("max_answer_length", max_answer_length),
        version_2_with_negative=option("version_2_with_negative", version_2_with_negative),
        null_score_diff_threshold=option("null_score_diff_threshold", null_score_diff_threshold),
    )


# Flags whose default comes from a training folder's task_info.json unless given.
_INFO_FLAGS = (
    "do_lower_case",
    "max_seq_length",
    "regression",
    "single_segment",
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "version_2_with_negative",
    "null_score_diff_threshold",
)


def main(argv: list[str]) -> None:
    del argv
    for name in ("init_checkpoint", "export_dir"):
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required")
    if not os.path.exists(FLAGS.init_checkpoint) and not tf.io.gfile.exists(
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
            **given,
        )
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    print(path)


if __name__ == "__main__":
    define_flags()
    app.run(main)
