"""Compiling the three pipelines for Kubeflow (`--runner=kubeflow`: the KFP v2 PipelineSpec as
YAML) and Vertex AI (`--runner=vertex`: the PipelineJob JSON around it), offline: no Google
credentials, no network, no module wheel, and no path of the compiling machine in the output.
"""

import json
import os
import re
import socket
import tempfile
from pathlib import Path

import pytest
import tensorflow as tf
from absl import flags

from bert_tf.data import fetch
from tfx_pipeline import configs, run
from tfx_pipeline.runners import kubeflow, run_flags

IMAGE = "registry.example.com/bert-tfx:1"
GPU_IMAGE = "registry.example.com/bert-tfx-gpu:1"
BUCKET = "gs://bert-tfx-test"
PIPELINE_ROOT = f"{BUCKET}/pipeline-root"
COMMON_ARGS = [f"--pipeline_root={PIPELINE_ROOT}", f"--serving_model_dir={BUCKET}/serving"]
PIPELINE_ARGS = {
    "pretrain": ["--pipeline=pretrain", f"--data_root={BUCKET}/corpus"],
    "classify": [
        "--pipeline=classify",
        "--task_name=sst-2",
        f"--data_root={BUCKET}/glue/SST-2",
        f"--init_checkpoint={BUCKET}/minilm",
        "--bulk_inference",
        "--tune",
    ],
    "squad": [
        "--pipeline=squad",
        f"--data_root={BUCKET}/squad",
        f"--init_checkpoint={BUCKET}/minilm",
        "--tune",
    ],
}
TUNER_FNS = {"classify": configs.CLASSIFICATION_TUNER_FN, "squad": configs.SQUAD_TUNER_FN}
RUN_FNS = {
    "pretrain": (configs.PRETRAINING_PREPROCESSING_FN, configs.PRETRAINING_RUN_FN),
    "classify": (configs.CLASSIFICATION_PREPROCESSING_FN, configs.CLASSIFICATION_RUN_FN),
    "squad": (None, configs.SQUAD_RUN_FN),  # no Transform
}
# Trainer resources per runner: Kubeflow takes the Kubernetes resource name, Vertex its type.
GPU_ARGS = {
    "kubeflow": [
        "--trainer_cpu=8",
        "--trainer_memory=32G",
        "--trainer_accelerator=nvidia.com/gpu:2",
    ],
    "vertex": [
        "--trainer_cpu=500m",
        "--trainer_memory=30Gi",
        "--trainer_accelerator=NVIDIA_TESLA_T4:1",
    ],
}
GPU_RESOURCES = {
    "kubeflow": {"cpuLimit": 8.0, "memoryLimit": 32.0, "type": "nvidia.com/gpu", "count": 2},
    "vertex": {
        "cpuLimit": 0.5,
        "memoryLimit": 30 * 2**30 / 1e9,
        "type": "NVIDIA_TESLA_T4",
        "count": 1,
    },
}
SUFFIX = {"kubeflow": ".yaml", "vertex": ".json"}
PIPELINE_NAMES = {
    "pretrain": configs.PRETRAINING_PIPELINE_NAME,
    "classify": configs.CLASSIFICATION_PIPELINE_NAME,
    "squad": configs.SQUAD_PIPELINE_NAME,
}


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """No credentials google-auth could find, and no connection to any host."""

    def refuse(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"network access while compiling: {address}")
        return connect(sock, address)

    connect = socket.socket.connect
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
        patch.setenv("CLOUDSDK_CONFIG", str(tmp_path_factory.mktemp("gcloud")))
        patch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        yield


