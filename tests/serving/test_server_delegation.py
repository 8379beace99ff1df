"""`python -m serving.server` execs a tensorflow_model_server found on PATH, with our flags."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

REPO = Path(__file__).resolve().parents[2]


def test_delegates_to_binary_on_path(tmp_path):
    record = tmp_path / "argv.json"
    fake = tmp_path / "tensorflow_model_server"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    flags = [
        "--port=8500",
        "--rest_api_port=8501",
        "--model_name=bert",
        "--model_base_path=/models/bert",
        "--enable_batching",
        "--tensorflow_intra_op_parallelism=1",
        "--tensorflow_inter_op_parallelism=2",
    ]
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(
        [sys.executable, "-m", "serving.server", *flags, "--host", "0.0.0.0"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    assert json.loads(record.read_text()) == flags  # --host is ours: not passed on
