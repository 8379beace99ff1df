r"""Runs or compiles a BERT TFX pipeline.

    python -m tfx_pipeline.run --pipeline=pretrain --data_root=corpus/ \
        --pipeline_root=/tmp/tfx/root --serving_model_dir=/tmp/serving --preset=tiny
    python -m tfx_pipeline.run --pipeline=classify --task_name=sst-2 --data_root=glue/SST-2 \
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt ...
    python -m tfx_pipeline.run --pipeline=squad --data_root=squad/ --init_checkpoint=$M \
        --max_seq_length=384 --doc_stride=128 ...  # squad/: train*.json, dev*.json
    python -m tfx_pipeline.run --pipeline=pretrain --runner=kubeflow --image=gcr.io/p/bert-tfx \
        --data_root=gs://bucket/corpus --pipeline_root=gs://bucket/root \
        --serving_model_dir=gs://bucket/serving --output_spec_file=pretrain.yaml \
        --gpu_image=gcr.io/p/bert-tfx-gpu --trainer_accelerator=nvidia.com/gpu:1 ...

Runners: `local` (LocalDagRunner, the default) and `beam` (BeamDagRunner) run the pipeline with
SQLite ML Metadata at --metadata_path (default: <pipeline_root>/metadata.sqlite); two others
compile and run nothing, with KubeflowV2DagRunner in the pipeline spec 2.1 form: `kubeflow`
writes the KFP v2 PipelineSpec YAML that open-source Kubeflow Pipelines uploads, `vertex` the
PipelineJob JSON that Vertex AI Pipelines submits. Their
components run in --image (the Trainer in --gpu_image if set), and they need no credentials or
network: Transform and Trainer name their functions by import path, which the image has. Without
--vocab_file the vocab.txt beside a local --init_checkpoint is used, else the MiniLM (uncased
BERT) vocab: the fetch cache's locally, the image's (`configs.IMAGE_VOCAB_FILE`) on
kubeflow/vertex. --beam_pipeline_args (comma-separated) replace
the default DirectRunner multi-processing args, e.g. with Dataflow's.

Every flag is checked before TensorFlow or TFX is imported (that import alone takes ~30 s): a
missing, misspelt or out-of-range flag, a flag of another pipeline or runner, or a local file or
folder that is not there fails at once with a one-line `error: ...`. Option flags (`--preset`,
`--learning_rate`, ...) are the fields of `configs.PretrainingOptions` / `ClassificationOptions`
/ `SquadOptions`, with their help and per-pipeline defaults (`--help` shows them).

local/beam: the run's full log (TFX, Beam, TensorFlow) goes to --log_file (default
<pipeline_root>/logs/run-<time>.log, named at the start and the end); the console shows progress
(components started and finished, with seconds; training steps), Python warnings and errors,
then a summary from ML Metadata: each component's state, the evaluator's metrics against its
thresholds, blessed or not, and where the model was pushed or why not (`tfx_pipeline.summary`).
--verbose keeps the full log on the console too.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import sys
import time

from absl import flags, logging

from bert_tf import flags_util
from bert_tf.tasks import glue  # light (no TensorFlow): the flag checks stay fast
from tfx_pipeline import configs, corpus_split

FLAGS = flags.FLAGS
CLUSTER_RUNNERS = ("kubeflow", "vertex")
CLUSTER_RUNNERS_AND_LOCAL = ["local", "beam", *CLUSTER_RUNNERS]
_SPEC_SUFFIXES = {"kubeflow": (".yaml", ".yml"), "vertex": (".json",)}
# Path flags the pods read or write: the compiling machine's files are not there.
_PATH_FLAGS = ("data_root", "pipeline_root", "serving_model_dir", "init_checkpoint", "vocab_file")
_TRAINER_RESOURCE_FLAGS = ("trainer_cpu", "trainer_memory", "trainer_accelerator")
# Flags of the local/beam runners only.
_LOCAL_FLAGS = ("metadata_path", "log_file")
# Kubernetes quantity suffixes in GB, as the KFP SDK's set_memory_limit converts them.
_MEMORY_GB = {
    **{unit: 1000.0 ** (i - 3) for i, unit in enumerate("KMGTPE", start=1)},
    **{unit + "i": 1024.0**i / 1e9 for i, unit in enumerate("KMGTPE", start=1)},
}
# Every field of the options dataclasses is a flag of the same name (default: the dataclass's of
# the chosen pipeline), except init_checkpoint: a flag of its own (every pipeline takes one).
_OPTION_SPECS = {
    name: spec for name, spec in configs.option_specs().items() if name != "init_checkpoint"
}
_FLAG_DEFINERS = {
    "int": "DEFINE_integer",
    "float": "DEFINE_float",
    "bool": "DEFINE_boolean",
    "str": "DEFINE_string",
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this script's flags (in `flag_values`, absl's global FLAGS by default).

    Called when the module runs as a program, never on import, so tests and other scripts can
    import it; tests run `main` in-process on a fresh FlagValues.
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
    flags.DEFINE_string(
        "vocab_file",
        None,
        "WordPiece vocab; default: the uncased BERT vocab.",
        flag_values=flag_values,
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
        "Served model name (a folder under serving_model_dir).",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "init_checkpoint",
        None,
        "Checkpoint to start from (required for classify and squad; pretrain: optional warm "
        "start): any format bert_tf's load_pretrained reads (a google-research bert_model.ckpt "
        "prefix, a folder, ...).",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "beam_pipeline_args", None, "Beam args, comma-separated.", flag_values=flag_values
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
    for spec in _OPTION_SPECS.values():
        text = spec.flag_help()
        if spec.name == "task_name":
            text += f" Tasks: {', '.join(glue.PROCESSORS)}."
        define = getattr(flags, _FLAG_DEFINERS[spec.type])
        define(spec.name, None, text, flag_values=flag_values)
        for alias in spec.aliases:  # an option's earlier name
            flags.DEFINE_alias(alias, spec.name, flag_values=flag_values)


def _is_remote(path: str) -> bool:
    # Not on this machine's file system (fileio.is_remote also counts file://, read via gfile).
    return "://" in path and not path.startswith("file://")


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return os.path.isabs(path) and os.path.commonpath([path, folder]) == folder


def check_cluster_flags() -> None:
    """kubeflow/vertex: exits with a one-line error on a flag the pods could not use."""
    _required("image")
    if FLAGS.pipeline_name and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", FLAGS.pipeline_name):
        sys.exit(
            f"error: --pipeline_name={FLAGS.pipeline_name}: --runner={FLAGS.runner} needs "
            "lowercase letters, digits and '-' (at most 128, starting with a letter or digit)"
        )
    suffixes = _SPEC_SUFFIXES[FLAGS.runner]
    if FLAGS.output_spec_file and not FLAGS.output_spec_file.endswith(suffixes):
        sys.exit(
            f"error: --output_spec_file={FLAGS.output_spec_file}: --runner={FLAGS.runner} writes "
            f"a {' or '.join(suffixes)} file"
        )
    volumes = [v for v in FLAGS.allowed_volume_paths or [] if v]
    for name in _PATH_FLAGS:
        value = getattr(FLAGS, name)
        if not value or _is_remote(value):
            continue
        # KFP and Vertex keep artifacts in an object store: the pipeline root must be one.
        allowed = [] if name == "pipeline_root" else volumes
        if name in ("vocab_file", "init_checkpoint"):
            allowed = [*allowed, configs.IMAGE_CACHE_DIR]  # fetched into the image at build
        if any(_under(value, folder) for folder in allowed):
            continue
        where = f" or a path under {', '.join(allowed)} (--allowed_volume_paths)" if allowed else ""
        sys.exit(
            f"error: --{name}={value} is a local path; --runner={FLAGS.runner} needs a remote "
            f"URI (gs://, s3://, ...){where}"
        )


def trainer_resources() -> dict | None:
    """--trainer_cpu/--trainer_memory/--trainer_accelerator as ResourceSpec fields (cpu in
    cores, memory in GB, as the KFP SDK writes them); None when none is set. Exits with a
    one-line error on a malformed value."""
    resources = {}
    if FLAGS.trainer_cpu:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)(m?)", FLAGS.trainer_cpu)
        cpu = match and float(match[1]) / (1000 if match[2] else 1)
        if not cpu:
            sys.exit(f"error: --trainer_cpu={FLAGS.trainer_cpu}: expected cores, e.g. 8 or 500m")
        resources["cpu_limit"] = cpu
    if FLAGS.trainer_memory:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]i?)", FLAGS.trainer_memory)
        memory = match and float(match[1]) * _MEMORY_GB[match[2]]
        if not memory:
            sys.exit(
                f"error: --trainer_memory={FLAGS.trainer_memory}: expected a size with a unit, "
                "e.g. 32G or 30Gi"
            )
        resources["memory_limit"] = memory
    if FLAGS.trainer_accelerator:
        match = re.fullmatch(r"([^:\s]+):(\d+)", FLAGS.trainer_accelerator)
        if not match or int(match[2]) < 1:
            sys.exit(
                f"error: --trainer_accelerator={FLAGS.trainer_accelerator}: expected TYPE:COUNT, "
                "e.g. nvidia.com/gpu:1 (Kubeflow) or NVIDIA_TESLA_T4:1 (Vertex)"
            )
        resources["accelerator"] = {"type": match[1], "count": int(match[2])}
    return resources or None


def _options(cls):
    values = {
        name: getattr(FLAGS, name)
        for name in (f.name for f in dataclasses.fields(cls))
        if name in FLAGS and getattr(FLAGS, name) is not None
    }
    if FLAGS.init_checkpoint and cls is configs.PretrainingOptions:
        values["init_checkpoint"] = FLAGS.init_checkpoint
    return cls(**values)


def _required(*names):
    missing = [f"--{n}" for n in names if not getattr(FLAGS, n)]
    if missing:
        sys.exit(
            f"error: {', '.join(missing)} required for --pipeline={FLAGS.pipeline} "
            f"--runner={FLAGS.runner}"
        )


def _local(path: str) -> str:
    """A local path flag as a path (without a file:// scheme)."""
    return path.removeprefix("file://")


def _exists_locally(path: str) -> bool:
    """A file or folder, or a TF checkpoint prefix (`bert_model.ckpt` of `.index`/`.data-*`)."""
    path = _local(path)
    return os.path.exists(path) or os.path.exists(path + ".index")


def _check_corpus_splits(data_root: str) -> None:
    """pretrain: PretrainingExampleGen hashes whole documents train:eval = 2:1; a corpus that
    leaves a split without any document fails there, deep inside Beam: say so now."""
    files = sorted(p for p in glob.glob(os.path.join(data_root, "*")) if os.path.isfile(p))
    counts = corpus_split.split_counts(files, until_every_split=True)
    empty = [name for name, n in zip(corpus_split.TRAIN_EVAL_SPLITS, counts, strict=True) if not n]
    if empty:
        sys.exit(
            f"error: --data_root={data_root}: {sum(counts)} document(s) (blank-line separated), "
            f"none in the {'/'.join(empty)} split: the pretrain pipeline holds out whole "
            f"documents, about 1 in 3, for its evaluation; give it more documents (e.g. a blank "
            f"line between the sections of a long text)"
        )


def _check_data_root() -> None:
    """local/beam: --data_root is a folder holding what the pipeline's ExampleGen reads."""
    if _is_remote(FLAGS.data_root):
        return
    data_root = _local(FLAGS.data_root)
    if not os.path.isdir(data_root):
        sys.exit(f"error: --data_root={data_root}: no such folder")
    if FLAGS.pipeline == "classify":
        processor = glue.get_processor(FLAGS.task_name or configs.ClassificationOptions.task_name)
        for split in (glue.TRAIN, glue.DEV):
            try:
                path = processor.split_file(data_root, split)
            except FileNotFoundError as e:
                reason = str(e).removeprefix(f"{data_root}: ")
                sys.exit(f"error: --data_root={data_root}: {reason}")
            if not os.path.isfile(path):
                sys.exit(
                    f"error: --data_root={data_root}: no {os.path.basename(path)} "
                    f"(--task_name={processor.name})"
                )
    elif FLAGS.pipeline == "squad":
        for pattern in ("train*.json", "dev*.json"):
            if not glob.glob(os.path.join(data_root, pattern)):
                sys.exit(f"error: --data_root={data_root}: no {pattern} file")
    elif not any(os.scandir(data_root)):
        sys.exit(f"error: --data_root={data_root}: empty folder")
    else:
        _check_corpus_splits(data_root)


def metadata_path() -> str:
    """local/beam: --metadata_path, or its default <pipeline_root>/metadata.sqlite."""
    return FLAGS.metadata_path or os.path.join(FLAGS.pipeline_root, "metadata.sqlite")


def log_path(started: float) -> str:
    """local/beam: --log_file, or <pipeline_root>/logs/run-<time>.log (beside the ML Metadata
    file when the pipeline root is remote)."""
    if FLAGS.log_file:
        return FLAGS.log_file
    folder = (
        os.path.dirname(os.path.abspath(metadata_path()))
        if _is_remote(FLAGS.pipeline_root)
        else FLAGS.pipeline_root
    )
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return os.path.join(folder, "logs", f"run-{stamp}.log")


def _check_local_flags() -> None:
    """local/beam: the paths this machine reads are there, ML Metadata can be written."""
    _check_data_root()
    for name in ("init_checkpoint", "vocab_file"):
        value = getattr(FLAGS, name)
        if value and not _is_remote(value) and not _exists_locally(value):
            sys.exit(f"error: --{name}={value}: no such file or folder")
    schema_dir = FLAGS.schema_dir
    schema_file = schema_dir and os.path.join(_local(schema_dir), configs.SCHEMA_FILE)
    if schema_dir and not _is_remote(schema_dir) and not os.path.isfile(schema_file):
        sys.exit(f"error: --schema_dir={schema_dir}: no {configs.SCHEMA_FILE} in it")
    vocab_file = FLAGS.vocab_file
    if vocab_file and not _is_remote(vocab_file) and os.path.isdir(_local(vocab_file)):
        sys.exit(f"error: --vocab_file={FLAGS.vocab_file}: a folder, expected the vocab file")
    if _is_remote(FLAGS.pipeline_root) and not FLAGS.metadata_path:
        sys.exit(
            f"error: --metadata_path required: --pipeline_root={FLAGS.pipeline_root} is remote "
            "and ML Metadata is a local SQLite file"
        )
    if _is_remote(metadata_path()):
        sys.exit(f"error: --metadata_path={metadata_path()}: must be a local file (SQLite)")
    for name, path in (("metadata_path", metadata_path()), ("log_file", FLAGS.log_file)):
        if path and os.path.isdir(path):
            sys.exit(f"error: --{name}={path}: a folder, expected a file")
    serving = _local(FLAGS.serving_model_dir)
    if not _is_remote(serving) and os.path.exists(serving) and not os.path.isdir(serving):
        sys.exit(f"error: --serving_model_dir={serving}: not a folder")


def check_flags() -> dict | None:
    """Every check that needs no TensorFlow or TFX import: exits with a one-line error on a
    missing, malformed or misplaced flag. Returns trainer_resources()."""
    resources = trainer_resources()
    cluster = FLAGS.runner in CLUSTER_RUNNERS
    if cluster:
        check_cluster_flags()
        given = [f"--{n}" for n in (*_LOCAL_FLAGS, "verbose") if getattr(FLAGS, n)]
        if given:
            sys.exit(f"error: {', '.join(given)}: only for --runner=local or beam")
    else:
        given = [f"--{n}" for n in (*_TRAINER_RESOURCE_FLAGS, "gpu_image") if getattr(FLAGS, n)]
        if given:
            sys.exit(f"error: {', '.join(given)}: only for --runner=kubeflow or vertex")
    _required("data_root", "pipeline_root", "serving_model_dir")
    if FLAGS.pipeline != "pretrain":
        _required("init_checkpoint")
    cls = configs.PIPELINE_OPTIONS[FLAGS.pipeline]
    fields = {f.name for f in dataclasses.fields(cls)}
    foreign = [
        f"--{name}"
        for name in _OPTION_SPECS
        if name not in fields and name in FLAGS and getattr(FLAGS, name) is not None
    ]
    if foreign:
        others = sorted({p for n in foreign for p in _OPTION_SPECS[n[2:]].defaults})
        sys.exit(
            f"error: {', '.join(foreign)}: not an option of --pipeline={FLAGS.pipeline} "
            f"(only of --pipeline={'/'.join(others)})"
        )
    errors = configs.check_options(FLAGS.pipeline, _options(cls))
    if errors:
        sys.exit("error: " + "; ".join(errors))
    if FLAGS.pipeline == "classify":
        try:
            glue.get_processor(FLAGS.task_name or configs.ClassificationOptions.task_name)
        except ValueError as e:
            sys.exit(f"error: {e}")
    if not cluster:
        _check_local_flags()
    return resources


def build_pipeline():
    """The pipeline the flags describe (check_flags() first)."""
    from tfx import v1 as tfx

    from bert_tf import checkpoints, model_source
    from bert_tf.data import fetch
    from tfx_pipeline import pipeline, trainer_lib

    cluster = FLAGS.runner in CLUSTER_RUNNERS
    beside_checkpoint = (
        FLAGS.init_checkpoint
        and not cluster
        and model_source.checkpoint_file(FLAGS.init_checkpoint, checkpoints.VOCAB_NAME)
    )
    if FLAGS.vocab_file:
        vocab_file = FLAGS.vocab_file
    elif beside_checkpoint:
        vocab_file = beside_checkpoint
    elif cluster:
        vocab_file = configs.IMAGE_VOCAB_FILE  # never the compiling machine's cache
    else:
        vocab_file = str(fetch.path("minilm", "vocab.txt"))
    metadata = None
    if not cluster:
        metadata = tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path())
    common = {
        "pipeline_root": FLAGS.pipeline_root,
        "data_root": FLAGS.data_root,
        "vocab_file": vocab_file,
        "serving_model_dir": FLAGS.serving_model_dir,
        "model_name": FLAGS.model_name,
        "metadata_connection_config": metadata,
        "beam_pipeline_args": FLAGS.beam_pipeline_args or configs.DEFAULT_BEAM_PIPELINE_ARGS,
    }
    if FLAGS.pipeline_name:
        common["pipeline_name"] = FLAGS.pipeline_name
    if FLAGS.schema_dir:
        common["schema_dir"] = FLAGS.schema_dir
    # Open-source KFP runs no preCacheCheck: ExampleGen's cache key must carry the data's
    # fingerprint (components/input_fingerprint.py). Vertex's driver also fingerprints the
    # files; the task is there too, so both runners compile the same spec.
    common["input_fingerprint"] = cluster
    if FLAGS.pipeline == "pretrain":
        create = pipeline.create_pretraining_pipeline
    else:
        common["init_checkpoint"] = FLAGS.init_checkpoint
        if FLAGS.pipeline == "classify":
            create = pipeline.create_classification_pipeline
        else:
            create = pipeline.create_squad_pipeline
    options = _options(configs.PIPELINE_OPTIONS[FLAGS.pipeline])
    if not cluster and FLAGS.init_checkpoint:
        # The Trainer's model-source checks, before ExampleGen and Transform spend their time.
        try:
            trainer_lib.encoder_config(
                FLAGS.init_checkpoint, {**dataclasses.asdict(options), "vocab_file": vocab_file}
            )
        except ValueError as e:
            sys.exit(f"error: {e}")
    try:
        return create(options=options, **common)
    except ValueError as e:
        sys.exit(f"error: {e}")


