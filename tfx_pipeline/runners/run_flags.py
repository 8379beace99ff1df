"""`python -m tfx_pipeline.run`'s flags: their definitions (every option flag from
`configs.option_specs()`), the runners they choose between, and the values the other runner
modules derive from them. No TensorFlow or TFX import: the flags are checked before either.

    flag_values = flags.FlagValues()
    run_flags.define_flags(flag_values)
    flag_values(["run", "--pipeline=classify", ...])
    options = run_flags.pipeline_options(flag_values, configs.ClassificationOptions)
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import flags

from bert_tf import options
from bert_tf.tasks import glue  # light (no TensorFlow): the flag checks stay fast
from tfx_pipeline import configs

# The flags `define_flags` defines belong to the script that calls it (absl's key flags: they
# show in its `--help`, under its name in `--helpfull`), not to this module.
flags.disclaim_key_flags()

CLUSTER_RUNNERS = ("kubeflow", "vertex")
CLUSTER_RUNNERS_AND_LOCAL = ["local", "beam", *CLUSTER_RUNNERS]
# Every field of the options dataclasses is a flag of the same name (default: the dataclass's of
# the chosen pipeline), except init_checkpoint: a flag of its own (every pipeline takes one).
OPTION_SPECS = {
    name: spec for name, spec in configs.option_specs().items() if name != "init_checkpoint"
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines `python -m tfx_pipeline.run`'s flags (in `flag_values`, absl's global FLAGS by
    default).

    Called when the program runs, never on import, so tests and other scripts can import it;
    tests define them on a fresh FlagValues (and run the program's `main` in-process on one).
    """
    flags.DEFINE_enum(
        "pipeline",
        "pretrain",
        ["pretrain", "classify", "squad"],
        "Which pipeline.",
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "runner",
        "local",
        CLUSTER_RUNNERS_AND_LOCAL,
        "local/beam run the pipeline; kubeflow (KFP v2 PipelineSpec YAML) and vertex (Vertex AI "
        "PipelineJob JSON) compile it to --output_spec_file.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "data_root",
        None,
        "Corpus folder (pretrain), task data folder (classify) or SQuAD JSON folder (squad).",
        flag_values=flag_values,
    )
    # --init_checkpoint --vocab_file: the scripts' declarations
    options.define_flags(
        options.ModelSourceOptions,
        flag_values,
        only=("init_checkpoint", "vocab_file"),
        notes={
            "init_checkpoint": "required for classify and squad; pretrain: an optional warm start",
            "vocab_file": "else the uncased BERT vocab",
        },
    )
    flags.DEFINE_string(
        "pipeline_root",
        None,
        "Folder (or gs:// path) for the pipeline's artifacts.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "metadata_path",
        None,
        "local/beam: SQLite ML Metadata file (default: <pipeline_root>/metadata.sqlite; "
        "required when --pipeline_root is remote).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "log_file",
        None,
        "local/beam: the run's full log (default: <pipeline_root>/logs/run-<time>.log, or beside "
        "--metadata_path when the pipeline root is remote).",
        flag_values=flag_values,
    )
    flags.DEFINE_boolean(
        "verbose",
        False,
        "local/beam: show the full log on the console too, not only progress and the summary.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "serving_model_dir",
        None,
        "Pusher's base folder: <it>/<model_name>/<ver>/.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "model_name",
        "bert",
        "Name of the model (served as: a folder under --serving_model_dir).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "beam_pipeline_args",
        None,
        "Beam args, comma-separated (default: the DirectRunner, in this process for local/beam "
        f"runners on a local --data_root under {configs.IN_MEMORY_MAX_DATA_BYTES >> 20} MiB, "
        "else a worker process per core).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "output_spec_file",
        None,
        "kubeflow/vertex: the file to write (.yaml for kubeflow, .json for vertex; default "
        "<pipeline>.yaml / <pipeline>.json).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "image",
        None,
        "kubeflow/vertex: container image of the components (the Dockerfile's).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "gpu_image",
        None,
        "kubeflow/vertex: container image of the Trainer and Tuner (Dockerfile.gpu's); "
        "default: --image.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "trainer_cpu",
        None,
        "kubeflow/vertex: the Trainer's (and Tuner's) CPU limit, e.g. 8 or 500m.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "trainer_memory",
        None,
        "kubeflow/vertex: the Trainer's (and Tuner's) memory limit, e.g. 32G or 30Gi.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "trainer_accelerator",
        None,
        "kubeflow/vertex: the Trainer's (and Tuner's) accelerators as TYPE:COUNT; TYPE is the "
        "Kubernetes resource on Kubeflow (nvidia.com/gpu:1), the accelerator type on Vertex "
        "(NVIDIA_TESLA_T4:1).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "trainer_replicas",
        1,
        "kubeflow/vertex: hosts the Trainer spans (with --distribution_strategy="
        "multi_worker_mirrored): kubeflow submits a TFJob of one Chief and N-1 Workers, vertex "
        "a CustomJob of a chief pool and a pool of N-1; --trainer_cpu/--trainer_memory/"
        "--trainer_accelerator/--gpu_image apply per replica. The Tuner stays on one host.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "trainer_machine_type",
        None,
        "kubeflow/vertex: each Trainer replica's machine type: on vertex a Vertex machine type "
        "(n1-standard-8, a2-highgpu-1g; runs the Trainer as a Vertex CustomJob, needed with "
        "--trainer_replicas > 1), on kubeflow the nodes' node.kubernetes.io/instance-type label "
        "(with --trainer_replicas > 1).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "vertex_project",
        None,
        "vertex: the GCP project of the Trainer's CustomJob (with --trainer_machine_type).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "vertex_region",
        "us-central1",
        "vertex: the region of the Trainer's CustomJob (with --trainer_machine_type).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "allowed_volume_paths",
        ["/mnt"],
        "kubeflow/vertex: folders mounted in the pods; a path flag (except --pipeline_root) "
        "may name a path under one of them instead of a remote URI.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "pipeline_name", None, "Pipeline name (default per pipeline).", flag_values=flag_values
    )
    flags.DEFINE_string(
        "schema_dir",
        None,
        "A curated schema's folder (its schema.pbtxt; e.g. a first run's "
        "<pipeline_root>/SchemaGen/schema/<id>): ImportSchemaGen pins it and ExampleValidator "
        "checks the data against it. Default: SchemaGen infers the schema from this run's data.",
        flag_values=flag_values,
    )
    options.define_shared_flags(
        OPTION_SPECS,
        flag_values,
        notes={"task_name": f"Tasks: {', '.join(glue.PROCESSORS)}."},
    )


