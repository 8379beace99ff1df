r"""Writes `serving/tf_serving_ops.txt`: the ops the stock `tensorflow_model_server` registers.

The list is core TensorFlow's op registry plus the tensorflow-text `ops_lib` that TF Serving
links into its binary, one op per line, sorted, under a header saying where each part came
from. `serving/op_check.py` reads it to refuse exports the stock server cannot load.

- tensorflow-text part, from the sources: `tensorflow_serving/workspace.bzl` at
  `--tf_serving_tag` gives the `org_tensorflow_text` archive it builds (`text-X.Y.Z`);
  `tensorflow_serving/model_servers/BUILD` must link `@org_tensorflow_text//tensorflow_text:
  ops_lib`; in tensorflow/text at `vX.Y.Z`, `tensorflow_text/BUILD`'s `ops_lib` depends on
  `<name>_cc` targets, each made by `py_tf_text_library(name, cc_op_defs=...)`; the op names
  are the `REGISTER_OP("...")` names of those `cc_op_defs` files, and for
  `REGISTER_TF_OP_SHIM(Kernel)` the `kOpName` of the op class `Kernel` wraps (in the kernel
  headers the op file includes).
- core TF part: the op registry of the TensorFlow installed in this Python
  (`TF_GetAllOpList`), in a process that imports no tensorflow-text, minus the ops whose
  kernels only the Python runtime registers (`PYTHON_RUNTIME_OPS`) and the test ops the
  wheel's Python library registers for TensorFlow's own tests (`test_ops`). An approximation: the
  server builds TensorFlow from source at the commit its WORKSPACE pins (for TF Serving 2.16.1,
  TF 2.16.1; this venv has the 2.16.2 wheel, a patch release with the same ops), and the pip
  wheel also registers a few op families the server may not link (TPU, DTensor, TF-TRT,
  MLIR quantization's `CustomAggregator`). Our exports use none of those.

Not listed: the TensorFlow Decision Forests inference ops the server also links (our exports
use none; leaving them out only makes the check stricter).

`--check` needs no clone: it compares the file's core TF part with the installed TensorFlow
(tests/serving/test_op_check.py runs it, so a TensorFlow upgrade asks for a new list).

Both repositories are read with `git show <tag>:<path>` from local clones (bare ones work).

Example:

    git clone --bare https://github.com/tensorflow/serving /tmp/serving.git
    git clone --bare https://github.com/tensorflow/text /tmp/text.git
    .venv/bin/python scripts/gen_tf_serving_ops.py --tf_serving_tag=2.16.1 \
        --serving_repo=/tmp/serving.git --text_repo=/tmp/text.git \
        --output=serving/tf_serving_ops.txt
    .venv/bin/python scripts/gen_tf_serving_ops.py --check
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import tensorflow as tf
from absl import app, flags
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import test_ops as framework_test_ops

FLAGS = flags.FLAGS

# Ops whose kernels only TensorFlow's Python runtime registers (py_func, numpy_function): the
# model server has their definitions but cannot run them.
PYTHON_RUNTIME_OPS = ("EagerPyFunc", "PyFunc", "PyFuncStateless")
WORKSPACE = "tensorflow_serving/workspace.bzl"
SERVER_BUILD = "tensorflow_serving/model_servers/BUILD"
OPS_LIB = "@org_tensorflow_text//tensorflow_text:ops_lib"
TEXT_BUILD = "tensorflow_text/BUILD"
TEXT_OPS_KEY = "# tensorflow_text_ops:"


def define_flags() -> None:
    flags.DEFINE_string("tf_serving_tag", "2.16.1", "tensorflow/serving release tag.")
    flags.DEFINE_string("serving_repo", None, "Local clone of tensorflow/serving (bare is fine).")
    flags.DEFINE_string("text_repo", None, "Local clone of tensorflow/text (bare is fine).")
    flags.DEFINE_string("output", "serving/tf_serving_ops.txt", "File to write (or check).")
    flags.DEFINE_bool(
        "check",
        False,
        "Write nothing: exit 1 unless --output's core TF ops are the installed TensorFlow's "
        "(its tensorflow-text ops are those its header names).",
    )


def git_show(repo: str, rev: str, path: str) -> str:
    result = subprocess.run(
        ["git", "-C", repo, "show", f"{rev}:{path}"], capture_output=True, text=True
    )
    if result.returncode:
        raise ValueError(f"{repo}: cannot read {rev}:{path}: {result.stderr.strip()}")
    return result.stdout


def git_commit(repo: str, rev: str) -> str:
    result = subprocess.run(
        ["git", "-C", repo, "rev-parse", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if result.returncode:
        raise ValueError(f"{repo}: no tag {rev}: {result.stderr.strip()}")
    return result.stdout.strip()


def text_pin(workspace_bzl: str) -> tuple[str, str]:
    """(tensorflow-text tag, archive sha256) of the `org_tensorflow_text` archive."""
    block = workspace_bzl.split('name = "org_tensorflow_text"', 1)
    if len(block) != 2:
        raise ValueError(f"{WORKSPACE}: no org_tensorflow_text archive")
    version = re.search(r'strip_prefix = "text-([0-9.]+)"', block[1])
    sha256 = re.search(r'sha256 = "([0-9a-f]{64})"', block[1])
    if not version or not sha256:
        raise ValueError(f"{WORKSPACE}: org_tensorflow_text has no strip_prefix/sha256")
    return f"v{version.group(1)}", sha256.group(1)


def same_pin_tags(repo: str, pin: tuple[str, str]) -> list[str]:
    """The release tags (X.Y.Z) of tensorflow/serving whose workspace.bzl has the same
    tensorflow-text pin (tag and sha256)."""
    result = subprocess.run(["git", "-C", repo, "tag"], capture_output=True, text=True)
    releases = [t for t in result.stdout.split() if re.fullmatch(r"\d+\.\d+\.\d+", t)]
    same = []
    for tag in sorted(releases, key=lambda t: tuple(map(int, t.split(".")))):
        try:
            if text_pin(git_show(repo, tag, WORKSPACE)) == pin:
                same.append(tag)
        except ValueError:  # older layouts: no such file or archive
            continue
    return same


def tf_commit(workspace: str) -> str:
    """The TensorFlow commit TF Serving's WORKSPACE builds (`org_tensorflow`'s git_commit)."""
    found = re.search(r'name = "org_tensorflow",[^)]*?git_commit = "([0-9a-f]{40})"', workspace)
    if not found:
        raise ValueError("WORKSPACE: no org_tensorflow git_commit")
    return found.group(1)


def _build_targets(build: str) -> dict[str, dict]:
    """name -> keyword arguments (literals only) of every rule call in a BUILD file."""
    targets = {}
    for node in ast.walk(ast.parse(build)):
        if not isinstance(node, ast.Call):
            continue
        kwargs = {}
        for keyword in node.keywords:
            try:
                kwargs[keyword.arg] = ast.literal_eval(keyword.value)
            except ValueError:  # select(), glob(), ...: not needed here
                continue
        if isinstance(kwargs.get("name"), str):
            targets[kwargs["name"]] = kwargs
    return targets


def ops_lib_op_files(text_build: str) -> list[str]:
    """The `cc_op_defs` files (repo paths) of the libraries `ops_lib` depends on."""
    targets = _build_targets(text_build)
    files = []
    for dep in targets["ops_lib"]["deps"]:
        library = dep.lstrip(":").removesuffix("_cc")
        if library not in targets or "cc_op_defs" not in targets[library]:
            raise ValueError(f"{TEXT_BUILD}: ops_lib depends on {dep}, not a py_tf_text_library")
        files += [f.lstrip("/").replace(":", "/") for f in targets[library]["cc_op_defs"]]
    return files


_INCLUDE = re.compile(r'#include "(tensorflow_text/[^"]+)"')


def _included(repo: str, rev: str, source: str, depth: int = 3) -> list[str]:
    """The texts of the tensorflow_text headers `source` includes, transitively."""
    texts = []
    for path in _INCLUDE.findall(source):
        text = git_show(repo, rev, path)
        texts.append(text)
        if depth > 1:
            texts += _included(repo, rev, text, depth - 1)
    return texts


def registered_ops(repo: str, rev: str, op_file: str) -> list[str]:
    """Op names an op-definition file registers: REGISTER_OP and REGISTER_TF_OP_SHIM."""
    source = git_show(repo, rev, op_file)
    names = re.findall(r'REGISTER_OP\("([^"]+)"\)', source)
    kernels = re.findall(r"REGISTER_TF_OP_SHIM\((\w+)\)", source)
    headers = "\n".join(_included(repo, rev, source)) if kernels else ""
    for kernel in kernels:
        op_class = re.search(rf"class {kernel}\s*:\s*public\s+[\w:]*TfOpKernel<(\w+)>", headers)
        if not op_class:
            raise ValueError(f"{op_file}: kernel {kernel} not found in its headers")
        body = re.split(rf"class {op_class.group(1)}\b", headers, maxsplit=1)
        name = re.search(r'kOpName\[\] = "([^"]+)"', body[-1]) if len(body) == 2 else None
        if not name:
            raise ValueError(f"{op_file}: no kOpName for {op_class.group(1)}")
        names.append(name.group(1))
    if not names:
        raise ValueError(f"{op_file}: registers no op")
    return names


def core_ops() -> tuple[str, list[str]]:
    """(TF version, sorted core op names) from this process's registry (no tensorflow-text)."""
    if "tensorflow_text" in sys.modules:
        raise RuntimeError("tensorflow_text is imported: its ops would count as core TF's")
    buffer = pywrap_tf_session.TF_GetAllOpList()
    try:
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buffer))
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buffer)
    names = {op.name for op in op_list.op} - set(PYTHON_RUNTIME_OPS) - set(test_ops())
    return tf.__version__, sorted(names)


