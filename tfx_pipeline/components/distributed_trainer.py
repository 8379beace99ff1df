"""A Trainer spanning hosts on open-source Kubeflow Pipelines: TFX's Trainer whose step submits a
Kubeflow Training Operator `TFJob` (one Chief, N - 1 Workers, `components/tfjob.py`), waits for
it and hands its model on. Every replica runs TFX's Trainer executor on the same inputs and
outputs (`ReplicaExecutor`: the module's run_fn under `--distribution_strategy=
multi_worker_mirrored`, the cluster from the TF_CONFIG the operator sets); the chief writes the
model and its run folder to the step's output URIs, the others to a scratch folder. Vertex's
worker pools run the same `ReplicaExecutor` (`components/vertex_trainer.py`).

    trainer = TFJobTrainer(run_fn=..., custom_config={**options, TFJOB_KEY: template}, ...)

`template` is `tfjob.replica_template(...)` (the flags' replicas, image, resources per replica);
the step itself only submits and waits, in the pipeline's CPU image.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from absl import logging
from tfx.components.trainer import component as trainer_component
from tfx.components.trainer import executor as trainer_executor
from tfx.dsl.components.base import base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import json_utils, name_utils

from tfx_pipeline.components import tfjob

TFJOB_KEY = tfjob.TFJOB_KEY  # custom_config: the TFJob's spec.tfReplicaSpecs, no command
JOB_NAME_PREFIX = "bert-trainer"
# In the Trainer's model_run folder, one per replica: its TF_CONFIG and what it trained in.
REPLICA_FILE = "replica-{type}-{index}.json"
MULTI_WORKER = "multi_worker_mirrored"


def replica_command(
    executor_class_path: str, input_dict: dict, output_dict: dict, exec_properties: dict
) -> list[str]:
    """The command a replica's container runs: TFX's executor runner on the step's own inputs,
    outputs and properties, as TFX's Vertex training client builds it."""
    return [
        "python",
        "-m",
        "tfx.scripts.run_executor",
        "--executor_class_path",
        executor_class_path,
        "--inputs",
        artifact_utils.jsonify_artifact_dict(input_dict),
        "--outputs",
        artifact_utils.jsonify_artifact_dict(output_dict),
        "--exec-properties",
        json.dumps(exec_properties, sort_keys=True),
    ]


def _custom_config(exec_properties: dict) -> dict[str, Any]:
    value = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null"
    return (json_utils.loads(value) if isinstance(value, str) else value) or {}


def _is_chief(tf_config: dict) -> bool:
    """As tf.distribute decides it: the chief (or master), else worker 0 of a chief-less
    cluster; a process without a cluster is alone, hence the chief."""
    cluster, task = tf_config.get("cluster") or {}, tf_config.get("task") or {}
    if not cluster:
        return True
    kind, index = task.get("type"), int(task.get("index", 0))
    if kind in ("chief", "master"):
        return True
    return kind == "worker" and index == 0 and not ({"chief", "master"} & set(cluster))


class ReplicaExecutor(trainer_executor.GenericExecutor):
    """TFX's Trainer executor in one replica of a multi-host Trainer: creates the
    multi_worker_mirrored strategy before any TensorFlow op (the run_fn's `trainer_lib.train`
    reuses it), records the replica in the run folder, and points a non-chief replica's outputs
    at a scratch folder (only the chief's model is the step's)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        options = _custom_config(exec_properties)
        replicas_in_sync = None
        if tf_config.get("cluster") and options.get("distribution_strategy") == MULTI_WORKER:
            from tfx_pipeline import trainer_lib  # TensorFlow: only a replica loads it

            replicas_in_sync = trainer_lib.get_strategy(MULTI_WORKER).num_replicas_in_sync
        chief = _is_chief(tf_config)
        task = tf_config.get("task") or {"type": "chief", "index": 0}
        run_dir = artifact_utils.get_single_uri(output_dict[standard_component_specs.MODEL_RUN_KEY])
        fileio.makedirs(run_dir)
        record = {"tf_config": tf_config, "chief": chief, "replicas_in_sync": replicas_in_sync}
        with fileio.open(os.path.join(run_dir, REPLICA_FILE.format(**task)), "w") as f:
            f.write(json.dumps(record, indent=1, sort_keys=True))
        if chief:
            super().Do(input_dict, output_dict, exec_properties)
            return
        scratch = tempfile.mkdtemp(prefix="bert_tfx-replica-")
        try:
            for key, artifacts in output_dict.items():
                for i, artifact in enumerate(artifacts):
                    artifact.uri = os.path.join(scratch, f"{key}-{i}")
            super().Do(input_dict, output_dict, exec_properties)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


class TFJobExecutor(base_executor.BaseExecutor):
    """Submits the Trainer as a TFJob (custom_config[TFJOB_KEY]: its replicas), waits for it to
    end; raises tfjob.TFJobFailed naming the job when it fails. The cluster client is
    `tfjob.client()`: the pod's own cluster, or local processes ($BERT_TFX_TFJOB_CLIENT=local)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        template = _custom_config(exec_properties).get(TFJOB_KEY)
        if not template:
            raise ValueError(f"custom_config has no {TFJOB_KEY!r}: not a TFJob Trainer")
        model_uri = artifact_utils.get_single_uri(output_dict[standard_component_specs.MODEL_KEY])
        command = replica_command(
            name_utils.get_full_name(ReplicaExecutor), input_dict, output_dict, exec_properties
        )
        job = tfjob.manifest(
            tfjob.job_name(JOB_NAME_PREFIX, model_uri), tfjob.pod_namespace(), template, command
        )
        tfjob.run(job, tfjob.client(), log=logging.info)


class TFJobTrainer(trainer_component.Trainer):
    """TFX's Trainer (same inputs, outputs and run_fn) whose step runs as a TFJob."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TFJobExecutor)
    SPANS_HOSTS = True  # kubeflow.compile_job: its task only waits (no GPU image, no resources)
