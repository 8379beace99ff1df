"""The compiled Kubeflow Pipelines v2 spec runs: every container task of the pretraining pipeline
(tiny sizes) executed in DAG order as Vertex's launcher would run it (kfp_launcher.py, backend
VERTEX: executor input built from the spec, ExampleGen's preCacheCheck driver, placeholders
resolved, `gs://` as a local folder, outputs fed downstream, the image's environment), the
project's virtualenv standing in for the image. The pushed model answers raw text; a second
run's evaluator compares against the first run's push (ServingBaseline). The fine-tuning
pipelines run as open-source KFP runs them (its cache included) in
test_kfp_launcher_classify.py.

The harness's own placeholder resolution, DAG ordering, importer and output passing are checked
fast on a hand-written spec whose containers are small Python scripts, and so are the KFP
backend's pod-local executor output, numeric ids, environment, cache and ram:// buckets.
"""

import dataclasses
import json
import os
import shutil
import textwrap
from pathlib import Path
from typing import NamedTuple

import bert_tfx_tests_kfp_launcher as kfp_launcher  # tests/tfx_pipeline/kfp_launcher.py (conftest.py)
import numpy as np
import pytest

from tfx_pipeline.components import tfjob

REPO = Path(__file__).resolve().parents[2]
BUCKET = "bert-tfx-ci"
TRAINER_REPLICAS = 2

# --- the harness on a hand-written spec --------------------------------------------------------

# A container's program: records what it got, writes its output artifact and ExecutorOutput.
_RECORDER = textwrap.dedent(
    """
    import json, os, sys
    executor_input = json.loads(sys.argv[1])
    outputs = executor_input["outputs"]
    record = {"argv": sys.argv[1:], "cwd": os.getcwd(), "executor_input": executor_input,
              "env": dict(os.environ)}
    for key, listed in outputs.get("artifacts", {}).items():
        uri = listed["artifacts"][0]["uri"]
        os.makedirs(uri, exist_ok=True)
        with open(os.path.join(uri, "record.json"), "w") as f:
            json.dump(record, f)
    if "--write_output" in sys.argv:
        os.makedirs(os.path.dirname(outputs["outputFile"]), exist_ok=True)
        with open(outputs["outputFile"], "w") as f:
            json.dump({
                "artifacts": {"counted": {"artifacts": [
                    {"uri": "/pod/local" if "--move_out" in sys.argv else
                            outputs["artifacts"]["counted"]["artifacts"][0]["uri"],
                     "metadata": {"lines": 3.0, "where": outputs["artifacts"]["counted"]
                                  ["artifacts"][0]["uri"]}}]}},
                "parameterValues": {"total": 7.0},
            }, f)
    """
)


def _container(*args: str, command=("python", "-c", _RECORDER)) -> dict:
    return {"container": {"image": "registry.example.com/x:1", "command": list(command),
                          "args": list(args)}}  # fmt: skip


