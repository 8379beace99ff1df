"""`--runner=kubeflow` and `vertex`: compile the pipeline, run nothing. KubeflowV2DagRunner in the
pipeline spec 2.1 form: `kubeflow` writes the KFP v2 PipelineSpec YAML that open-source Kubeflow
Pipelines uploads, `vertex` the PipelineJob JSON that Vertex AI Pipelines submits. Their flag
checks (no path of the compiling machine, the Trainer's resources) need no TensorFlow or TFX
import; compiling does (lazily).

    resources = kubeflow.trainer_resources(flag_values)  # after checks.check_flags
    output = kubeflow.compile_pipeline(flag_values, resources)  # the spec file written

A Trainer spanning hosts (`--trainer_replicas`, `--trainer_machine_type`: `trainer_cluster`)
compiles to a TFJob-submitting Trainer on kubeflow (components/distributed_trainer.py) and TFX's
Vertex training extension on vertex (components/vertex_trainer.py).
"""

from __future__ import annotations

import json
import os
import re
import sys

from absl import flags

from tfx_pipeline import configs
from tfx_pipeline.components import tfjob  # no TFX: the TFJob's fields and checks
from tfx_pipeline.runners import build, run_flags

SPEC_SUFFIXES = {"kubeflow": (".yaml", ".yml"), "vertex": (".json",)}
# Path flags the pods read or write: the compiling machine's files are not there.
_PATH_FLAGS = ("data_root", "pipeline_root", "serving_model_dir", "init_checkpoint", "vocab_file")
# Kubernetes quantity suffixes in GB, as the KFP SDK's set_memory_limit converts them.
_MEMORY_GB = {
    **{unit: 1000.0 ** (i - 3) for i, unit in enumerate("KMGTPE", start=1)},
    **{unit + "i": 1024.0**i / 1e9 for i, unit in enumerate("KMGTPE", start=1)},
}


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return os.path.isabs(path) and os.path.commonpath([path, folder]) == folder


def check_cluster_flags(flag_values: flags.FlagValues) -> None:
    """kubeflow/vertex: exits with a one-line error on a flag the pods could not use."""
    run_flags.required(flag_values, "image")
    runner, pipeline_name = flag_values.runner, flag_values.pipeline_name
    if pipeline_name and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", pipeline_name):
        sys.exit(
            f"error: --pipeline_name={pipeline_name}: --runner={runner} needs "
            "lowercase letters, digits and '-' (at most 128, starting with a letter or digit)"
        )
    suffixes = SPEC_SUFFIXES[runner]
    output = flag_values.output_spec_file
    if output and not output.endswith(suffixes):
        sys.exit(
            f"error: --output_spec_file={output}: --runner={runner} writes "
            f"a {' or '.join(suffixes)} file"
        )
    volumes = [v for v in flag_values.allowed_volume_paths or [] if v]
    for name in _PATH_FLAGS:
        value = getattr(flag_values, name)
        if not value or run_flags.is_remote(value):
            continue
        # KFP and Vertex keep artifacts in an object store: the pipeline root must be one.
        allowed = [] if name == "pipeline_root" else volumes
        if name in ("vocab_file", "init_checkpoint"):
            allowed = [*allowed, configs.IMAGE_CACHE_DIR]  # fetched into the image at build
        if any(_under(value, folder) for folder in allowed):
            continue
        where = f" or a path under {', '.join(allowed)} (--allowed_volume_paths)" if allowed else ""
        sys.exit(
            f"error: --{name}={value} is a local path; --runner={runner} needs a remote "
            f"URI (gs://, s3://, ...){where}"
        )


def trainer_resources(flag_values: flags.FlagValues) -> dict | None:
    """--trainer_cpu/--trainer_memory/--trainer_accelerator as ResourceSpec fields (cpu in
    cores, memory in GB, as the KFP SDK writes them); None when none is set. Exits with a
    one-line error on a malformed value."""
    resources = {}
    cpu_flag = flag_values.trainer_cpu
    if cpu_flag:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", cpu_flag)
        cpu = match and float(match[1]) / (1000 if match[2] else 1)
        if not cpu:
            sys.exit(f"error: --trainer_cpu={cpu_flag}: expected cores, e.g. 8 or 500m")
        resources["cpu_limit"] = cpu
    memory_flag = flag_values.trainer_memory
    if memory_flag:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]i?)", memory_flag)
        memory = match and float(match[1]) * _MEMORY_GB[match[2]]
        if not memory:
            sys.exit(
                f"error: --trainer_memory={memory_flag}: expected a size with a unit, "
                "e.g. 32G or 30Gi"
            )
        resources["memory_limit"] = memory
    accelerator_flag = flag_values.trainer_accelerator
    if accelerator_flag:
        match = re.fullmatch(r"([^:\s]+):(\d+)", accelerator_flag)
        if not match or int(match[2]) < 1:
            sys.exit(
                f"error: --trainer_accelerator={accelerator_flag}: expected TYPE:COUNT, "
                "e.g. nvidia.com/gpu:1 (Kubeflow) or NVIDIA_TESLA_T4:1 (Vertex)"
            )
        resources["accelerator"] = {"type": match[1], "count": int(match[2])}
    return resources or None


