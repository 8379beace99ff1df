"""Loaded at startup by every Python that Bazel runs (tools/bazel/venv_python.sh puts it on the path).

`make setup` installs this project into .venv in editable mode, whose import hook serves
`bert_tf.*`, `serving.*`, ... from the source tree. Under Bazel the project's modules must come
only from the target's runfiles, so that a missing `deps` entry fails as an ImportError instead of
passing unnoticed: drop that hook.
"""

import sys

sys.meta_path[:] = [
    finder for finder in sys.meta_path if not finder.__module__.startswith("__editable__")
]
