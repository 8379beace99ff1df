"""The Kubeflow/Vertex commands docs/scaling.md and the README show, run as shown (placeholders
substituted: conftest.PLACEHOLDERS) up to the network call: compile, then load the file the way
the upload would."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tfx_pipeline import run

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def test_docs_show_both_runners(pipeline_helpers):
    commands = pipeline_helpers.cluster_commands()
    runners = {a for c in commands for a in c if a.startswith("--runner=")}
    assert runners == {"--runner=kubeflow", "--runner=vertex"}


def test_shown_compile_command_works_and_its_file_loads(
    shown_cluster_command, tmp_path, monkeypatch, pipeline_helpers
):
    """(Parametrised by conftest.py: one test per command shown.)"""
    args = shown_cluster_command
    monkeypatch.chdir(tmp_path)  # the commands write pretrain.yaml / pretrain.json here
    pipeline_helpers.run_in_process(run, *args)
    (spec_arg,) = [a for a in args if a.startswith("--output_spec_file=")]
    spec_file = tmp_path / spec_arg.split("=", 1)[1]
    if spec_file.suffix == ".yaml":
        # What `kfp pipeline create` / `Client().create_run_from_pipeline_package` upload: the
        # bare PipelineSpec (the kfp SDK itself conflicts with the lock; the proto is the check).
        import yaml

        spec = pipeline_helpers.parse_pipeline_spec(yaml.safe_load(spec_file.read_text()))
        assert spec.schema_version == "2.1.0" and spec.root.dag.tasks
    else:
        # `aiplatform.PipelineJob(template_path=...)` reads and checks the job offline; only
        # `.submit()` would reach Vertex.
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import aiplatform

        job = aiplatform.PipelineJob(
            display_name="bert-pretraining",
            template_path=str(spec_file),
            pipeline_root="gs://bucket/root",
            project="p",
            location="us-central1",
            credentials=AnonymousCredentials(),
        )
        assert job.pipeline_spec["schemaVersion"] == "2.1.0"


def test_compile_prints_only_its_result(tmp_path, pipeline_helpers):
    """A compile is a program of its own (absl's INFO lines on): TFX's and Beam's INFO lines
    while they load ("tensorflow_io is not available", "Using Any for unsupported type", ~75 of
    them) and Python 3.10's FutureWarning are not shown, only the result."""
    # The one with --gpu_image (docs/scaling.md's), for which TFX also logs a false warning.
    commands = [c for c in pipeline_helpers.cluster_commands() if "--runner=kubeflow" in c]
    args = next(c for c in commands if any(a.startswith("--gpu_image=") for a in c))
    (spec_arg,) = [a for a in args if a.startswith("--output_spec_file=")]
    result = subprocess.run(
        [sys.executable, "-m", "tfx_pipeline.run", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = (result.stdout + result.stderr).splitlines()
    assert output == [f"wrote {spec_arg.split('=', 1)[1]}"]


def test_the_readme_says_one_thing_about_a_second_make_demo():
    """A rerun reuses every component (test_pipelines.py's
    test_second_run_reuses_cached_components): no README sentence about a second run may say
    it evaluates or pushes again."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    demo = readme[readme.index("**`make demo`**") : readme.index("**`make test`**")]
    sentences = re.split(r"(?<=[.;])\s+", " ".join(demo.split()))
    about_rerun = [s for s in sentences if re.search(r"second (run|`make demo`)", s)]
    assert about_rerun
    for sentence in about_rerun:
        assert not re.search(r"scores the model again|as a new version", sentence), sentence