@pytest.fixture(scope="module")
def compiled(offline, tmp_path_factory, pipeline_helpers) -> dict:
    """(pipeline, runner, gpu) -> (the written file parsed, its text), for each pipeline on
    both runners, plus the pretraining and classify pipelines with a GPU Trainer on both."""
    out = tmp_path_factory.mktemp("specs")
    cases = [(p, r, False) for p in PIPELINE_ARGS for r in SUFFIX]
    cases += [(p, r, True) for p in ("pretrain", "classify") for r in SUFFIX]
    found = {}
    for name, runner, gpu in cases:
        spec_file = out / f"{name}-{runner}{'-gpu' if gpu else ''}{SUFFIX[runner]}"
        extra = [*GPU_ARGS[runner], f"--gpu_image={GPU_IMAGE}"] if gpu else []
        parsed = pipeline_helpers.compile_spec(
            [*PIPELINE_ARGS[name], *COMMON_ARGS, *extra], spec_file, runner=runner, image=IMAGE
        )
        found[name, runner, gpu] = parsed, spec_file.read_text()
    return found


def _pipeline_spec(compiled, name, runner, gpu=False) -> dict:
    parsed = compiled[name, runner, gpu][0]
    return parsed if runner == "kubeflow" else parsed["pipelineSpec"]


def _task_executor(spec: dict, task: str) -> str:
    component = spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]
    return spec["components"][component]["executorLabel"]


@pytest.mark.parametrize("runner", sorted(SUFFIX))
@pytest.mark.parametrize("name", sorted(PIPELINE_ARGS))
def test_spec_is_a_strict_pipeline_spec_2_1(compiled, pipeline_helpers, name, runner):
    spec = _pipeline_spec(compiled, name, runner)
    parsed = pipeline_helpers.parse_pipeline_spec(spec)  # unknown fields are errors
    assert parsed.schema_version == "2.1.0"
    assert parsed.default_pipeline_root == PIPELINE_ROOT
    assert parsed.pipeline_info.name == PIPELINE_NAMES[name]
    # Spec 2.1's parameter form, the one open-source KFP reads; never 2.0's constantValue.
    assert "constantValue" not in compiled[name, runner, False][1]
    tasks = spec["root"]["dag"]["tasks"]
    constants = [
        value["runtimeValue"]["constant"]
        for task in tasks.values()
        for value in task.get("inputs", {}).get("parameters", {}).values()
        if "runtimeValue" in value
    ]
    assert constants
    # Transform and Trainer name their functions by import path (the image has the package).
    preprocessing_fn, run_fn = RUN_FNS[name]
    assert tasks["Trainer"]["inputs"]["parameters"]["run_fn"]["runtimeValue"]["constant"] == run_fn
    assert "module_file" not in tasks["Trainer"]["inputs"]["parameters"]
    if preprocessing_fn:
        transform = tasks["Transform"]["inputs"]["parameters"]
        assert transform["preprocessing_fn"]["runtimeValue"]["constant"] == preprocessing_fn
        assert "module_file" not in transform
    if name in TUNER_FNS:  # --tune: our Tuner executor, the Trainer takes its best values
        tuner = tasks["Tuner"]["inputs"]["parameters"]
        assert tuner["tuner_fn"]["runtimeValue"]["constant"] == TUNER_FNS[name]
        executor = spec["deploymentSpec"]["executors"][_task_executor(spec, "Tuner")]
        assert "tfx_pipeline.components.tuner.Executor" in json.dumps(executor)
        hyperparameters = tasks["Trainer"]["inputs"]["artifacts"]["hyperparameters"]
        assert hyperparameters["taskOutputArtifact"]["producerTask"] == "Tuner"
    if name == "classify":  # --bulk_inference: the test file scored with our executor
        assert {"UnlabelledExampleGen", "BulkInferrer"} <= set(tasks)
        executor = spec["deploymentSpec"]["executors"][_task_executor(spec, "BulkInferrer")]
        assert "tfx_pipeline.components.bulk_inferrer.Executor" in json.dumps(executor)
    # Every component in --image when no --gpu_image is given; no resource requests.
    assert set(pipeline_helpers.executor_images(spec).values()) == {IMAGE}
    executors = spec["deploymentSpec"]["executors"].values()
    assert not any("resources" in e.get("container", {}) for e in executors)