def _small_spec() -> dict:
    """ImportData (importer) -> Count -> Report -> Aaa (sorts first, runs last), plus a
    pipeline parameter and every parameter form."""
    dataset = {"schemaTitle": "system.Dataset", "schemaVersion": "0.0.1"}
    plain = {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}
    return {
        "pipelineInfo": {"name": "small"},
        "schemaVersion": "2.1.0",
        "sdkVersion": "test",
        "defaultPipelineRoot": f"gs://{BUCKET}/root",
        "root": {
            "inputDefinitions": {
                "parameters": {"greeting": {"parameterType": "STRING", "defaultValue": "hi"}}
            },
            "dag": {
                "tasks": {
                    "Aaa": {
                        "taskInfo": {"name": "Aaa"},
                        "componentRef": {"name": "comp-aaa"},
                        "dependentTasks": ["Report"],
                    },
                    "Report": {
                        "taskInfo": {"name": "Report"},
                        "componentRef": {"name": "comp-report"},
                        "inputs": {
                            "artifacts": {
                                "counted": {
                                    "taskOutputArtifact": {
                                        "producerTask": "Count",
                                        "outputArtifactKey": "counted",
                                    }
                                }
                            },
                            "parameters": {
                                "total": {
                                    "taskOutputParameter": {
                                        "producerTask": "Count",
                                        "outputParameterKey": "total",
                                    }
                                }
                            },
                        },
                    },
                    "Count": {
                        "taskInfo": {"name": "Count"},
                        "componentRef": {"name": "comp-count"},
                        "inputs": {
                            "artifacts": {
                                "data": {
                                    "taskOutputArtifact": {
                                        "producerTask": "ImportData",
                                        "outputArtifactKey": "artifact",
                                    }
                                }
                            },
                            "parameters": {
                                "n": {"runtimeValue": {"constant": 3.0}},
                                "config": {
                                    "runtimeValue": {
                                        "constant": json.dumps({"out": f"gs://{BUCKET}/x"})
                                    }
                                },
                                "greeting": {"componentInputParameter": "greeting"},
                            },
                        },
                    },
                    "ImportData": {
                        "taskInfo": {"name": "ImportData"},
                        "componentRef": {"name": "comp-importer"},
                    },
                }
            },
        },
        "components": {
            "comp-importer": {
                "executorLabel": "exec-importer",
                "outputDefinitions": {"artifacts": {"artifact": {"artifactType": dataset}}},
            },
            "comp-count": {
                "executorLabel": "exec-count",
                "inputDefinitions": {
                    "artifacts": {"data": {"artifactType": dataset}},
                    "parameters": {
                        "n": {"parameterType": "NUMBER_INTEGER"},
                        "config": {"parameterType": "STRING"},
                        "greeting": {"parameterType": "STRING"},
                        "unset": {"parameterType": "STRING", "defaultValue": "dflt"},
                    },
                },
                "outputDefinitions": {
                    "artifacts": {"counted": {"artifactType": plain}},
                    "parameters": {"total": {"parameterType": "NUMBER_INTEGER"}},
                },
            },
            "comp-report": {
                "executorLabel": "exec-report",
                "inputDefinitions": {
                    "artifacts": {"counted": {"artifactType": plain}},
                    "parameters": {"total": {"parameterType": "NUMBER_INTEGER"}},
                },
                "outputDefinitions": {"artifacts": {"report": {"artifactType": plain}}},
            },
            "comp-aaa": {"executorLabel": "exec-aaa"},
        },
        "deploymentSpec": {
            "executors": {
                "exec-importer": {
                    "importer": {
                        "artifactUri": {"constant": f"gs://{BUCKET}/data/in.txt"},
                        "typeSchema": dataset,
                        "metadata": {"source": "test"},
                    }
                },
                "exec-count": _container(
                    "{{$}}",
                    "--n={{$.inputs.parameters['n']}}",
                    "--config={{$.inputs.parameters['config']}}",
                    "--greeting={{$.inputs.parameters['greeting']}}",
                    "--unset={{$.inputs.parameters['unset']}}",
                    "--data_uri={{$.inputs.artifacts['data'].uri}}",
                    "--data_path={{$.inputs.artifacts['data'].path}}",
                    "--out={{$.outputs.artifacts['counted'].uri}}",
                    "--total_file={{$.outputs.parameters['total'].output_file}}",
                    "--root={{$.pipeline_root}}",
                    "--task={{$.pipeline_task_name}}",
                    "--write_output",
                ),
                "exec-report": _container(
                    "{{$}}",
                    "--total={{$.inputs.parameters['total']}}",
                    "--counted={{$.inputs.artifacts['counted'].metadata}}",
                ),
                "exec-aaa": _container("{{$}}"),
            }
        },
    }


def test_task_order_follows_dependencies_and_rejects_cycles():
    spec = _small_spec()
    assert kfp_launcher.task_order(spec) == ["ImportData", "Count", "Report", "Aaa"]
    spec["root"]["dag"]["tasks"]["ImportData"]["dependentTasks"] = ["Aaa"]
    with pytest.raises(kfp_launcher.LauncherError, match="cycle"):
        kfp_launcher.task_order(spec)
    spec["root"]["dag"]["tasks"]["ImportData"]["dependentTasks"] = ["Nope"]
    with pytest.raises(kfp_launcher.LauncherError, match="unknown task"):
        kfp_launcher.task_order(spec)


