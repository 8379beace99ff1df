"""Helpers of the pipeline tests, as the session fixture `pipeline_helpers` (test modules cannot
import each other or this file: importlib import mode, and under Bazel a test sees only its own
file and the folder's non-test .py files)."""

import glob
import importlib.util
import json
import os
import random
import re
import shlex
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from PIL import Image

from bert_tf.data import corpora

REPO = Path(__file__).resolve().parents[2]


def run_in_process(module, *args: str) -> None:
    """`python -m <module> <args>` in this process (TFX is imported once), on fresh flags."""
    flag_values = flags.FlagValues()
    module.define_flags(flag_values)
    flag_values([module.__name__, *args])
    saved, module.FLAGS = module.FLAGS, flag_values
    try:
        module.main([])
    finally:
        module.FLAGS = saved


def metadata(metadata_path) -> metadata_store.MetadataStore:
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(metadata_path)
    return metadata_store.MetadataStore(config)


def executions(metadata_path) -> list[dict[str, metadata_store_pb2.Execution]]:
    """Per pipeline run, in order: component id -> its execution."""
    store = metadata(metadata_path)
    node_type = store.get_context_type("node")
    runs = sorted(
        store.get_contexts_by_type("pipeline_run"), key=lambda c: c.create_time_since_epoch
    )
    found = []
    for run_context in runs:
        run_executions = {}
        for execution in store.get_executions_by_context(run_context.id):
            node = next(
                c.name
                for c in store.get_contexts_by_execution(execution.id)
                if c.type_id == node_type.id
            )
            run_executions[node.split(".", 1)[1]] = execution
        found.append(run_executions)
    return found


def node_states(metadata_path) -> list[dict[str, str]]:
    """Per pipeline run, in order: component id -> last known execution state."""
    return [
        {
            node: metadata_store_pb2.Execution.State.Name(execution.last_known_state)
            for node, execution in run_executions.items()
        }
        for run_executions in executions(metadata_path)
    ]


def blessings(metadata_path) -> list[int]:
    """`blessed` of every ModelBlessing in ML Metadata, oldest first."""
    artifacts = sorted(
        metadata(metadata_path).get_artifacts_by_type("ModelBlessing"), key=lambda a: a.id
    )
    return [a.custom_properties["blessed"].int_value for a in artifacts]


def pusher_infra_blessing(metadata_path) -> metadata_store_pb2.Artifact:
    """The InfraBlessing the latest run's Pusher took as its `infra_blessing` input."""
    store = metadata(metadata_path)
    pusher = executions(metadata_path)[-1]["Pusher"]
    (artifact_id,) = [
        e.artifact_id
        for e in store.get_events_by_execution_ids([pusher.id])
        if e.type == metadata_store_pb2.Event.INPUT and e.path.steps[0].key == "infra_blessing"
    ]
    (artifact,) = store.get_artifacts_by_id([artifact_id])
    assert store.get_artifact_types_by_id([artifact.type_id])[0].name == "InfraBlessing"
    return artifact


def _load_kfp_launcher() -> None:
    """kfp_launcher.py as module `bert_tfx_tests_kfp_launcher`, which the launcher test files
    import: test modules cannot import their folder's helpers by package (importlib import mode;
    under Bazel the helper is among the test's srcs, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "bert_tfx_tests_kfp_launcher", Path(__file__).with_name("kfp_launcher.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)


_load_kfp_launcher()

# The flags the fixtures tune with: a learning rate that trains and one that cannot move the
# fresh head (1e-9), at the fixture's batch size and length.
TUNE_FLAGS = ("--tune", "--tune_learning_rates=1e-9,1e-4", "--tune_train_batch_sizes=16")


def check_tuning(
    results_dir: str, best_dir: str, model_run_dir: str, better: float | None = 1e-4
) -> list[dict]:
    """A Tuner run with TUNE_FLAGS (its `tuner_results` and `best_hyperparameters` artifact
    folders): it tried both learning rates, picked the higher-scoring one (`better`, when
    given: the one that trains), plotted its trials, and the Trainer (its `model_run` folder)
    trained with it. Returns the trials."""
    trials = json.loads(Path(results_dir, "tuner_results.json").read_text())
    assert sorted(t["learning_rate"] for t in trials) == [1e-9, 1e-4], trials
    best = max(trials, key=lambda t: t["score"])
    if better is not None:
        assert best["learning_rate"] == better and best["score"] > min(t["score"] for t in trials)
    with Image.open(Path(results_dir, "tuner_results.png")) as image:
        assert image.format == "PNG" and image.width > 100
    best_values = json.loads(Path(best_dir, "best_hyperparameters.txt").read_text())["values"]
    assert best_values == {k: v for k, v in best.items() if k not in ("trial_id", "score")}
    trained = json.loads(Path(model_run_dir, "training_options.json").read_text())
    assert {k: trained[k] for k in best_values} == best_values
    return trials


def check_local_tuning(pipeline_root: Path) -> list[dict]:
    """`check_tuning` on a local run's pipeline root."""
    (results_dir,) = glob.glob(str(pipeline_root / "Tuner/tuner_results/*"))
    (best_dir,) = glob.glob(str(pipeline_root / "Tuner/best_hyperparameters/*"))
    (model_run_dir,) = glob.glob(str(pipeline_root / "Trainer/model_run/*"))
    return check_tuning(results_dir, best_dir, model_run_dir)


