"""The ops of a SavedModel that the stock `tensorflow_model_server` does not register.

TF Serving loads a version only if its binary registers every op in the serving graph and in
every function of its library; a missing one fails the load ("Op type not registered"). The
stock binary (the `tensorflow/serving` images, Vertex AI's prebuilt TF containers) registers
core TensorFlow of its release plus the tensorflow-text `ops_lib` it links, and TF Serving
2.13-2.19 all link tensorflow-text 2.12.1's, which has no trimmer ops (`TFText>RoundRobinTrim`,
from `tf_text.RoundRobinTrimmer`, joined it in 2.13). This repo's own server imports
tensorflow_text and so runs such a model anyway: only this check sees the difference.

`tf_serving_ops.txt` beside this module is the stock TF Serving 2.16.1 list (one op per line;
its header says where each part came from; `scripts/gen_tf_serving_ops.py` regenerates it).
`serving.export` runs `check_ops` on every version before it appears, `ServingCheck` before
the Pusher, and `serving.server` logs `ops_outside` of each version it loads.

Example:

    ops_outside("/models/bert/1")   # [] : the stock server loads it
    check_ops("/models/bert/1", allow_ops=["TFText>RoundRobinTrim"])  # a server that has it
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable

from serving.signatures import read_serving_meta_graph

STOCK_OPS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_serving_ops.txt")


class OpsOutsideError(ValueError):
    """An export uses ops that the stock model server does not register."""


@functools.cache
def _stock_list() -> tuple[dict[str, str], frozenset[str]]:
    # A file of this package, not a user path: read with plain open.
    with open(STOCK_OPS_FILE, encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = dict(m.groups() for m in map(re.compile(r"# (\w+): (\S+)$").match, lines) if m)
    ops = frozenset(line for line in lines if line and not line.startswith("#"))
    return header, ops


def stock_ops() -> frozenset[str]:
    """The op names of `tf_serving_ops.txt`."""
    return _stock_list()[1]


def stock_server() -> str:
    """The server the list describes, e.g. "tensorflow_model_server 2.16.1 (tensorflow-text
    v2.12.1 ops_lib)"."""
    header = _stock_list()[0]
    return (
        f"tensorflow_model_server {header['tf_serving_version']} "
        f"(tensorflow-text {header['tensorflow_text_ops_lib']} ops_lib)"
    )


def used_ops(export_dir: str | os.PathLike) -> set[str]:
    """Every op type in the serving MetaGraphDef's graph and in every library function
    (nested calls, while/cond bodies included: they are library functions too). A node whose
    type names a library function is a call of it, not an op."""
    meta_graph = read_serving_meta_graph(os.fspath(export_dir))
    graph = meta_graph.graph_def
    functions = {f.signature.name for f in graph.library.function}
    nodes = [*graph.node, *(node for f in graph.library.function for node in f.node_def)]
    return {node.op for node in nodes} - functions


def ops_outside(export_dir: str | os.PathLike, allow_ops: Iterable[str] = ()) -> list[str]:
    """The sorted ops of `export_dir` that neither the stock list nor `allow_ops` has."""
    return sorted(used_ops(export_dir) - stock_ops() - set(allow_ops))


def check_ops(
    export_dir: str | os.PathLike,
    allow_ops: Iterable[str] = (),
    allow_hint: str = "pass --allow_ops={ops}",
    shown_as: str | None = None,
) -> None:
    """Raises OpsOutsideError (one line: the ops, the server version, how to allow them) if
    `export_dir` uses an op outside the stock list and `allow_ops`. `allow_hint` ends the
    message ({ops}: the comma-separated ops); `shown_as`: the path the message names (the
    final version folder of one still being written)."""
    outside = ops_outside(export_dir, allow_ops)
    if outside:
        raise OpsOutsideError(
            f"{shown_as or os.fspath(export_dir)} uses op(s) {', '.join(outside)} that the stock "
            f"{stock_server()} does not register, so it would not load there; if the target "
            f"server has them, {allow_hint.format(ops=','.join(outside))}"
        )