def test_placeholders_resolve_like_the_launcher():
    executor_input = {
        "inputs": {
            "parameterValues": {"s": "a b", "i": 32.0, "f": 0.5, "b": True, "l": [1, "x"]},
            "parameters": {"legacy": {"intValue": "4"}},
            "artifacts": {"m": {"artifacts": [{"uri": "gs://b/m", "metadata": {"k": 1}}]}},
        },
        "outputs": {
            "artifacts": {"o": {"artifacts": [{"uri": "gs://b/o"}]}},
            "parameters": {"p": {"outputFile": "/tmp/p"}},
            "outputFile": "gs://b/t/executor_output.json",
        },
    }

    def resolve(text):
        return kfp_launcher.resolve_placeholders(
            text,
            executor_input,
            {"pipeline_root": "gs://b/root"},
            lambda u: u.replace("gs:/", "/gcs"),
        )

    assert json.loads(resolve("{{$}}")) == executor_input
    assert resolve("x={{$.inputs.parameters['s']}},{{$.inputs.parameters['i']}}") == "x=a b,32"
    assert resolve("{{$.inputs.parameters['f']}} {{$.inputs.parameters['b']}}") == "0.5 true"
    assert resolve("{{$.inputs.parameters['l']}}") == '[1, "x"]'
    assert resolve("{{$.inputs.parameters['legacy']}}") == "4"
    assert resolve("{{$.inputs.artifacts['m'].uri}}") == "gs://b/m"
    assert resolve("{{$.inputs.artifacts['m'].path}}") == "/gcs/b/m"
    assert resolve("{{$.inputs.artifacts['m'].metadata}}") == '{"k": 1}'
    assert resolve("{{$.outputs.artifacts['o'].uri}}") == "gs://b/o"
    assert resolve("{{$.outputs.parameters['p'].output_file}}") == "/tmp/p"
    assert resolve("{{$.pipeline_root}}/x") == "gs://b/root/x"
    for unknown in ("{{$.inputs.parameters['nope']}}", "{{$.pipeline_job_nope}}", "{{$.x['y']}}"):
        with pytest.raises(kfp_launcher.LauncherError):
            resolve(unknown)


def test_small_spec_runs_in_dag_order_with_outputs_fed_downstream(tmp_path):
    gcs = tmp_path / "gcs"
    (gcs / BUCKET / "data").mkdir(parents=True)
    (gcs / BUCKET / "data" / "in.txt").write_text("a\nb\nc\n")
    launcher = kfp_launcher.Launcher(_small_spec(), gcs, tmp_path / "work", pythonpath=[str(REPO)])
    run = launcher.run("run-1")
    assert list(run.tasks) == ["ImportData", "Count", "Report", "Aaa"]
    local = f"{gcs}/"

    imported = run.tasks["ImportData"].artifact("artifact")
    assert imported["uri"] == f"gs://{BUCKET}/data/in.txt"
    assert imported["metadata"] == {"source": "test"}

    count = run.tasks["Count"]
    counted = count.artifact("counted")
    task_root = f"gs://{BUCKET}/root/small/run-1/Count_2"
    assert counted["uri"] == f"{task_root}/counted"  # the launcher's view: gs://
    assert counted["metadata"] == {"lines": 3.0, "where": f"{task_root}/counted"}  # mapped back
    assert count.parameters == {"total": 7.0}
    record = json.loads((gcs / BUCKET / "root/small/run-1/Count_2/counted/record.json").read_text())
    argv = dict(a[2:].split("=", 1) for a in record["argv"][1:] if "=" in a)
    assert argv == {
        "n": "3",
        "config": json.dumps({"out": f"{local}{BUCKET}/x"}),  # gs:// inside JSON mapped too
        "greeting": "hi",  # the pipeline parameter's default
        "unset": "dflt",  # the component's default
        "data_uri": f"{local}{BUCKET}/data/in.txt",
        "data_path": f"{local}{BUCKET}/data/in.txt",
        "out": f"{local}{BUCKET}/root/small/run-1/Count_2/counted",
        "total_file": f"{local}{BUCKET}/root/small/run-1/Count_2/parameters/total",
        "root": f"{local}{BUCKET}/root",
        "task": "Count",
    }
    seen = record["executor_input"]  # what the container got: a valid ExecutorInput
    assert seen["inputs"]["parameterValues"]["n"] == 3.0
    assert seen["inputs"]["artifacts"]["data"]["artifacts"][0]["type"]["schemaTitle"] == (
        "system.Dataset"
    )
    assert seen["outputs"]["outputFile"] == (
        f"{local}{BUCKET}/root/small/run-1/Count_2/executor_output.json"
    )
    assert record["cwd"].startswith(str(tmp_path / "work" / "run-1"))

    report = run.tasks["Report"]  # wrote no ExecutorOutput: outputs keep the launcher's
    got = report.executor_input["inputs"]
    assert got["parameterValues"]["total"] == 7.0
    assert got["artifacts"]["counted"]["artifacts"][0]["metadata"]["lines"] == 3.0
    assert report.artifact("report")["metadata"] == {}
    report_argv = json.loads(
        (gcs / BUCKET / "root/small/run-1/Report_3/report/record.json").read_text()
    )["argv"]
    assert report_argv[1:] == [
        "--total=7",
        f"--counted={json.dumps(counted['metadata'], sort_keys=True).replace('gs://', local)}",
    ]
    assert run.tasks["Aaa"].log.exists()