def write_polarity_task(gensim_dir: Path, folder: Path) -> list[str]:
    """Pang & Lee polarity sentences (gensim's sample, shuffled) as a text_classification task
    folder: train.tsv 140, dev.tsv 60 (label pos/neg), and test.tsv with the dev sentences
    unlabelled (what BulkInferrer scores); returns those sentences."""
    examples = corpora.polarity_examples(gensim_dir / "pang_lee_polarity.cor")
    random.Random(0).shuffle(examples)
    folder.mkdir(parents=True)
    for name, rows in (("train", examples[:140]), ("dev", examples[140:])):
        lines = ["text\tlabel"] + [f"{text}\t{'pos' if label else 'neg'}" for text, label in rows]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    texts = [text for text, _ in examples[140:]]
    (folder / "test.tsv").write_text("\n".join(["text", *texts]) + "\n", encoding="utf-8")
    return texts


def check_scored_examples(pattern, probabilities: dict[str, list[float]]) -> None:
    """BulkInferrer's output examples (files matching `pattern`): one per sentence of
    `probabilities` (text -> the pushed model's class probabilities), each with its text, the
    class names neg/pos and those probabilities, and no label."""
    scored = read_examples(pattern)
    assert len(scored) == len(probabilities)
    for example in scored:
        text = values(example, "text_a")[0].decode()
        assert [n.decode() for n in values(example, "predicted_label")] == ["neg", "pos"]
        assert "label" not in example.features.feature
        np.testing.assert_allclose(
            values(example, "predicted_score"), probabilities[text], atol=1e-5
        )


def read_examples(pattern) -> list[tf.train.Example]:
    """The examples of the gzipped TFRecord files matching `pattern` (at least one file)."""
    files = sorted(glob.glob(str(pattern)))
    assert files, pattern
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()
    return [tf.train.Example.FromString(r) for r in records]


def values(example: tf.train.Example, name: str) -> np.ndarray:
    feature = example.features.feature[name]
    return np.array(getattr(feature, feature.WhichOneof("kind")).value)


def serve_in_fresh_process(model_dir: str, code: str):
    """Runs `code` (with `signatures` loaded from model_dir) in a new Python; returns the JSON
    it prints last."""
    script = textwrap.dedent(
        """
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the tokenizer's ops
        signatures = tf.saved_model.load(sys.argv[1]).signatures
        """
    ) + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script, model_dir], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def pushed_model(model_base_path: Path) -> str:
    """The one version the Pusher wrote under `<serving_model_dir>/<model_name>`."""
    versions = glob.glob(str(model_base_path / "*" / "saved_model.pb"))
    assert len(versions) == 1, versions
    return os.path.dirname(versions[0])


def compile_spec(
    pipeline_args: list[str],
    spec_file: Path,
    runner: str = "kubeflow",
    image: str = "registry.example.com/bert-tfx:test",
) -> dict:
    """`tfx_pipeline.run --runner=<kubeflow|vertex> --image=<image>` on `pipeline_args`, in this
    process, writing `spec_file` (.yaml for kubeflow, .json for vertex): the file parsed, i.e.
    the PipelineSpec (kubeflow) or the PipelineJob around one (vertex)."""
    import yaml

    from tfx_pipeline import run

    run_in_process(
        run,
        *pipeline_args,
        f"--runner={runner}",
        f"--image={image}",
        f"--output_spec_file={spec_file}",
    )
    text = Path(spec_file).read_text()
    return yaml.safe_load(text) if runner == "kubeflow" else json.loads(text)