@pytest.mark.parametrize("name", sorted(PIPELINE_ARGS))
def test_vertex_job_wraps_the_same_spec(compiled, name):
    job = compiled[name, "vertex", False][0]
    assert set(job) == {"displayName", "labels", "pipelineSpec", "runtimeConfig"}
    assert job["runtimeConfig"]["gcsOutputDirectory"] == PIPELINE_ROOT
    # One code path: the kubeflow YAML is the job's pipelineSpec, nothing else.
    assert job["pipelineSpec"] == compiled[name, "kubeflow", False][0]
    assert compiled[name, "kubeflow", False][1].startswith("# PIPELINE DEFINITION\n")


def _absolute_path_pattern(path: str) -> re.Pattern:
    # The path itself, not the same letters inside a URI or a longer path (gs://b/root).
    return re.compile(rf"(?<![\w./:-]){re.escape(path.rstrip('/'))}(?![\w.-])")


def test_no_path_of_the_compiling_machine_and_no_wheel(compiled, tmp_path_factory):
    repo = Path(run.__file__).resolve().parents[1]
    machine_paths = {
        str(repo),
        str(Path.home()),
        str(fetch.cache_dir()),
        str(tmp_path_factory.getbasetemp()),
        tempfile.gettempdir(),
        os.getcwd(),
        os.path.dirname(os.__file__),  # the Python installation
    } - {"", "/"}
    for key, (_, text) in compiled.items():
        for path in machine_paths:
            assert not _absolute_path_pattern(path).search(text), (key, path)
        for wheel in ("_wheels", ".whl", "module_path", "module_file"):
            assert wheel not in text, (key, wheel)
        assert configs.IMAGE_VOCAB_FILE in text, key  # the image's vocab, not the local cache


@pytest.mark.parametrize("runner", sorted(SUFFIX))
@pytest.mark.parametrize("name", ["pretrain", "classify"])
def test_gpu_trainer_gets_its_image_and_resources(compiled, pipeline_helpers, name, runner):
    """The Trainer, and the Tuner (--tune: it trains too), on --gpu_image with the resources."""
    spec = _pipeline_spec(compiled, name, runner, gpu=True)
    pipeline_helpers.parse_pipeline_spec(spec)
    trainers = {
        _task_executor(spec, t) for t in ("Trainer", "Tuner") if t in spec["root"]["dag"]["tasks"]
    }
    assert len(trainers) == (2 if name in TUNER_FNS else 1)
    images = pipeline_helpers.executor_images(spec)
    assert {images.pop(t) for t in trainers} == {GPU_IMAGE}
    assert set(images.values()) == {IMAGE}  # Beam components and the rest stay on --image
    executors = spec["deploymentSpec"]["executors"]
    expected = GPU_RESOURCES[runner]
    for trainer in trainers:
        resources = executors[trainer]["container"]["resources"]
        assert resources["cpuLimit"] == pytest.approx(expected["cpuLimit"])
        assert resources["memoryLimit"] == pytest.approx(expected["memoryLimit"])
        assert resources["accelerator"]["type"] == expected["type"]
        assert int(resources["accelerator"]["count"]) == expected["count"]
    others = [e for label, e in executors.items() if label not in trainers]
    assert not any("resources" in e.get("container", {}) for e in others)