def test_failures_name_the_task_and_unsupported_specs_are_rejected(tmp_path):
    spec = _small_spec()
    spec["deploymentSpec"]["executors"]["exec-report"] = _container(
        "-c", "import sys; print('boom'); sys.exit(3)", command=("python",)
    )
    launcher = kfp_launcher.Launcher(spec, tmp_path / "gcs", tmp_path / "work")
    with pytest.raises(kfp_launcher.TaskFailed, match=r"(?s)task Report.*exit 3.*boom"):
        launcher.run("run-1")

    spec = _small_spec()
    spec["deploymentSpec"]["executors"]["exec-count"]["container"]["args"].append("--move_out")
    with pytest.raises(kfp_launcher.LauncherError, match="counted: moved from the object store"):
        kfp_launcher.Launcher(spec, tmp_path / "gcs", tmp_path / "work").run("run-4")

    spec = _small_spec()
    spec["deploymentSpec"]["executors"]["exec-aaa"] = {"resolver": {"outputArtifactQueries": {}}}
    with pytest.raises(kfp_launcher.LauncherError, match="resolver executors not implemented"):
        kfp_launcher.Launcher(spec, tmp_path / "gcs", tmp_path / "work").run("run-2")
    assert not list((tmp_path / "work").glob("run-2/*.log"))  # rejected before any task ran
    spec = _small_spec()
    spec["deploymentSpec"]["executors"]["exec-aaa"]["container"]["command"] = ["bash", "-c"]
    with pytest.raises(kfp_launcher.LauncherError, match="not the image's python"):
        kfp_launcher.Launcher(spec, tmp_path / "gcs", tmp_path / "work").run("run-3")
    spec["root"]["dag"]["tasks"]["Aaa"]["taskInfoo"] = {}
    with pytest.raises(kfp_launcher.LauncherError, match="not a valid PipelineSpec"):
        kfp_launcher.Launcher(spec, tmp_path / "gcs", tmp_path / "work")


