"""`--flag=~/path`: the shell does not expand `~` after `=`; every script does
(`bert_tf.flags_util.run`), so the two spellings of a flag always mean the same."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from bert_tf import flags_util

REPO = Path(__file__).resolve().parents[1]
SCRIPT_PACKAGES = ("bert_tf", "serving", "tfx_pipeline", "demo", "bench", "experiments")


def test_expand_home_expands_every_given_string_and_list_flag(monkeypatch):
    monkeypatch.setenv("HOME", "/home/u")
    flag_values = flags.FlagValues()
    flags.DEFINE_string("init_checkpoint", None, "", flag_values=flag_values)
    flags.DEFINE_string("output_dir", "~/default", "", flag_values=flag_values)
    flags.DEFINE_list("input_files", [], "", flag_values=flag_values)
    flags.DEFINE_multi_string("sources", [], "", flag_values=flag_values)
    flags.DEFINE_string("text", None, "", flag_values=flag_values)
    flags.DEFINE_string("master", None, "", flag_values=flag_values)
    flags.DEFINE_integer("steps", 1, "", flag_values=flag_values)
    flags.DEFINE_alias("ckpt", "init_checkpoint", flag_values=flag_values)
    flag_values(
        [
            "prog",
            "--ckpt=~/bert/bert_model.ckpt",
            "--input_files=~/a.txt,gs://b/c.txt,x~/d",
            "--sources=~",
            "--sources=~/s",
            "--text=~/not a path",
            "--master=grpc://10.0.0.2:8470",
            "--steps=3",
        ]
    )
    flags_util.expand_home(flag_values, literal=("text",))
    assert flag_values.init_checkpoint == "/home/u/bert/bert_model.ckpt"
    assert flag_values.output_dir == "~/default"  # not given: defaults are the script's own
    assert flag_values.input_files == ["/home/u/a.txt", "gs://b/c.txt", "x~/d"]
    assert flag_values.sources == ["/home/u", "/home/u/s"]
    assert flag_values.text == "~/not a path"
    assert flag_values.master == "grpc://10.0.0.2:8470"


def _scripts() -> list[Path]:
    """Every module with an `if __name__ == "__main__":` block, except the reference
    environment's scripts (.venv-ref: they import nothing of this project)."""
    found = []
    for package in SCRIPT_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if not any(
                isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
                for node in tree.body
            ):
                continue
            imported = {
                name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for name in (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [alias.name for alias in node.names]
                )
            }
            if package != "experiments" or imported & {"bert_tf", "bench", "serving"}:
                found.append(path)
    return found


def test_every_script_starts_through_flags_util_run():
    """absl's `app.run` alone would leave `--flag=~/x` unexpanded."""
    scripts = _scripts()
    assert len(scripts) > 20
    offenders = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in scripts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "app"
    ]
    assert offenders == []


def _run(home: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        cwd=home,
        env={**os.environ, "HOME": str(home)},
        timeout=600,
    )


def test_export_reads_and_writes_tilde_paths(tmp_path, minilm_dir):
    (tmp_path / "minilm").symlink_to(minilm_dir)
    result = _run(
        tmp_path,
        "serving.export",
        "--task=encoder",
        "--init_checkpoint=~/minilm",
        "--export_dir=~/models/encoder",
        "--max_seq_length=16",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path / "models" / "encoder" / "1")
    assert (tmp_path / "models" / "encoder" / "1" / "saved_model.pb").exists()
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize(
    "command, flag",
    [
        (["bert_tf.run_squad", "--do_predict", "--output_dir=/tmp/x"], "predict_file"),
        (
            [
                "tfx_pipeline.run",
                "--pipeline=pretrain",
                "--pipeline_root=/tmp/r",
                "--serving_model_dir=/tmp/s",
            ],
            "data_root",
        ),
    ],
)
def test_scripts_and_the_pipeline_runner_name_the_expanded_path(tmp_path, command, flag):
    result = _run(tmp_path, *command, f"--{flag}=~/missing")
    assert result.returncode != 0
    assert f"--{flag}={tmp_path / 'missing'}: no such" in result.stderr.strip().splitlines()[-1]
