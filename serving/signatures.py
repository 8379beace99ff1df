"""Reads and rewrites the SignatureDefs stored in a SavedModel's `saved_model.pb`.

TF Serving routes Classify/Regress only to signatures whose `method_name` is
`tensorflow/serving/classify` / `tensorflow/serving/regress`. `tf.saved_model.save` writes
`tensorflow/serving/predict` for every signature and `tf.saved_model.load` hides the field, so the
export sets it by rewriting the proto after saving, and the server reads it from the proto.

Example:

>>> set_method_names("/models/clf/1", {"classify": tf.saved_model.CLASSIFY_METHOD_NAME})
>>> read_signature_defs("/models/clf/1")["classify"].method_name
'tensorflow/serving/classify'
"""

import os

import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from bert_tf import fileio

SAVED_MODEL_FILENAME = "saved_model.pb"


# TF Serving's warmup records inside a SavedModel version (replayed before it serves).
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# A classifier export's class names (a JSON list, index = class id): what its `classify`
# signature's `classes` holds, readable without loading the model (the pipeline's Evaluator).
CLASS_NAMES_ASSET = os.path.join("assets", "class_names.json")


def _read_saved_model(export_dir: str) -> saved_model_pb2.SavedModel:
    path = os.path.join(export_dir, SAVED_MODEL_FILENAME)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{export_dir}: no {SAVED_MODEL_FILENAME} (not a SavedModel directory)")
    saved_model = saved_model_pb2.SavedModel()
    with tf.io.gfile.GFile(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    return saved_model


def _serving_meta_graph(saved_model, export_dir: str) -> meta_graph_pb2.MetaGraphDef:
    # TF Serving loads the MetaGraphDef tagged exactly {"serve"} (--saved_model_tags default).
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == {tf.saved_model.SERVING}:
            return meta_graph
    raise ValueError(f"{export_dir}: no MetaGraphDef with tags {{'serve'}}")


def read_serving_meta_graph(export_dir: str) -> meta_graph_pb2.MetaGraphDef:
    """The MetaGraphDef TF Serving loads (tags {"serve"}) from `saved_model.pb`."""
    return _serving_meta_graph(_read_saved_model(export_dir), export_dir)


def read_signature_defs(export_dir: str) -> dict[str, meta_graph_pb2.SignatureDef]:
    """Returns the serving MetaGraphDef's SignatureDefs, method names included."""
    return dict(read_serving_meta_graph(export_dir).signature_def)


def set_method_names(export_dir: str, method_names: dict[str, str]) -> None:
    """Sets `SignatureDef.method_name` per signature key and rewrites `saved_model.pb` atomically.

    Args:
        export_dir: a SavedModel directory.
        method_names: signature key -> method name, e.g.
            `{"classify": tf.saved_model.CLASSIFY_METHOD_NAME}`.
    """
    saved_model = _read_saved_model(export_dir)
    signature_defs = _serving_meta_graph(saved_model, export_dir).signature_def
    unknown = sorted(set(method_names) - set(signature_defs))
    if unknown:
        raise ValueError(
            f"{export_dir}: signatures {unknown} not found; it has {sorted(signature_defs)}"
        )
    for key, method_name in method_names.items():
        signature_defs[key].method_name = method_name
    path = os.path.join(export_dir, SAVED_MODEL_FILENAME)
    # Write then rename so a server polling the folder never reads a half-written proto.
    fileio.atomic_write_bytes(path, saved_model.SerializeToString())