def test_open_source_kfp_backend_pod_outputs_ids_environment_and_cache(tmp_path, monkeypatch):
    """backend=KFP: the executor output at the pod-local /tmp/kfp_outputs, numeric artifact ids
    (an importer's reused for the same URI), nothing of this machine's environment, and KFP's
    cache: the same inputs reuse the earlier execution's outputs (same ids), a changed
    parameter runs the task again and, through its new artifact id, the task after it."""
    monkeypatch.setenv("HOST_ONLY_VARIABLE", "x")
    gcs = tmp_path / "gcs"
    (gcs / BUCKET / "data").mkdir(parents=True)
    (gcs / BUCKET / "data" / "in.txt").write_text("a\nb\nc\n")
    spec = _small_spec()
    for task in ("Count", "Report"):
        spec["root"]["dag"]["tasks"][task]["cachingOptions"] = {"enableCache": True}
    env = kfp_launcher.image_environment(REPO / "Dockerfile")
    launcher = kfp_launcher.Launcher(
        spec, gcs, tmp_path / "work", pythonpath=[str(REPO)], env=env, backend=kfp_launcher.KFP
    )
    first = launcher.run("run-1")
    assert not any(t.cached for t in first.tasks.values())
    count = first.tasks["Count"]
    assert count.executor_input["outputs"]["outputFile"] == "/tmp/kfp_outputs/output_metadata.json"
    assert count.parameters == {"total": 7.0}  # read back from the pod's file
    assert not (gcs / BUCKET / "root/small/run-1/Count_2/executor_output.json").exists()
    record = json.loads((gcs / BUCKET / "root/small/run-1/Count_2/counted/record.json").read_text())
    seen = record["env"]
    assert "HOST_ONLY_VARIABLE" not in seen and seen["HOME"] != os.environ.get("HOME")
    assert seen["PYTHONPATH"] == str(REPO) and seen["BERT_TFX_CACHE"] == "/opt/bert_tfx"
    assert seen["TF_CPP_MIN_LOG_LEVEL"] == env["TF_CPP_MIN_LOG_LEVEL"]
    ids = {
        t: [a["name"] for a in r.outputs.get(k, [])]
        for t, r in first.tasks.items()
        for k in r.outputs
    }
    assert all(name.isdigit() for names in ids.values() for name in names), ids
    imported = first.tasks["ImportData"].artifact("artifact")["name"]

    second = launcher.run("run-2")  # same inputs: Count and Report cached, Aaa (no cache) runs
    assert [n for n, t in second.tasks.items() if t.cached] == ["Count", "Report"]
    assert second.tasks["ImportData"].artifact("artifact")["name"] == imported
    for task in ("Count", "Report"):
        assert second.tasks[task].outputs == first.tasks[task].outputs
    assert not (gcs / BUCKET / "root/small/run-2/Count_2").exists()

    third = launcher.run("run-3", parameter_values={"greeting": "hello"})
    assert not any(t.cached for t in third.tasks.values())
    counted = [r.tasks["Count"].artifact("counted")["name"] for r in (first, third)]
    assert counted[0] != counted[1]


def test_ram_buckets_and_image_files_are_seen_by_every_process_of_a_pod(tmp_path):
    """A `ram://` bucket is readable through tf.io.gfile in the container and in a process it
    starts (as Beam's workers), never as a local path; `image_files` appear at their /opt path."""
    bucket, image = tmp_path / "bucket", tmp_path / "image"
    (bucket / "data").mkdir(parents=True)
    (bucket / "data" / "in.txt").write_text("from the bucket")
    image.mkdir()
    (image / "vocab.txt").write_text("[PAD]")
    program = textwrap.dedent(
        """
        import json, os, subprocess, sys
        import tensorflow as tf
        out = json.loads(sys.argv[1])["outputs"]["artifacts"]["seen"]["artifacts"][0]["uri"]
        child = subprocess.run(
            [sys.executable, "-c", "import tensorflow as tf; "
             "print(tf.io.gfile.GFile('ram://bkt/data/in.txt').read())"],
            capture_output=True, text=True, check=True).stdout.strip()
        seen = {
            "gfile": tf.io.gfile.GFile("ram://bkt/data/in.txt").read(),
            "child": child,
            "local": os.path.exists("ram://bkt/data/in.txt"),
            "image": open("/opt/bert_tfx_test/vocab.txt").read(),
        }
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "seen.json"), "w") as f:
            json.dump(seen, f)
        """
    )
    plain = {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}
    spec = {
        "pipelineInfo": {"name": "pod"},
        "schemaVersion": "2.1.0",
        "sdkVersion": "test",
        "defaultPipelineRoot": f"gs://{BUCKET}/root",
        "root": {
            "dag": {
                "tasks": {"Look": {"taskInfo": {"name": "Look"}, "componentRef": {"name": "c"}}}
            }
        },
        "components": {
            "c": {
                "executorLabel": "e",
                "outputDefinitions": {"artifacts": {"seen": {"artifactType": plain}}},
            }
        },
        "deploymentSpec": {
            "executors": {"e": _container("{{$}}", command=("python", "-c", program))}
        },
    }
    launcher = kfp_launcher.Launcher(
        spec,
        tmp_path / "gcs",
        tmp_path / "work",
        env=kfp_launcher.image_environment(REPO / "Dockerfile"),
        backend=kfp_launcher.KFP,
        image_files={"/opt/bert_tfx_test": image},
        ram_buckets={"ram://bkt": bucket},
    )
    run = launcher.run("run-1")
    seen = json.loads(
        (
            Path(launcher.gcs.local_path(run.tasks["Look"].artifact("seen")["uri"])) / "seen.json"
        ).read_text()
    )
    assert seen == {
        "gfile": "from the bucket",
        "child": "from the bucket",
        "local": False,
        "image": "[PAD]",
    }
    assert not Path("/opt/bert_tfx_test").exists()  # mounted in the pod only