def test_default_spec_file_is_named_after_the_pipeline(
    offline, tmp_path, monkeypatch, pipeline_helpers
):
    monkeypatch.chdir(tmp_path)
    pipeline_helpers.run_in_process(
        run, *PIPELINE_ARGS["squad"], *COMMON_ARGS, "--runner=kubeflow", f"--image={IMAGE}"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["squad.yaml"]


def _flags(*args: str) -> flags.FlagValues:
    flag_values = flags.FlagValues()
    run_flags.define_flags(flag_values)
    flag_values(["run", *args])
    return flag_values


def _exits(pipeline_helpers, *args: str) -> str:
    """The one-line error `tfx_pipeline.run` exits with on `args` (before building anything)."""
    with pytest.raises(SystemExit) as exited:
        pipeline_helpers.run_in_process(run, *args)
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


CLUSTER_ARGS = [
    "--pipeline=classify",
    f"--data_root={BUCKET}/data",
    f"--pipeline_root={BUCKET}/root",
    f"--serving_model_dir={BUCKET}/serving",
    f"--init_checkpoint={BUCKET}/ckpt",
    f"--vocab_file={BUCKET}/vocab.txt",
    f"--image={IMAGE}",
]


@pytest.mark.parametrize("runner", sorted(SUFFIX))
@pytest.mark.parametrize(
    "flag", ["data_root", "pipeline_root", "serving_model_dir", "init_checkpoint", "vocab_file"]
)
@pytest.mark.parametrize("value", ["relative/dir", "/home/someone/data", "file:///data"])
def test_local_paths_are_rejected(pipeline_helpers, runner, flag, value):
    message = _exits(pipeline_helpers, *CLUSTER_ARGS, f"--runner={runner}", f"--{flag}={value}")
    assert message.startswith(f"error: --{flag}={value} is a local path; --runner={runner}")
    assert "remote URI (gs://, s3://, ...)" in message


def test_volume_paths(pipeline_helpers):
    # Under --allowed_volume_paths (default /mnt): accepted, except for the pipeline root.
    for flag in ("data_root", "serving_model_dir", "init_checkpoint", "vocab_file"):
        kubeflow.check_cluster_flags(
            _flags(*CLUSTER_ARGS, "--runner=kubeflow", f"--{flag}=/mnt/data/x")
        )
    # The image's own files (the Dockerfile's fetch cache): its MiniLM and vocab.
    for flag in ("init_checkpoint", "vocab_file"):
        kubeflow.check_cluster_flags(
            _flags(*CLUSTER_ARGS, "--runner=kubeflow", f"--{flag}=/opt/bert_tfx/minilm")
        )
    message = _exits(pipeline_helpers, *CLUSTER_ARGS, "--runner=kubeflow", "--pipeline_root=/mnt/r")
    assert "(--allowed_volume_paths)" not in message  # an object store only
    message = _exits(
        pipeline_helpers,
        *CLUSTER_ARGS,
        "--runner=vertex",
        "--data_root=/mnt/../etc/data",  # normalized: not under /mnt
    )
    assert "or a path under /mnt (--allowed_volume_paths)" in message
    message = _exits(
        pipeline_helpers,
        *CLUSTER_ARGS,
        "--runner=vertex",
        "--allowed_volume_paths=/data",
        "--data_root=/mnt/data",
    )
    assert "or a path under /data (--allowed_volume_paths)" in message


def test_trainer_resources_parse():
    values = _flags("--trainer_cpu=1.5", "--trainer_memory=512M", "--trainer_accelerator=TPU_V3:8")
    assert kubeflow.trainer_resources(values) == {
        "cpu_limit": 1.5,
        "memory_limit": pytest.approx(0.512),
        "accelerator": {"type": "TPU_V3", "count": 8},
    }


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--trainer_accelerator=NVIDIA_TESLA_T4"],
            "--trainer_accelerator=NVIDIA_TESLA_T4: expected TYPE:COUNT",
        ),
        (["--trainer_accelerator=nvidia.com/gpu:0"], "expected TYPE:COUNT"),
        (["--trainer_accelerator=:1"], "expected TYPE:COUNT"),
        (["--trainer_memory=32"], "--trainer_memory=32: expected a size with a unit"),
        (["--trainer_cpu=eight"], "--trainer_cpu=eight: expected cores"),
        (["--output_spec_file=p.json"], "--runner=kubeflow writes a .yaml or .yml file"),
        (["--pipeline_name=BERT_1"], "--pipeline_name=BERT_1: --runner=kubeflow needs lowercase"),
    ],
)
def test_bad_cluster_flags(pipeline_helpers, args, expected):
    assert expected in _exits(pipeline_helpers, *CLUSTER_ARGS, "--runner=kubeflow", *args)