def test_ops() -> list[str]:
    """The ops of TensorFlow's own tests (tensorflow/python/framework/test_ops.cc), which the
    wheel's Python library registers: the names its generated wrappers pass to
    `_apply_op_helper`."""
    with tf.io.gfile.GFile(framework_test_ops.__file__) as f:
        names = re.findall(r'_apply_op_helper\(\s*"([^"]+)"', f.read())
    if not names:
        raise RuntimeError(f"{framework_test_ops.__file__}: no op names found")
    return sorted(set(names))


def _read_list(path: str) -> tuple[set[str], set[str]]:
    """(all ops, the tensorflow-text ones) of a list this script wrote."""
    with tf.io.gfile.GFile(path) as f:
        lines = f.read().splitlines()
    text_line = [line for line in lines if line.startswith(TEXT_OPS_KEY)]
    if len(text_line) != 1:
        raise ValueError(f"{path}: expected one '{TEXT_OPS_KEY}' header line")
    text_ops = set(filter(None, text_line[0].removeprefix(TEXT_OPS_KEY).strip().split(",")))
    return {line for line in lines if line and not line.startswith("#")}, text_ops


def check(path: str) -> None:
    """Exits 1 naming the differences if `path`'s core-TF ops are not this TF's registry."""
    try:
        ops, text_ops = _read_list(path)
    except (ValueError, OSError) as e:
        sys.exit(f"error: {e}")
    tf_version, core = core_ops()
    missing, extra = sorted(set(core) - ops), sorted(ops - text_ops - set(core))
    if missing or extra:
        sys.exit(
            f"error: {path} is not TensorFlow {tf_version}'s core op list: lacks {missing}, "
            f"has {extra} besides; regenerate it (see scripts/gen_tf_serving_ops.py)"
        )
    print(f"{path}: its {len(core)} core TF ops are TensorFlow {tf_version}'s")


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.check:
        check(FLAGS.output)
        return
    for name in ("serving_repo", "text_repo"):
        if not FLAGS[name].value:
            sys.exit(f"error: --{name} is required (a local clone)")
    tag = FLAGS.tf_serving_tag
    try:
        serving_commit = git_commit(FLAGS.serving_repo, tag)
        server_tf = tf_commit(git_show(FLAGS.serving_repo, tag, "WORKSPACE"))
        text_tag, text_sha256 = text_pin(git_show(FLAGS.serving_repo, tag, WORKSPACE))
        if OPS_LIB not in git_show(FLAGS.serving_repo, tag, SERVER_BUILD):
            raise ValueError(f"{SERVER_BUILD} at {tag} does not link {OPS_LIB}")
        text_commit = git_commit(FLAGS.text_repo, text_tag)
        same_pin = same_pin_tags(FLAGS.serving_repo, (text_tag, text_sha256))
        op_files = ops_lib_op_files(git_show(FLAGS.text_repo, text_tag, TEXT_BUILD))
        text_ops = sorted(
            {op for f in op_files for op in registered_ops(FLAGS.text_repo, text_tag, f)}
        )
    except ValueError as e:
        sys.exit(f"error: {e}")
    tf_version, core = core_ops()
    overlap = set(text_ops) & set(core)
    if overlap:
        sys.exit(f"error: tensorflow-text ops {sorted(overlap)} are also core TF ops")
    header = f"""\
# Ops the stock tensorflow_model_server {tag} registers: the check of serving/op_check.py.
# tf_serving_version: {tag}
# tensorflow_text_ops_lib: {text_tag}
# Generated by scripts/gen_tf_serving_ops.py --tf_serving_tag={tag} (its docstring says how);
# `--check` compares the core TF part with the installed TensorFlow. Do not edit by hand.
#
# tensorflow-text ({len(text_ops)} ops): tensorflow/serving tag {tag} (commit {serving_commit}):
#   {WORKSPACE} pins org_tensorflow_text to text-{text_tag[1:]}
#   (sha256 {text_sha256}),
#   {SERVER_BUILD} links {OPS_LIB} into the server.
#   The same pin (tag and sha256) in the releases {", ".join(same_pin)}.
#   tensorflow/text tag {text_tag} (commit {text_commit}):
#   {TEXT_BUILD}'s ops_lib deps -> the REGISTER_OP / REGISTER_TF_OP_SHIM (kOpName) names in
#   their cc_op_defs files (tensorflow_text/core/ops/): {", ".join(f.rsplit("/", 1)[1] for f in op_files)}.
{TEXT_OPS_KEY} {",".join(text_ops)}
# Core TF ({len(core)} ops): the op registry of the TensorFlow {tf_version} pip wheel
#   (TF_GetAllOpList in a process that did not import tensorflow_text), minus the ops only
#   the Python runtime has kernels for ({", ".join(PYTHON_RUNTIME_OPS)}) and the
#   {len(test_ops())} ops of TF's own tests (tensorflow/python/framework/test_ops). An
#   approximation of the server's core TF, built from source at the commit its WORKSPACE pins
#   ({server_tf}); the wheel may register a few ops the server
#   lacks (TPU, DTensor, TF-TRT).
# Not listed: the TF Decision Forests inference ops the server also links (stricter, not wrong).
"""
    with tf.io.gfile.GFile(FLAGS.output, "w") as f:
        f.write(header + "".join(op + "\n" for op in sorted({*core, *text_ops})))
    print(f"{FLAGS.output}: {len(core)} core TF ops + {len(text_ops)} tensorflow-text ops")


if __name__ == "__main__":
    define_flags()
    app.run(main)