def is_remote(path: str) -> bool:
    """Not on this machine's file system (fileio.is_remote also counts file://, read via gfile)."""
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    """A local path flag as a path (without a file:// scheme)."""
    return path.removeprefix("file://")


def required(flag_values: flags.FlagValues, *names: str) -> None:
    """Exits with a one-line error naming the flags of `names` that are not given."""
    missing = [f"--{n}" for n in names if not getattr(flag_values, n)]
    if missing:
        sys.exit(
            f"error: {', '.join(missing)} required for --pipeline={flag_values.pipeline} "
            f"--runner={flag_values.runner}"
        )


def pipeline_options(flag_values: flags.FlagValues, cls):
    """The options dataclass `cls` with the option flags given (the others: its defaults)."""
    values = {
        name: getattr(flag_values, name)
        for name in (f.name for f in dataclasses.fields(cls))
        if name in flag_values and getattr(flag_values, name) is not None
    }
    if flag_values.init_checkpoint and cls is configs.PretrainingOptions:
        values["init_checkpoint"] = flag_values.init_checkpoint
    return cls(**values)


def _folder_bytes(folder: str, limit: int) -> int | None:
    """The bytes of the files under a local `folder`, counted up to just past `limit`; None if
    it cannot be read."""
    total = 0
    try:
        for parent, _, files in os.walk(folder, onerror=_raise):
            for name in files:
                total += os.path.getsize(os.path.join(parent, name))
                if total > limit:
                    return total
    except OSError:
        return None
    return total


def _raise(error: OSError) -> None:
    raise error


def beam_pipeline_args(flag_values: flags.FlagValues) -> tuple[list[str], str]:
    """The Beam args of the pipeline's components and why: --beam_pipeline_args when given;
    local/beam runners on a small local --data_root (< configs.IN_MEMORY_MAX_DATA_BYTES): the
    DirectRunner in this process; otherwise the DirectRunner on every core (a cluster's
    container, or data too large for one process to be quicker)."""
    if flag_values.beam_pipeline_args:
        return list(flag_values.beam_pipeline_args), "--beam_pipeline_args"
    limit = configs.IN_MEMORY_MAX_DATA_BYTES
    data_root = flag_values.data_root
    if flag_values.runner not in CLUSTER_RUNNERS and data_root and not is_remote(data_root):
        size = _folder_bytes(local_path(data_root), limit)
        if size is not None and size <= limit:
            # No args: Beam's defaults are configs.IN_MEMORY_BEAM_PIPELINE_ARGS, and without
            # args TFX does not build an sdist of itself for Beam's workers in every Beam
            # component (~1.5 s each).
            return [], (
                f"in this process: --data_root holds {size / 2**20:.1f} MiB (<= {limit >> 20} MiB)"
            )
        if size is not None:
            return list(configs.DEFAULT_BEAM_PIPELINE_ARGS), (
                f"a worker process per core: --data_root holds more than {limit >> 20} MiB"
            )
    return list(configs.DEFAULT_BEAM_PIPELINE_ARGS), "a worker process per core"


def metadata_path(flag_values: flags.FlagValues) -> str:
    """local/beam: --metadata_path, or its default <pipeline_root>/metadata.sqlite."""
    return flag_values.metadata_path or os.path.join(flag_values.pipeline_root, "metadata.sqlite")