# TFX's Google Cloud AI Platform Trainer extension's custom_config keys (TFX 1.16:
# tfx/extensions/google_cloud_ai_platform/{trainer/executor,constants}.py), by name: the flag
# checks import no TFX. components/vertex_trainer.py has TFX's own; a test checks they match.
_VERTEX_TRAINING_ARGS_KEY = "ai_platform_training_args"
_VERTEX_ENABLE_KEY = "ai_platform_enable_vertex"
_VERTEX_REGION_KEY = "ai_platform_vertex_region"
_VERTEX_FLAGS = ("vertex_project", "vertex_region")


def trainer_cluster(flag_values: flags.FlagValues, distribution_strategy: str) -> dict | None:
    """The custom_config entries of a Trainer spanning hosts (--trainer_replicas,
    --trainer_machine_type), None for the one-pod Trainer: on kubeflow a TFJob's replica specs
    (`distributed_trainer.TFJOB_KEY`), on vertex TFX's AI Platform Trainer keys with the
    CustomJob's worker pools. Exits with a one-line error on a value or combination that means
    nothing (`distribution_strategy`: the pipeline's --distribution_strategy)."""
    runner = flag_values.runner
    replicas, machine_type = flag_values.trainer_replicas, flag_values.trainer_machine_type
    vertex_given = [f"--{n}" for n in _VERTEX_FLAGS if flag_values[n].present]
    if replicas < 1:
        sys.exit(f"error: --trainer_replicas={replicas}: expected at least 1")
    if runner not in run_flags.CLUSTER_RUNNERS:
        given = (["--trainer_replicas"] if replicas != 1 else []) + (
            ["--trainer_machine_type"] if machine_type else []
        )
        if given or vertex_given:
            sys.exit(
                f"error: {', '.join(given + vertex_given)}: only for --runner=kubeflow or vertex"
            )
        return None
    if replicas > 1 and distribution_strategy != "multi_worker_mirrored":
        sys.exit(
            f"error: --trainer_replicas={replicas}: the replicas train together only with "
            f"--distribution_strategy=multi_worker_mirrored (got {distribution_strategy})"
        )
    spans = replicas > 1 or (runner == "vertex" and bool(machine_type))
    if vertex_given and not (runner == "vertex" and spans):
        sys.exit(
            f"error: {', '.join(vertex_given)}: only for --runner=vertex with "
            "--trainer_machine_type (the Trainer's CustomJob)"
        )
    if not spans:
        if machine_type:
            sys.exit(
                f"error: --trainer_machine_type={machine_type}: on --runner=kubeflow only with "
                "--trainer_replicas > 1 (the TFJob's nodes)"
            )
        return None
    image = flag_values.gpu_image or flag_values.image
    accelerator = trainer_resources(flag_values) or {}
    accelerator = accelerator.get("accelerator")
    if runner == "kubeflow":
        limits = {}
        if flag_values.trainer_cpu:
            limits["cpu"] = flag_values.trainer_cpu
        if flag_values.trainer_memory:
            limits["memory"] = flag_values.trainer_memory
        if accelerator:
            limits[accelerator["type"]] = str(accelerator["count"])
        template = tfjob.replica_template(replicas, image, limits, machine_type)
        errors = tfjob.check_template(template)
        if errors:
            sys.exit(f"error: --trainer_replicas={replicas}: {'; '.join(errors)}")
        return {tfjob.TFJOB_KEY: template}
    # vertex: a machine type sizes each replica; CPU and memory limits have no field there.
    given = [f"--{n}" for n in ("trainer_cpu", "trainer_memory") if getattr(flag_values, n)]
    if given:
        sys.exit(
            f"error: {', '.join(given)}: a Vertex Trainer's replicas are sized by "
            "--trainer_machine_type, not by limits"
        )
    if not machine_type:
        sys.exit(
            f"error: --trainer_replicas={replicas}: --runner=vertex needs "
            "--trainer_machine_type (e.g. n1-standard-8, a2-highgpu-1g)"
        )
    if not flag_values.vertex_project:
        sys.exit(
            f"error: --trainer_machine_type={machine_type}: --vertex_project required (the "
            "project of the Trainer's CustomJob)"
        )
    machine = {"machine_type": machine_type}
    if accelerator:
        machine.update(accelerator_type=accelerator["type"], accelerator_count=accelerator["count"])
    pool = {"machine_spec": machine, "replica_count": 1, "container_spec": {"image_uri": image}}
    pools = [pool] + ([{**pool, "replica_count": replicas - 1}] if replicas > 1 else [])
    return {
        _VERTEX_TRAINING_ARGS_KEY: {
            "project": flag_values.vertex_project,
            "worker_pool_specs": pools,
        },
        _VERTEX_ENABLE_KEY: True,
        _VERTEX_REGION_KEY: flag_values.vertex_region,
    }