# --- the pretraining pipeline, compiled and launched ------------------------------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, gensim_dir, vocab_file, pipeline_helpers):
    """`tfx_pipeline.run --runner=kubeflow` for the pretraining pipeline at `make demo`'s tiny
    size (10 Wikipedia articles of 50 sentences, 40 steps), every path a gs:// URI, and the
    bucket's local stand-in holding the corpus and vocab. Its Trainer spans 2 hosts (LAMB,
    2-step accumulation, multi_worker_mirrored): its task submits a TFJob, run here as 2 local
    processes with the TF_CONFIG the Training Operator would give each (tfjob.LocalClient)."""
    from bert_tf.data import corpora
    from demo import run as demo
    from tfx_pipeline import configs, run

    root = tmp_path_factory.mktemp("kfp")
    gcs = root / "gcs"
    documents = list(corpora.wikipedia_documents(gensim_dir / "enwiki-shortened.xml.bz2"))[:10]
    corpora.write_documents([d[:50] for d in documents], gcs / BUCKET / "corpus" / "wiki.txt")
    (gcs / BUCKET / "vocab").mkdir(parents=True)
    shutil.copy(vocab_file, gcs / BUCKET / "vocab" / "vocab.txt")
    spec_file = root / "pretrain.yaml"
    pipeline_helpers.run_in_process(
        run,
        "--pipeline=pretrain",
        "--runner=kubeflow",
        "--image=registry.example.com/bert-tfx:ci",
        f"--data_root=gs://{BUCKET}/corpus",
        f"--vocab_file=gs://{BUCKET}/vocab/vocab.txt",
        f"--pipeline_root=gs://{BUCKET}/root",
        f"--serving_model_dir=gs://{BUCKET}/serving",
        f"--model_name={demo.MODEL_NAME}",
        # The demo's sizes on a tiny BERT from scratch (the demo continues MiniLM: too slow for
        # this test, and the launcher's run is what it tests), 40 steps.
        *configs.option_flags(
            dataclasses.replace(configs.DEMO_PRETRAINING, preset="tiny", train_steps=40)
        ),
        # 40 steps make the constant predictor: no margin over the data's baselines here (the
        # launcher's run is what this tests; test_pipelines.py tests the gate).
        "--min_masked_lm_gain=-1",
        "--min_next_sentence_gain=-1",
        "--beam_pipeline_args=" + ",".join(configs.IN_MEMORY_BEAM_PIPELINE_ARGS),
        # The issue's paper-scale settings at this size: a Trainer of TRAINER_REPLICAS hosts.
        f"--trainer_replicas={TRAINER_REPLICAS}",
        "--distribution_strategy=multi_worker_mirrored",
        "--optimizer=lamb",
        "--gradient_accumulation_steps=2",
        f"--output_spec_file={spec_file}",
    )
    launcher = kfp_launcher.for_repository(spec_file, gcs, root / "work", REPO)
    launcher.env[tfjob.CLIENT_ENV] = "local"  # the Trainer task's replicas: local processes
    return launcher, gcs / BUCKET / "serving" / demo.MODEL_NAME


class FirstRun(NamedTuple):
    tasks: dict[str, kfp_launcher.TaskResult]
    # Read right after the run: the second run may push another version (tests run in any
    # order).
    versions: list[int]


@pytest.fixture(scope="module")
def first_run(compiled) -> FirstRun:
    launcher, model_base_path = compiled
    run = launcher.run("run-1")
    print(f"  [kfp] run-1: {run.seconds:.0f} s", flush=True)
    return FirstRun(run.tasks, _versions(model_base_path))


@pytest.fixture(scope="module")
def second_run(compiled, first_run):
    """The same spec again (a new run id: fresh task roots), same serving folder."""
    launcher, _ = compiled
    run = launcher.run("run-2")
    print(f"  [kfp] run-2: {run.seconds:.0f} s", flush=True)
    return run