def test_cluster_flags_with_a_local_runner(pipeline_helpers):
    message = _exits(pipeline_helpers, *CLUSTER_ARGS, "--trainer_cpu=8", f"--gpu_image={IMAGE}")
    assert message == "error: --trainer_cpu, --gpu_image: only for --runner=kubeflow or vertex"


@pytest.mark.parametrize("runner", sorted(SUFFIX))
@pytest.mark.parametrize("name", sorted(PIPELINE_ARGS))
def test_example_gens_take_the_data_fingerprint_of_an_uncached_task(compiled, name, runner):
    """Open-source KFP's cache key is a task's parameters and input artifact ids: the uncached
    InputFingerprint task's output is every ExampleGen's `input_fingerprint` parameter, so new
    files give ExampleGen a new key; every other task keeps caching on."""
    spec = _pipeline_spec(compiled, name, runner)
    tasks = spec["root"]["dag"]["tasks"]
    assert "cachingOptions" not in tasks["InputFingerprint"]
    parameters = tasks["InputFingerprint"]["inputs"]["parameters"]
    (data_root,) = [a for a in PIPELINE_ARGS[name] if a.startswith("--data_root=")]
    assert parameters["input_base"]["runtimeValue"]["constant"] == data_root.split("=", 1)[1]
    example_gens = [t for t in tasks if t.endswith("ExampleGen")]
    assert len(example_gens) == (2 if name == "classify" else 1)  # + UnlabelledExampleGen
    for task in example_gens:
        fingerprint = tasks[task]["inputs"]["parameters"]["input_fingerprint"]
        assert fingerprint == {
            "taskOutputParameter": {
                "producerTask": "InputFingerprint",
                "outputParameterKey": "fingerprint",
            }
        }
    others = set(tasks) - {"InputFingerprint"}
    assert all(tasks[t]["cachingOptions"] == {"enableCache": True} for t in others)


def test_input_fingerprint_changes_with_the_files_only(tmp_path):
    from tfx_pipeline.components.input_fingerprint import fingerprint

    (tmp_path / "multinli").mkdir()
    (tmp_path / "multinli" / "train.tsv").write_text("premise\thypo\tlabel\n")
    (tmp_path / "dev.tsv").write_text("a\tb\n")
    first = fingerprint(str(tmp_path))
    assert first.startswith("2 files, 23 bytes, sha256 ")
    assert fingerprint(str(tmp_path) + "/") == first
    with open(tmp_path / "multinli" / "train.tsv", "a") as f:
        f.write("x\ty\tneutral\n")
    second = fingerprint(str(tmp_path))
    assert second.startswith("2 files, 35 bytes") and second != first
    os.utime(tmp_path / "dev.tsv", ns=(1, 1))  # same size, another modification time
    assert fingerprint(str(tmp_path)) not in (first, second)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        fingerprint(str(tmp_path / "nothing"))


def test_input_fingerprint_sees_a_same_size_rewrite_without_modification_times():
    """ram:// keeps no modification time (0): a file rewritten with the same size but other
    rows must still change the fingerprint (a cache hit would train on the old data)."""
    from tfx_pipeline.components.input_fingerprint import fingerprint

    base = "ram://fingerprint-rewrite/data"
    prints = []
    for text in ("a\tpos\n", "b\tneg\n"):
        if tf.io.gfile.exists(f"{base}/train.tsv"):  # ram:// appends to an existing file
            tf.io.gfile.remove(f"{base}/train.tsv")
        with tf.io.gfile.GFile(f"{base}/train.tsv", "w") as f:
            f.write(text)
        assert tf.io.gfile.stat(f"{base}/train.tsv").mtime_nsec == 0
        prints.append(fingerprint(base))
    assert prints[0].startswith("1 files, 6 bytes") and prints[1].startswith("1 files, 6 bytes")
    assert prints[0] != prints[1]


# --- a Trainer spanning hosts (--trainer_replicas, --trainer_machine_type) --------------------

