"""The Kubeflow/Vertex commands docs/scaling.md and the README show, run as shown (placeholders
substituted) up to the network call: compile, then load the file the way the upload would."""

import re
import shlex
from pathlib import Path

import pytest

from tfx_pipeline import run

REPO = Path(__file__).resolve().parents[2]
# Placeholders of the docs -> stand-ins (the registry, bucket and project are never contacted).
PLACEHOLDERS = {
    "REGION-docker.pkg.dev/PROJECT/REPO": "us-docker.pkg.dev/p/r",
    "REGISTRY": "registry.example.com/team",
    "TAG": "test",
    "BUCKET": "bucket",
    "PROJECT": "p",
    "REGION": "us-central1",
}


def _shown_commands(path: Path, program: str) -> list[list[str]]:
    """Every `python -m <program> ...` line of the file's bash blocks, continuations joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith(f"python -m {program} "):
                continue
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", program] and "--runner=local" not in words:
                for old, new in PLACEHOLDERS.items():
                    words = [w.replace(old, new) for w in words]
                commands.append(words[3:])
    return commands


def _cluster_commands() -> list[list[str]]:
    commands = _shown_commands(REPO / "docs" / "scaling.md", "tfx_pipeline.run")
    commands += _shown_commands(REPO / "README.md", "tfx_pipeline.run")
    return [c for c in commands if any(a in ("--runner=kubeflow", "--runner=vertex") for a in c)]


def test_docs_show_both_runners():
    runners = {a for c in _cluster_commands() for a in c if a.startswith("--runner=")}
    assert runners == {"--runner=kubeflow", "--runner=vertex"}


@pytest.mark.parametrize("args", _cluster_commands(), ids=lambda a: " ".join(a)[:60])
def test_shown_compile_command_works_and_its_file_loads(
    args, tmp_path, monkeypatch, pipeline_helpers
):
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