def compile_job(tfx_pipeline, image: str, gpu_image: str | None, resources: dict | None) -> dict:
    """The Vertex PipelineJob of the pipeline (spec 2.1 form): its components in `image`
    (--image), the Trainer (and Tuner) in `gpu_image` (--gpu_image, if set) with `resources`
    (trainer_resources()); its pipelineSpec carries the pipeline root as defaultPipelineRoot and
    any runtime parameter values as defaults, so it stands alone."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx import v1 as tfx

    # Imported directly: tfx.v1's export of it is hidden when the full kfp SDK is absent;
    # compiling needs only kfp-pipeline-spec.
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kubeflow_v2
    from tfx.orchestration.kubeflow.v2 import pipeline_builder

    from tfx_pipeline.components.input_fingerprint import InputFingerprint

    # The components that train: the Trainer, and the Tuner (--tune), whose trials train too.
    trainers = [
        c
        for c in tfx_pipeline.components
        if isinstance(c, (tfx.components.Trainer, tfx.components.Tuner))
        # A Trainer spanning hosts: its replicas get the image and resources; its task waits.
        and not getattr(c, "SPANS_HOSTS", False)
    ]
    images = image
    if gpu_image and gpu_image != image:
        # KubeflowV2DagRunner's per-component images: component id -> image, else the default.
        # (TFX 1.16 then logs "DEFAULT_IMAGE_PATH_KEY is not found" with the check inverted.)
        images = {pipeline_builder.DEFAULT_IMAGE_PATH_KEY: image}
        images.update({trainer.id: gpu_image for trainer in trainers})
    if resources:
        spec = json_format.ParseDict(
            resources,
            pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(),
        )
        for trainer in trainers:
            trainer.with_platform_config(spec)
    # Spec 2.1: parameters as runtimeValue.constant, the only form open-source KFP's backend
    # reads (Vertex reads both; TFX's default is 2.0's constantValue).
    config = kubeflow_v2.KubeflowV2DagRunnerConfig(default_image=images, use_pipeline_spec_2_1=True)
    job = kubeflow_v2.KubeflowV2DagRunner(config=config).run(tfx_pipeline, write_out=False)
    spec, runtime = job["pipelineSpec"], job.get("runtimeConfig", {})
    spec["defaultPipelineRoot"] = runtime["gcsOutputDirectory"]
    tasks = spec["root"]["dag"]["tasks"]
    for component in tfx_pipeline.components:
        if isinstance(component, InputFingerprint):
            # Never cached: it must look at the files on every run (TFX sets the cache per
            # pipeline; KFP's SDK would write set_caching_options(False) as this).
            tasks[component.id].pop("cachingOptions", None)
    for task in tasks.values():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            # TFX 1.16 names a dynamic exec property's producer "<id>_task", a task that does
            # not exist (tasks are named by component id): KFP would refuse the spec.
            producer = parameter.get("taskOutputParameter", {})
            name = producer.get("producerTask", "")
            if name not in tasks and name.removesuffix("_task") in tasks:
                producer["producerTask"] = name.removesuffix("_task")
    for name, value in runtime.get("parameterValues", {}).items():
        inputs = spec["root"].setdefault("inputDefinitions", {}).setdefault("parameters", {})
        inputs.setdefault(name, {})["defaultValue"] = value
    return job


def write_spec(job: dict, path: str, runner: str) -> None:
    """kubeflow: the PipelineSpec alone as YAML (what KFP's compiler writes and its client
    uploads); vertex: the whole PipelineJob as JSON (what aiplatform.PipelineJob submits)."""
    import yaml
    from tfx.dsl.io import fileio

    folder = os.path.dirname(path)
    if folder and not fileio.exists(folder):
        fileio.makedirs(folder)
    with fileio.open(path, "w") as f:
        if runner == "kubeflow":
            f.write(
                f"# PIPELINE DEFINITION\n# Name: {job['pipelineSpec']['pipelineInfo']['name']}\n"
            )
            yaml.safe_dump(job["pipelineSpec"], f, sort_keys=True)
        else:
            json.dump(job, f, indent=2, sort_keys=True)


def compile_pipeline(flag_values: flags.FlagValues, resources: dict | None) -> str:
    """Builds the pipeline the flags describe (checks.check_flags() first; `resources`: its
    trainer_resources()) and writes its spec to --output_spec_file, by default
    <pipeline>.yaml (kubeflow) or <pipeline>.json (vertex): returns that path."""
    from tfx_pipeline import summary

    options = run_flags.pipeline_options(
        flag_values, configs.PIPELINE_OPTIONS[flag_values.pipeline]
    )
    cluster = trainer_cluster(flag_values, options.distribution_strategy)
    with summary.quiet_console():  # the result, not TFX's and Beam's INFO lines
        tfx_pipeline = build.build_pipeline(flag_values, trainer_cluster=cluster)
        suffix = SPEC_SUFFIXES[flag_values.runner][0]
        output = flag_values.output_spec_file or f"{flag_values.pipeline}{suffix}"
        job = compile_job(tfx_pipeline, flag_values.image, flag_values.gpu_image, resources)
        write_spec(job, output, flag_values.runner)
    return output