REPLICAS = 4
# The paper-scale pretraining: LAMB, gradient accumulation, 4 hosts training together.
SPANNING_ARGS = [
    "--optimizer=lamb",
    "--gradient_accumulation_steps=8",
    "--train_batch_size=256",
    "--distribution_strategy=multi_worker_mirrored",
    f"--trainer_replicas={REPLICAS}",
    f"--gpu_image={GPU_IMAGE}",
]
SPANNING_RUNNER_ARGS = {
    "kubeflow": [
        "--trainer_cpu=8",
        "--trainer_memory=32G",
        "--trainer_accelerator=nvidia.com/gpu:2",
        "--trainer_machine_type=a2-highgpu-2g",
    ],
    "vertex": [
        "--trainer_machine_type=a2-highgpu-1g",
        "--trainer_accelerator=NVIDIA_TESLA_A100:1",
        "--vertex_project=bert-tfx-project",
        "--vertex_region=europe-west4",
    ],
}


@pytest.fixture(scope="module")
def spanning(offline, tmp_path_factory, pipeline_helpers) -> dict:
    """runner -> the pretraining pipeline's PipelineSpec with a Trainer of REPLICAS hosts."""
    out = tmp_path_factory.mktemp("spanning")
    found = {}
    for runner in SUFFIX:
        parsed = pipeline_helpers.compile_spec(
            [
                *PIPELINE_ARGS["pretrain"],
                *COMMON_ARGS,
                *SPANNING_ARGS,
                *SPANNING_RUNNER_ARGS[runner],
            ],
            out / f"pretrain{SUFFIX[runner]}",
            runner=runner,
            image=IMAGE,
        )
        found[runner] = parsed if runner == "kubeflow" else parsed["pipelineSpec"]
    return found


def _trainer_config(spec: dict) -> dict:
    parameters = spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    return json.loads(parameters["custom_config"]["runtimeValue"]["constant"])


def _trainer_container(spec: dict) -> dict:
    return spec["deploymentSpec"]["executors"][_task_executor(spec, "Trainer")]["container"]


@pytest.mark.parametrize("runner", sorted(SUFFIX))
def test_spanning_trainer_task_only_waits(spanning, pipeline_helpers, runner):
    """The spec stays strict; the Trainer task (same name) runs its submitting executor on the
    pipeline's image with no resources: the replicas get the GPU image and the resources."""
    spec = spanning[runner]
    pipeline_helpers.parse_pipeline_spec(spec)
    container = _trainer_container(spec)
    executor = {
        "kubeflow": "tfx_pipeline.components.distributed_trainer.TFJobExecutor",
        "vertex": "tfx_pipeline.components.vertex_trainer.VertexExecutor",
    }[runner]
    assert container["args"][:2] == ["--executor_class_path", executor]
    assert container["image"] == IMAGE and "resources" not in container
    config = _trainer_config(spec)
    assert (config["optimizer"], config["gradient_accumulation_steps"]) == ("lamb", 8)
    assert config["distribution_strategy"] == "multi_worker_mirrored"


def test_kubeflow_trainer_is_a_valid_tfjob(spanning):
    from tfx_pipeline.components import distributed_trainer, tfjob

    template = _trainer_config(spanning["kubeflow"])[tfjob.TFJOB_KEY]
    command = distributed_trainer.replica_command(
        "tfx_pipeline.components.distributed_trainer.ReplicaExecutor", {}, {}, {}
    )
    job = tfjob.manifest(tfjob.job_name("bert-trainer", "gs://b/m/1"), "ns", template, command)
    assert tfjob.check_manifest(job) == []
    specs = job["spec"]["tfReplicaSpecs"]
    assert {kind: spec["replicas"] for kind, spec in specs.items()} == {
        "Chief": 1,
        "Worker": REPLICAS - 1,
    }
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow" and container["image"] == GPU_IMAGE
        assert container["resources"]["limits"] == {
            "cpu": "8",
            "memory": "32G",
            "nvidia.com/gpu": "2",
        }
        assert container["command"][:3] == ["python", "-m", "tfx.scripts.run_executor"]
        assert spec["template"]["spec"]["nodeSelector"] == {
            "node.kubernetes.io/instance-type": "a2-highgpu-2g"
        }


