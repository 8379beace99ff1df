"""The Kubeflow/Vertex commands docs/scaling.md and the README show, run as shown (placeholders
substituted: conftest.PLACEHOLDERS) up to the network call: compile, then load the file the way
the upload would."""

from tfx_pipeline import run


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
