"""A Trainer spanning hosts on Vertex AI: TFX's Google Cloud AI Platform Trainer extension in
Vertex mode, its CustomJob's worker pools from the flags (pool 0: the chief, pool 1: the other
replicas; machine type, accelerator type and count, image). Vertex sets each replica's TF_CONFIG
(`chief` for pool 0, `worker` for pool 1); each runs `distributed_trainer.ReplicaExecutor`.

Imports google-cloud-aiplatform (~8 s): the pipeline imports this module only when compiling
such a Trainer for Vertex.

    trainer = VertexTrainer(run_fn=..., custom_config={**options, **vertex_entries}, ...)
"""

from __future__ import annotations

from google.cloud.aiplatform_v1.types import custom_job
from google.protobuf import json_format
from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform import constants
from tfx.extensions.google_cloud_ai_platform.trainer import component as ai_platform_trainer
from tfx.extensions.google_cloud_ai_platform.trainer import executor as ai_platform_executor

from tfx_pipeline.components.distributed_trainer import ReplicaExecutor

# The custom_config keys TFX's extension reads (runners/kubeflow.py writes them by name: it
# imports no TFX); tests/tfx_pipeline/test_kubeflow_compile.py checks they match.
TRAINING_ARGS_KEY = ai_platform_executor.TRAINING_ARGS_KEY
ENABLE_VERTEX_KEY = constants.ENABLE_VERTEX_KEY
VERTEX_REGION_KEY = constants.VERTEX_REGION_KEY


def check_worker_pool_specs(specs) -> list[str]:
    """One line per worker pool spec that is not a Vertex `WorkerPoolSpec` (its v1 API's proto:
    an unknown field, a wrong type or an unknown accelerator type fails) or has no replica."""
    if not isinstance(specs, list) or not specs:
        return ["worker_pool_specs: expected a non-empty list"]
    errors = []
    for i, spec in enumerate(specs):
        try:
            parsed = json_format.ParseDict(spec, custom_job.WorkerPoolSpec.pb()())
        except json_format.ParseError as e:
            errors.append(f"worker_pool_specs[{i}]: {' '.join(str(e).split())}")  # one line
            continue
        if parsed.replica_count < 1:
            errors.append(f"worker_pool_specs[{i}].replica_count: expected at least 1")
        if not parsed.machine_spec.machine_type:
            errors.append(f"worker_pool_specs[{i}].machine_spec.machine_type: missing")
        if not parsed.container_spec.image_uri:
            errors.append(f"worker_pool_specs[{i}].container_spec.image_uri: missing")
    if not errors and specs[0].get("replica_count") != 1:
        errors.append("worker_pool_specs[0]: the chief's pool has one replica")
    return errors


class VertexExecutor(ai_platform_executor.GenericExecutor):
    """TFX's Vertex training executor, its replicas running ReplicaExecutor."""

    def _GetExecutorClass(self):
        return ReplicaExecutor


class VertexTrainer(ai_platform_trainer.Trainer):
    """TFX's AI Platform Trainer on Vertex; raises ValueError on worker pools Vertex refuses."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(VertexExecutor)
    SPANS_HOSTS = True  # kubeflow.compile_job: its task only waits (no GPU image, no resources)

    def __init__(self, custom_config: dict, **kwargs):
        pools = (custom_config.get(TRAINING_ARGS_KEY) or {}).get("worker_pool_specs")
        errors = check_worker_pool_specs(pools)
        if errors:
            raise ValueError("Vertex worker pools: " + "; ".join(errors))
        super().__init__(custom_config=custom_config, **kwargs)