def compile_job(tfx_pipeline, resources: dict | None) -> dict:
    """The Vertex PipelineJob of the pipeline (spec 2.1 form), the Trainer (and Tuner) with
    `resources` (trainer_resources()) and --gpu_image; its pipelineSpec carries the pipeline root as
    defaultPipelineRoot and any runtime parameter values as defaults, so it stands alone."""
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
    ]
    image = FLAGS.image
    if FLAGS.gpu_image and FLAGS.gpu_image != FLAGS.image:
        # KubeflowV2DagRunner's per-component images: component id -> image, else the default.
        # (TFX 1.16 then logs "DEFAULT_IMAGE_PATH_KEY is not found" with the check inverted.)
        image = {pipeline_builder.DEFAULT_IMAGE_PATH_KEY: FLAGS.image}
        image.update({trainer.id: FLAGS.gpu_image for trainer in trainers})
    if resources:
        spec = json_format.ParseDict(
            resources,
            pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(),
        )
        for trainer in trainers:
            trainer.with_platform_config(spec)
    # Spec 2.1: parameters as runtimeValue.constant, the only form open-source KFP's backend
    # reads (Vertex reads both; TFX's default is 2.0's constantValue).
    config = kubeflow_v2.KubeflowV2DagRunnerConfig(default_image=image, use_pipeline_spec_2_1=True)
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