def _local(launcher, uri: str) -> Path:
    return Path(launcher.gcs.local_path(uri))


def _report(launcher, run) -> dict:
    evaluation = run.tasks["PretrainingEvaluator"].artifact("evaluation")
    return json.loads((_local(launcher, evaluation["uri"]) / "metrics.json").read_text())


def _versions(model_base_path: Path) -> list[int]:
    return sorted(int(p.parent.name) for p in model_base_path.glob("*/saved_model.pb"))


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_container_task_ran_and_the_model_was_pushed(compiled, first_run):
    launcher, model_base_path = compiled
    tasks = launcher.spec["root"]["dag"]["tasks"]
    assert set(first_run.tasks) == set(tasks)
    executors = launcher.spec["deploymentSpec"]["executors"]
    assert all("container" in e for e in executors.values())  # no importer, no resolver
    assert {t.kind for t in first_run.tasks.values()} == {"container"}
    assert {"ServingBaseline", "PretrainingEvaluator", "ServingCheck", "Pusher"} <= set(tasks)

    # Nothing served yet: ServingBaseline's output is the candidate's copy, and the evaluator
    # judged on the absolute thresholds only.
    baseline = first_run.tasks["ServingBaseline"].artifact("baseline_model")["metadata"]
    assert baseline["is_candidate"] == 1 and baseline["baseline_version"] == -1
    report = _report(launcher, first_run)
    assert report["blessed"] and report["baseline"] is None
    assert isinstance(report["baseline_model"], str)  # blessing.NO_BASELINE's note

    blessing = first_run.tasks["PretrainingEvaluator"].artifact("blessing")["metadata"]
    assert blessing["blessed"] == 1
    # TFX's entrypoint turned the model's int id back into its artifact name (a Vertex resource
    # name here): the evaluator's executor is a TFX Evaluator executor subclass.
    model = first_run.tasks["Trainer"].artifact("model")
    assert blessing["current_model_id"] == model["name"]
    assert blessing["current_model"] == model["uri"]

    # The model server loaded the export from the bucket, and the encoder's two warmup requests
    # answered over gRPC and REST as the export in-process.
    infra = first_run.tasks["ServingCheck"].artifact("blessing")
    assert infra["metadata"]["blessed"] == 1 and infra["metadata"]["requests_checked"] == 4
    assert (_local(launcher, infra["uri"]) / "INFRA_BLESSED").exists()

    (version,) = first_run.versions
    pushed = first_run.tasks["Pusher"].artifact("pushed_model")["metadata"]
    assert pushed["pushed"] == 1
    serving = f"gs://{BUCKET}/serving/{model_base_path.name}"
    assert pushed["pushed_destination"] == f"{serving}/{version}"


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_trainer_ran_as_a_tfjob_of_two_replicas(compiled, first_run):
    """The Trainer task submitted a TFJob of one Chief and one Worker; each replica ran TFX's
    Trainer executor with the TF_CONFIG the operator gives it, in one 2-replica
    multi_worker_mirrored cluster, LAMB with accumulation; the chief's model is the one pushed."""
    from tfx_pipeline import trainer_lib
    from tfx_pipeline.components import distributed_trainer

    launcher, _ = compiled
    config = json.loads(
        launcher.spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]["custom_config"][
            "runtimeValue"
        ]["constant"]
    )
    assert {k: config[tfjob.TFJOB_KEY][k]["replicas"] for k in ("Chief", "Worker")} == {
        "Chief": 1,
        "Worker": TRAINER_REPLICAS - 1,
    }
    run_dir = _local(launcher, first_run.tasks["Trainer"].artifact("model_run")["uri"])
    records = {
        path.name: json.loads(path.read_text()) for path in sorted(run_dir.glob("replica-*.json"))
    }
    assert set(records) == {"replica-chief-0.json", "replica-worker-0.json"}
    cluster = records["replica-chief-0.json"]["tf_config"]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "worker": 1}
    for name, record in records.items():
        kind, index = name.removesuffix(".json").split("-")[1:]
        assert record["tf_config"]["cluster"] == cluster  # one cluster
        assert record["tf_config"]["task"] == {"type": kind, "index": int(index)}
        assert record["chief"] == (kind == "chief")
        assert record["replicas_in_sync"] == TRAINER_REPLICAS
    # The chief's run folder and model are the step's: the options it trained with, the export.
    trained = json.loads((run_dir / trainer_lib.OPTIONS_FILE).read_text())
    assert trained["optimizer"] == "lamb" and trained["gradient_accumulation_steps"] == 2
    assert trained["distribution_strategy"] == distributed_trainer.MULTI_WORKER
    model = _local(launcher, first_run.tasks["Trainer"].artifact("model")["uri"])
    assert (model / "Format-Serving" / "saved_model.pb").exists()
    pushed = first_run.tasks["Pusher"].artifact("pushed_model")["metadata"]
    assert pushed["pushed"] == 1


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_pushed_model_answers_raw_text_in_a_fresh_process(compiled, first_run, pipeline_helpers):
    from demo import run as demo

    _, model_base_path = compiled
    (version,) = first_run.versions  # the one version the first run pushed
    answers = pipeline_helpers.serve_in_fresh_process(
        str(model_base_path / str(version)),
        f"""
        masked = signatures["fill_mask"](
            text=tf.constant({demo.FILL_MASK_TEXTS!r}), top_k=tf.constant(5))
        out = signatures["serving_default"](text=tf.constant({demo.ENCODE_TEXTS!r}))
        print(json.dumps({{
            "tokens": [[t.decode() for t in row[0]] for row in masked["top_k_tokens"].numpy()],
            "probabilities": masked["top_k_probabilities"].numpy()[:, 0].tolist(),
            "pooled": out["pooled_output"].numpy().tolist()}}))
        """,
    )
    assert [len(t) for t in answers["tokens"]] == [5] * len(demo.FILL_MASK_TEXTS)
    for probabilities in answers["probabilities"]:
        assert probabilities == sorted(probabilities, reverse=True)
        assert 0 < sum(probabilities) <= 1 + 1e-5
    pooled = np.array(answers["pooled"])
    assert pooled.shape == (len(demo.ENCODE_TEXTS), 128) and np.isfinite(pooled).all()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_second_run_compares_against_the_first_push(compiled, first_run, second_run):
    launcher, model_base_path = compiled
    assert set(second_run.tasks) == set(first_run.tasks)
    first_version = _versions(model_base_path)[0]
    first_root = first_run.tasks["Trainer"].artifact("model")["uri"]
    assert second_run.tasks["Trainer"].artifact("model")["uri"] != first_root  # fresh roots

    baseline = second_run.tasks["ServingBaseline"].artifact("baseline_model")
    assert baseline["metadata"]["is_candidate"] == 0
    assert baseline["metadata"]["baseline_version"] == first_version
    assert baseline["metadata"]["baseline_source"] == (
        f"gs://{BUCKET}/serving/{model_base_path.name}/{first_version}"
    )
    report = _report(launcher, second_run)
    assert report["baseline_model"]["version"] == first_version
    assert set(report["baseline"]) >= {"masked_lm_accuracy", "next_sentence_accuracy"}

    blessing = second_run.tasks["PretrainingEvaluator"].artifact("blessing")["metadata"]
    # TFX's blessing keys: baseline_model (uri) and baseline_model_id (the artifact's name).
    assert blessing["baseline_model"] == baseline["uri"]
    assert blessing["baseline_model_id"] == baseline["name"]
    assert blessing["blessed"] == report["blessed"]
    # The same inputs and seeds usually train the same weights again: ServingBaseline compares
    # the candidate with the serving version, and an identical model is never pushed twice.
    # Otherwise it is pushed again only if blessed against that baseline.
    from tfx_pipeline.components.serving_baseline import model_digest

    candidate = _local(launcher, second_run.tasks["Trainer"].artifact("model")["uri"])
    same = model_digest(str(candidate / "Format-Serving")) == model_digest(
        str(model_base_path / str(first_version))
    )
    assert int(baseline["metadata"]["same_as_serving"]) == int(same)
    pushed = second_run.tasks["Pusher"].artifact("pushed_model")["metadata"]
    if same:
        assert int(pushed["pushed"]) == 0
        assert pushed["not_pushed_reason"] == f"same model as version {first_version}"
        assert _versions(model_base_path) == [first_version]
    else:
        assert int(pushed["pushed"]) == int(report["blessed"])
        assert len(_versions(model_base_path)) == 1 + int(report["blessed"])