def test_vertex_trainer_has_valid_worker_pools(spanning):
    from tfx_pipeline.components import vertex_trainer

    config = _trainer_config(spanning["vertex"])
    # The keys TFX's extension reads (the flag checks write them by name).
    assert config[vertex_trainer.ENABLE_VERTEX_KEY] is True
    assert config[vertex_trainer.VERTEX_REGION_KEY] == "europe-west4"
    args = config[vertex_trainer.TRAINING_ARGS_KEY]
    assert args["project"] == "bert-tfx-project"
    pools = args["worker_pool_specs"]
    assert vertex_trainer.check_worker_pool_specs(pools) == []  # Vertex's WorkerPoolSpec proto
    machine = {
        "machine_type": "a2-highgpu-1g",
        "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 1,
    }
    assert pools == [
        {"machine_spec": machine, "replica_count": n, "container_spec": {"image_uri": GPU_IMAGE}}
        for n in (1, REPLICAS - 1)
    ]
    bad = [{**pools[0], "replica_count": 1, "gpus": 2}]
    assert "no field named" in vertex_trainer.check_worker_pool_specs(bad)[0]


PRETRAIN_CLUSTER_ARGS = [
    "--pipeline=pretrain",
    f"--data_root={BUCKET}/data",
    f"--pipeline_root={BUCKET}/root",
    f"--serving_model_dir={BUCKET}/serving",
    f"--image={IMAGE}",
]
MWMS = "--distribution_strategy=multi_worker_mirrored"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--runner=kubeflow", "--trainer_replicas=0"],
            "error: --trainer_replicas=0: expected at least 1",
        ),
        (
            ["--runner=kubeflow", "--trainer_replicas=2"],
            "error: --trainer_replicas=2: the replicas train together only with "
            "--distribution_strategy=multi_worker_mirrored (got one_device)",
        ),
        (
            ["--runner=vertex", MWMS, "--trainer_replicas=2", "--vertex_project=p"],
            "error: --trainer_replicas=2: --runner=vertex needs --trainer_machine_type",
        ),
        (
            ["--runner=vertex", "--trainer_machine_type=n1-standard-8"],
            "error: --trainer_machine_type=n1-standard-8: --vertex_project required",
        ),
        (
            ["--runner=vertex", "--trainer_machine_type=n1-standard-8", "--trainer_cpu=8"],
            "error: --trainer_cpu: a Vertex Trainer's replicas are sized by "
            "--trainer_machine_type, not by limits",
        ),
        (
            ["--runner=kubeflow", "--trainer_machine_type=n1-standard-8"],
            "error: --trainer_machine_type=n1-standard-8: on --runner=kubeflow only with "
            "--trainer_replicas > 1",
        ),
        (
            ["--runner=kubeflow", MWMS, "--trainer_replicas=2", "--vertex_project=p"],
            "error: --vertex_project: only for --runner=vertex with --trainer_machine_type",
        ),
    ],
)
def test_bad_spanning_trainer_flags(pipeline_helpers, args, expected):
    assert _exits(pipeline_helpers, *PRETRAIN_CLUSTER_ARGS, *args).startswith(expected)


def test_spanning_trainer_flags_with_a_local_runner(pipeline_helpers, tmp_path):
    (tmp_path / "corpus").mkdir()
    message = _exits(
        pipeline_helpers,
        "--pipeline=pretrain",
        f"--data_root={tmp_path / 'corpus'}",
        f"--pipeline_root={tmp_path / 'root'}",
        f"--serving_model_dir={tmp_path / 'serving'}",
        MWMS,
        "--trainer_replicas=2",
        "--trainer_machine_type=n1-standard-8",
    )
    assert message == (
        "error: --trainer_replicas, --trainer_machine_type: only for --runner=kubeflow or vertex"
    )