def write_spec(job: dict, path: str) -> None:
    """kubeflow: the PipelineSpec alone as YAML (what KFP's compiler writes and its client
    uploads); vertex: the whole PipelineJob as JSON (what aiplatform.PipelineJob submits)."""
    import yaml
    from tfx.dsl.io import fileio

    folder = os.path.dirname(path)
    if folder and not fileio.exists(folder):
        fileio.makedirs(folder)
    with fileio.open(path, "w") as f:
        if FLAGS.runner == "kubeflow":
            f.write(
                f"# PIPELINE DEFINITION\n# Name: {job['pipelineSpec']['pipelineInfo']['name']}\n"
            )
            yaml.safe_dump(job["pipelineSpec"], f, sort_keys=True)
        else:
            json.dump(job, f, indent=2, sort_keys=True)


def run_locally() -> None:
    """local/beam: runs the pipeline, its full log to log_path(), progress and then the
    summary on the console."""
    from tfx_pipeline import summary

    started = time.time()
    log_file = log_path(started)
    for path in (metadata_path(), log_file):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with summary.RunLog(log_file, verbose=FLAGS.verbose) as run_log:
        run_log.print(f"full log: {log_file}")
        run_log.print(f"[{run_log.clock()}] loading TensorFlow and TFX, building the pipeline")
        tfx_pipeline = failure = None
        try:
            tfx_pipeline = build_pipeline()  # TensorFlow/TFX imports: ~30 s
            if FLAGS.runner == "beam":
                from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

                BeamDagRunner().run(tfx_pipeline)
            else:
                from tfx import v1 as tfx

                tfx.orchestration.LocalDagRunner().run(tfx_pipeline)
        except Exception as e:  # a component failed: its traceback goes to the log file
            if tfx_pipeline is None:
                raise
            failure = e
            logging.exception("the pipeline run failed")
        finally:
            if tfx_pipeline is not None:
                run_log.print(
                    summary.run_summary(
                        metadata_path(),
                        tfx_pipeline.pipeline_info.pipeline_name,
                        [component.id for component in tfx_pipeline.components],
                        since=started,
                    )
                )
            run_log.print(f"full log: {log_file}")
    if failure is not None:
        sys.exit(f"error: {failure}")


def main(argv):
    del argv
    resources = check_flags()
    if FLAGS.runner in CLUSTER_RUNNERS:
        from tfx_pipeline import summary

        with summary.quiet_console():  # the result, not TFX's and Beam's INFO lines
            tfx_pipeline = build_pipeline()
            suffix = _SPEC_SUFFIXES[FLAGS.runner][0]
            output = FLAGS.output_spec_file or f"{FLAGS.pipeline}{suffix}"
            write_spec(compile_job(tfx_pipeline, resources), output)
        print(f"wrote {output}")
    else:
        run_locally()


if __name__ == "__main__":
    define_flags()
    flags_util.run(main)
