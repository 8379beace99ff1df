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

The encoder, classifier and SQuAD signatures run the encoder on the request's longest row (for
SQuAD: window) only (`bert_tf.text.tokenization.trim_to_longest`): outputs are those of the
full `max_seq_length` (the padding never reaches a real position), at the cost of the
request's own length.

Loading an export needs `import tensorflow_text` first (its ops); nothing else from this repo.
Every export uses only ops that the stock `tensorflow_model_server` 2.16.1 registers (core TF
and tensorflow-text 2.12.1's `ops_lib`); `serving.op_check` refuses one that does not before its
version appears, unless `allow_ops` names the extra ops (a server built with them).

The command line over these is `serving/export.py` (`python -m serving.export`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from bert_tf import fileio
from bert_tf import options as bert_options
from bert_tf.checkpoints import find_encoder, has_pretraining_heads
from bert_tf.tasks.options import SquadOptions
from bert_tf.tasks.squad import ingraph
from bert_tf.text.tokenization import (
    BertPreprocessor,
    mask_aware_features,
    pad_to_length,
    pair_features,
    trim_to_longest,
)
from serving import op_check
from serving.signatures import CLASS_NAMES_ASSET, WARMUP_FILE, set_method_names

VOCAB_ASSET = os.path.join("assets", "vocab.txt")
SQUAD_OPTIONS_ASSET = os.path.join("assets", "squad_options.json")

_SQUAD = SquadOptions()  # the declared defaults (run_squad's)
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


def _first_missing_folder(path: str) -> str | None:
    """The outermost of `path` and its parents that does not exist (None: `path` exists)."""
    missing = None
    while not tf.io.gfile.isdir(path):
        missing, parent = path, os.path.dirname(path.rstrip("/"))
        if parent in ("", path) or parent.endswith(":"):  # a root, or "scheme:" of a URI
            break
        path = parent
    return missing


def _write_version(
    archive: keras.export.ExportArchive,
    export_dir: str | os.PathLike,
    version: int | None,
    vocabulary: Sequence[str],
    warmup: list[dict[str, list[str]]],
    method_names: dict[str, str] | None = None,
    extra_files: dict[str, str] | None = None,
    allow_ops: Sequence[str] = (),
) -> str:
    """Writes `archive` as `<export_dir>/<version>` (atomically); returns that path.

    `extra_files`: {path relative to the version folder: text} written beside the model.
    Raises `op_check.OpsOutsideError` before the version appears (and removes the folders it
    created for `export_dir`) if the model uses an op that the stock TF Serving lacks and
    `allow_ops` does not name.
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
    created = _first_missing_folder(export_dir)
    tf.io.gfile.makedirs(export_dir)
    # Written under a non-numeric name beside the versions, which TF Serving's poller ignores,
    # then renamed; default permissions, so a model server running as another user (a TF
    # Serving container with runAsNonRoot) reads it. Local or any tf.io.gfile URI (gs://).
    try:
        with fileio.atomic_dir(target, prefix=f".tmp-export-{version}-") as tmp:
            archive.write_out(tmp, verbose=False)
            # Before the version appears: the stock model server must have every op.
            op_check.check_ops(tmp, allow_ops, shown_as=target)
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
                    writer.write(
                        _warmup_log(os.path.basename(export_dir), inputs).SerializeToString()
                    )
    except BaseException:
        # Nothing left behind: not even the folders this export created for the model (while
        # they hold no file).
        if created and not any(files for _, _, files in tf.io.gfile.walk(created)):
            tf.io.gfile.rmtree(created)
        raise
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
    allow_ops: Sequence[str] = (),
) -> str:
    """Exports a `BertEncoder` (or a task model's encoder); returns the version path.

    `serving_default`: `text` -> `pooled_output` [batch, H], `sequence_output` [batch, S, H],
    `input_mask` [batch, S] (S = `preprocessor.seq_length`). A `BertPretrainer` also gets
    `fill_mask` and `pretraining_logits` (see the module docstring). `version` defaults to the
    next free integer. `allow_ops`: ops the target model server has beyond the stock TF
    Serving's (`serving.op_check`); any other op outside that list refuses the export.
    """
    encoder = find_encoder(model)

    def serve(text):
        features = preprocessor(text)
        outputs = encoder(trim_to_longest(features), training=False)
        mask = features["input_mask"]
        sequence_output = pad_to_length(
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
        archive,
        export_dir,
        version,
        preprocessor.tokenizer.vocabulary,
        _ENCODER_WARMUP,
        allow_ops=allow_ops,
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
    allow_ops: Sequence[str] = (),
) -> str:
    """Exports a `BertClassifier` with `serving_default` and `classify` (or `regress`).

    `serving_default`: `text_a`, `text_b` -> `logits`, `probabilities` [batch, C] and `label`
    (the name from `label_names`, else the int32 class id); with `regression=True` (a
    1-output classifier) -> `outputs` [batch]. With `single_segment=True` (a model trained on
    single sentences) `serving_default` takes `text_a` alone. `classify` / `regress` take
    serialized tf.Examples (`inputs`) with bytes features `text_a` and optionally `text_b`.
    `allow_ops`: as `export_encoder`'s.
    """
    num_classes = classifier.output_shape[-1]
    if regression and num_classes != 1:
        raise ValueError(f"regression needs a 1-output classifier, this one has {num_classes}")
    if label_names is not None and len(label_names) != num_classes:
        raise ValueError(
            f"label_names has {len(label_names)} names for a {num_classes}-class classifier"
        )
    class_names = list(label_names or [str(i) for i in range(num_classes)])
    names = tf.constant(class_names)

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
        allow_ops=allow_ops,
        extra_files=None
        if regression
        else {CLASS_NAMES_ASSET: json.dumps(class_names, ensure_ascii=False) + "\n"},
    )


# --- SQuAD ----------------------------------------------------------------------------------------


def export_squad(
    span_model: keras.Model,
    preprocessor: BertPreprocessor,
    export_dir: str | os.PathLike,
    version: int | None = None,
    doc_stride: int = _SQUAD.doc_stride,
    max_query_length: int = _SQUAD.max_query_length,
    max_answer_length: int = _SQUAD.max_answer_length,
    version_2_with_negative: bool = _SQUAD.version_2_with_negative,
    null_score_diff_threshold: float = _SQUAD.null_score_diff_threshold,
    n_best_size: int = _SQUAD.n_best_size,
    allow_ops: Sequence[str] = (),
) -> str:
    """Exports a `BertSpanLabeler`: `serving_default` (`question`, `context`) ->
    `bert_tf.tasks.squad.ingraph.squad_answers`, which answers as `run_squad --do_predict` with
    the same options (its `n_best_size` start and end candidates per window included).

    `preprocessor.seq_length` is the window length (google-research `max_seq_length`). A SQuAD
    v2.0 model (`version_2_with_negative`) answers "" when its null score wins by more than
    `null_score_diff_threshold` (a constant in the graph) and also returns `null_score_diff`.
    The decoding options are written to `assets/squad_options.json` for users to read.
    `allow_ops`: as `export_encoder`'s. The options' bounds are run_squad's flags'
    (`bert_tf.tasks.options.SquadOptions`).
    """
    squad = SquadOptions(
        doc_stride, max_query_length, max_answer_length, n_best_size, version_2_with_negative
    )
    bert_options.check(dataclasses.replace(squad, null_score_diff_threshold=0.0))
    if not 1 <= max_query_length <= preprocessor.seq_length - 4:
        raise ValueError(
            f"max_query_length must be in 1..{preprocessor.seq_length - 4} (seq_length "
            f"{preprocessor.seq_length} minus [CLS], two [SEP] and one context token), "
            f"got {max_query_length}"
        )
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
        "n_best_size": n_best_size,
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
            n_best_size,
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
        allow_ops=allow_ops,
    )
