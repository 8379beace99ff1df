#!/bin/sh
# Interpreter of our py_runtime toolchain: the repository's .venv python (made by `make setup`),
# which has every dependency (TensorFlow, TFX, pytest, ...). Bazel runs this file from a runfiles
# tree, where it is a symlink to tools/bazel/venv_python.sh in the source tree; resolving that link
# finds the repository root, and so the venv, wherever the clone lives.
set -e
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "error: $root/.venv/bin/python not found; run 'make setup' first" >&2
  exit 1
fi
# venv_site/sitecustomize.py: first-party modules only from runfiles (it says why).
PYTHONPATH="$here/venv_site${PYTHONPATH:+:$PYTHONPATH}" exec "$root/.venv/bin/python" "$@"