def parse_pipeline_spec(spec: dict):
    """`spec` as a PipelineSpec proto, strictly: an unknown field is an error."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    return json_format.ParseDict(
        spec, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )


def executor_images(spec: dict) -> dict[str, str]:
    """Container executor label -> its image."""
    return {
        label: executor["container"]["image"]
        for label, executor in spec["deploymentSpec"]["executors"].items()
        if "container" in executor
    }


def compile_for_kubeflow(pipeline_args: list[str], tmp_path: Path, image: str):
    """`compile_spec` of a local run's `pipeline_args` (its local folders allowed as mounted
    volumes, a gs:// pipeline root): the PipelineSpec proto and its executors' images."""
    spec = compile_spec(
        [*pipeline_args, "--pipeline_root=gs://bucket/root", "--allowed_volume_paths=/"],
        tmp_path / "kubeflow_pipeline.yaml",
        image=image,
    )
    return parse_pipeline_spec(spec), set(executor_images(spec).values())


def shown_commands(path: Path, program: str) -> list[list[str]]:
    """Every `python -m <program> ...` line of the file's bash blocks (continuations joined,
    comments dropped): the words after `python -m <program>`."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith(f"python -m {program} "):
                continue
            words = shlex.split(line, comments=True)
            if words[:3] == ["python", "-m", program]:
                commands.append(words[3:])
    return commands


# Placeholders of the docs' cluster commands -> stand-ins (never contacted).
PLACEHOLDERS = {
    "REGION-docker.pkg.dev/PROJECT/REPO": "us-docker.pkg.dev/p/r",
    "REGISTRY": "registry.example.com/team",
    "TAG": "test",
    "BUCKET": "bucket",
    "PROJECT": "p",
    "REGION": "us-central1",
}


def cluster_commands() -> list[list[str]]:
    """The Kubeflow/Vertex compile commands docs/scaling.md and the README show, placeholders
    substituted."""
    commands = shown_commands(REPO / "docs" / "scaling.md", "tfx_pipeline.run")
    commands += shown_commands(REPO / "README.md", "tfx_pipeline.run")
    substituted = []
    for words in commands:
        if any(w in ("--runner=kubeflow", "--runner=vertex") for w in words):
            for old, new in PLACEHOLDERS.items():
                words = [w.replace(old, new) for w in words]
            substituted.append(words)
    return substituted


def pytest_generate_tests(metafunc):
    """A test taking `shown_cluster_command` runs once per `cluster_commands()` entry."""
    if "shown_cluster_command" in metafunc.fixturenames:
        metafunc.parametrize(
            "shown_cluster_command", cluster_commands(), ids=lambda a: " ".join(a)[:60]
        )


def readme_pipeline_args(pipeline: str, paths: dict[str, Path], minilm_dir: Path) -> list[str]:
    """The README's local `python -m tfx_pipeline.run --pipeline=<pipeline>` command's flags as
    they run, with the substitutions the README states under its block: `$M` is the MiniLM
    folder, and each relative path the command shows (`corpus/`, `runs/tfx_cls`, ...) is the
    test's folder that `paths` maps it to (every one must be mapped)."""
    (args,) = [
        a
        for a in shown_commands(REPO / "README.md", "tfx_pipeline.run")
        if f"--pipeline={pipeline}" in a and not any(w.startswith("--runner=") for w in a)
    ]
    substituted = []
    for arg in args:
        name, _, value = arg.partition("=")
        value = value.replace("$M", str(minilm_dir))
        is_path = "/" in value or name.endswith(("_root", "_dir", "_path", "_file"))
        if value and is_path and not value.startswith(("/", "gs://")):
            assert value.rstrip("/") in paths, f"README {arg}: no test folder for {value}"
            value = str(paths[value.rstrip("/")])
        substituted.append(f"{name}={value}" if value else arg)
    return substituted


@pytest.fixture(scope="session")
def pipeline_helpers() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        run_in_process=run_in_process,
        metadata=metadata,
        executions=executions,
        node_states=node_states,
        blessings=blessings,
        pusher_infra_blessing=pusher_infra_blessing,
        tune_flags=TUNE_FLAGS,
        check_tuning=check_tuning,
        check_local_tuning=check_local_tuning,
        write_polarity_task=write_polarity_task,
        check_scored_examples=check_scored_examples,
        read_examples=read_examples,
        values=values,
        serve_in_fresh_process=serve_in_fresh_process,
        pushed_model=pushed_model,
        compile_for_kubeflow=compile_for_kubeflow,
        compile_spec=compile_spec,
        parse_pipeline_spec=parse_pipeline_spec,
        executor_images=executor_images,
        shown_commands=shown_commands,
        cluster_commands=cluster_commands,
        readme_pipeline_args=readme_pipeline_args,
    )
