"""The compiled fine-tuning pipelines run as open-source Kubeflow Pipelines runs them
(kfp_launcher.py, backend KFP: no preCacheCheck, the pod-local executor output, numeric artifact
ids, KFP's cache, the image's environment, default vocab and default Beam runner), their data
and the MiniLM checkpoint in a `ram://` bucket that no `open()`/`os.path` can read, the pipeline
root and serving folder `gs://` (a local folder). Classify with every optional component: the
checkpoint importer, ExampleValidator, Transform, the Tuner (two learning rates), the Trainer
with its best values, TFMA's Evaluator, ServingCheck, the Pusher and BulkInferrer. SQuAD run
three times: unchanged data is a cache hit at every task but the InputFingerprint; a document
appended to the training file gives a new ExampleGen output and a new model. A file of its own
so that `make test`'s workers run it beside the pretraining launch.
"""

import json
import shutil
from pathlib import Path

import bert_tfx_tests_kfp_launcher as kfp_launcher  # tests/tfx_pipeline/kfp_launcher.py (conftest.py)
import pytest

from tfx_pipeline import configs

REPO = Path(__file__).resolve().parents[2]
TESTDATA = REPO / "tests" / "testdata"
BUCKET = "bert-tfx-ci"  # gs://: the pipeline root and the serving folder
DATA = "ram://bert-tfx-data"  # data and checkpoint
MODEL_NAME = "cls"
# The first classify run has the image's default Beam runner (a worker process per core); the
# later compiles run Beam in each step's process, as a small job would (--beam_pipeline_args).
IN_MEMORY_BEAM = "--beam_pipeline_args=" + ",".join(configs.IN_MEMORY_BEAM_PIPELINE_ARGS)


def _compile(pipeline_helpers, spec_file: Path, *args: str) -> None:
    """`tfx_pipeline.run --runner=kubeflow` with MiniLM in the ram:// bucket as the imported
    checkpoint, the image's default vocab (no --vocab_file) and Beam runner (no
    --beam_pipeline_args), tiny sizes."""
    from tfx_pipeline import run

    pipeline_helpers.run_in_process(
        run,
        "--runner=kubeflow",
        "--image=registry.example.com/bert-tfx:ci",
        f"--init_checkpoint={DATA}/minilm",
        f"--pipeline_root=gs://{BUCKET}/root",
        f"--serving_model_dir=gs://{BUCKET}/serving",
        f"--output_spec_file={spec_file}",
        *args,
    )


def _classify_args(pipeline_helpers, data: str, *extra: str) -> list[str]:
    # 60 steps (as test_pipelines.py's classify run): enough to beat the dev file's majority
    # class (30 of 60) by the default margin, which the Evaluator requires before the push.
    return [
        "--pipeline=classify",
        "--task_name=text_classification",
        f"--data_root={DATA}/{data}",
        f"--model_name={MODEL_NAME}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--train_steps=60",
        "--iterations_per_loop=10",
        *pipeline_helpers.tune_flags,
        "--tune_num_train_epochs=1",
        "--bulk_inference",
        *extra,
    ]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory, gensim_dir, minilm_dir, pipeline_helpers) -> dict:
    """The folders behind the launchers' ram:// bucket and gs:// root, and the image's files."""
    root = tmp_path_factory.mktemp("kfp_classify")
    data = root / "bucket"
    texts = pipeline_helpers.write_polarity_task(gensim_dir, data / "polarity")
    shutil.copytree(minilm_dir, data / "minilm")
    (data / "squad").mkdir()
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        shutil.copy(TESTDATA / "squad_v1.1.json", data / "squad" / name)
    return {"root": root, "data": data, "gcs": root / "gcs", "texts": texts, "minilm": minilm_dir}


def _launcher(bucket: dict, spec_file: Path, work: str):
    return kfp_launcher.for_repository(
        spec_file,
        bucket["gcs"],
        bucket["root"] / work,
        REPO,
        backend=kfp_launcher.KFP,
        image_files={"/opt/bert_tfx/minilm": bucket["minilm"]},
        ram_buckets={DATA: bucket["data"]},
    )


@pytest.fixture(scope="module")
def classify_run(bucket, pipeline_helpers):
    """The classify pipeline on the polarity sentences (140 train, 60 dev, the dev sentences
    unlabelled as test.tsv), launched once. Returns the launcher, the run, the serving folder
    and the test sentences."""
    spec_file = bucket["root"] / "classify.yaml"
    _compile(pipeline_helpers, spec_file, *_classify_args(pipeline_helpers, "polarity"))
    launcher = _launcher(bucket, spec_file, "work")
    run_1 = launcher.run("run-1")
    print(f"  [kfp] classify run-1: {run_1.seconds:.0f} s", flush=True)
    return launcher, run_1, bucket["gcs"] / BUCKET / "serving" / MODEL_NAME, bucket["texts"]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_classify_pipeline_tunes_checks_pushes_and_scores_under_the_launcher(
    classify_run, pipeline_helpers
):
    """Every task ran (the checkpoint importer as KFP's driver does it); the Tuner tried both
    learning rates and the Trainer trained with the better; ServingCheck served the export and
    the Pusher pushed it; BulkInferrer's predictions equal the pushed model's."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the export's tokenizer ops)

    launcher, run, model_base_path, texts = classify_run
    tasks = launcher.spec["root"]["dag"]["tasks"]
    assert set(run.tasks) == set(tasks)
    assert {"Tuner", "ExampleValidator", "ServingCheck", "BulkInferrer"} <= set(tasks)
    importer = run.tasks["pretrained_checkpoint_importer"]
    assert importer.kind == "importer"
    assert importer.artifact("result")["uri"] == f"{DATA}/minilm"  # read by Tuner and Trainer
    example_gen = run.tasks["TextClassificationExampleGen"]
    assert example_gen.executor_input["inputs"]["parameterValues"]["input_base"] == (
        f"{DATA}/polarity"
    )
    # The image's default vocab (the compile named none) and Beam runner (multi-processing).
    transform = run.tasks["Transform"].executor_input["inputs"]["parameterValues"]
    assert "/opt/bert_tfx/minilm/vocab.txt" in transform["custom_config"]
    assert "--direct_running_mode=multi_processing" in json.dumps(
        launcher.spec["deploymentSpec"]["executors"]["Transform_executor"]
    )

    def uri(task: str, key: str) -> str:
        return launcher.gcs.local_path(run.tasks[task].artifact(key)["uri"])

    # Either learning rate may score higher on 60 sentences: the best is used.
    pipeline_helpers.check_tuning(
        uri("Tuner", "tuner_results"),
        uri("Tuner", "best_hyperparameters"),
        uri("Trainer", "model_run"),
        better=None,
    )
    infra = run.tasks["ServingCheck"].artifact("blessing")["metadata"]
    assert infra["blessed"] == 1
    assert run.tasks["Pusher"].artifact("pushed_model")["metadata"]["pushed"] == 1
    pushed = pipeline_helpers.pushed_model(model_base_path)
    serve = tf.saved_model.load(pushed).signatures["serving_default"]
    probabilities = serve(text_a=tf.constant(texts))["probabilities"].numpy()
    pipeline_helpers.check_scored_examples(
        Path(uri("BulkInferrer", "output_examples")) / "Split-test" / "*.gz",
        dict(zip(texts, probabilities.tolist(), strict=True)),
    )


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_data_with_anomalies_stops_at_the_example_validator_under_the_launcher(
    classify_run, bucket, tmp_path, pipeline_helpers
):
    """A spec compiled with --schema_dir (the first run's SchemaGen output, copied into the
    bucket as a curated schema) on new data whose labels include an unseen one (every tenth
    row "neutral") and with three empty training sentences: the launch fails at
    ExampleValidator naming the anomalies; nothing after it runs, nothing is pushed."""
    launcher, run, model_base_path, _ = classify_run
    served = pipeline_helpers.pushed_model(model_base_path)
    schema = launcher.gcs.local_path(run.tasks["SchemaGen"].artifact("schema")["uri"])
    shutil.copytree(schema, Path(launcher.gcs.local_path(f"gs://{BUCKET}/schema")))
    data = bucket["data"]  # the ram:// bucket's folder: read by the next tasks
    shutil.copytree(data / "polarity", data / "polarity_new")
    for name in ("train", "dev"):
        path = data / "polarity_new" / f"{name}.tsv"
        header, *rows = path.read_text().splitlines()
        rows = [r if i % 10 else r.rsplit("\t", 1)[0] + "\tneutral" for i, r in enumerate(rows)]
        if name == "train":  # and three empty sentences
            rows = [
                "\t" + r.rsplit("\t", 1)[1] if i in (3, 50, 99) else r for i, r in enumerate(rows)
            ]
        path.write_text("\n".join([header, *rows]) + "\n")
    spec_file = tmp_path / "classify-new.yaml"
    _compile(
        pipeline_helpers,
        spec_file,
        *_classify_args(pipeline_helpers, "polarity_new", f"--schema_dir=gs://{BUCKET}/schema"),
        IN_MEMORY_BEAM,
    )
    checked = _launcher(bucket, spec_file, "work-new-data")
    assert "ImportSchemaGen" in checked.spec["root"]["dag"]["tasks"]
    with pytest.raises(kfp_launcher.TaskFailed) as failed:
        checked.run("run-new-data")
    message = str(failed.value)
    assert message.startswith("task ExampleValidator (executor) failed")
    assert "ExampleValidator: 3 anomalies against the schema and the previous span" in message
    assert (
        "split 'train', feature 'text_a': Empty texts (3 examples with an empty 'text_a')"
        in message
    )
    # "neutral" is class index 2 to the curated schema's {0, 1}; the label shares also drift
    # from the first run's accepted statistics (same pipeline root).
    for split in ("train", "eval"):
        assert (
            f"split '{split}', feature 'label': Multiple errors (Integers (such as 2) not in {{0, 1}}"
            in message
        )
    assert message.count("Jensen-Shannon divergence between current and previous") == 2
    work = bucket["root"] / "work-new-data" / "run-new-data"
    started = {log.name.split(".")[0] for log in work.glob("*.log")}
    assert "ImportSchemaGen" in started and not {"Transform", "Tuner", "Trainer"} & started
    assert pipeline_helpers.pushed_model(model_base_path) == served


# --- SQuAD: KFP's cache on unchanged and on new data ------------------------------------------


@pytest.fixture(scope="module")
def squad_runs(bucket, pipeline_helpers):
    """The squad pipeline (no Tuner) on the bucket's SQuAD files, run three times: run-1, run-2
    on the same files, run-3 after an article is appended to the training file."""
    spec_file = bucket["root"] / "squad.yaml"
    _compile(
        pipeline_helpers,
        spec_file,
        "--pipeline=squad",
        # A pipeline root of its own (the last value wins): ExampleValidator keeps its accepted
        # statistics under <pipeline_root>/ExampleValidator, and the classify anomaly test's
        # drift baseline must be the classify run's (tests run in any order).
        f"--pipeline_root=gs://{BUCKET}/squad_root",
        f"--data_root={DATA}/squad",
        "--model_name=squad",
        "--max_seq_length=64",
        "--doc_stride=24",
        "--max_query_length=24",
        "--train_batch_size=16",
        "--train_steps=20",
        "--iterations_per_loop=10",
        "--min_f1=0",
        "--max_f1_decrease=100",
        IN_MEMORY_BEAM,
    )
    launcher = _launcher(bucket, spec_file, "work-squad")
    runs = [launcher.run("run-1"), launcher.run("run-2")]
    train_file = bucket["data"] / "squad" / "train-v1.1.json"
    squad_json = json.loads(train_file.read_text(encoding="utf-8"))
    article = json.loads(json.dumps(squad_json["data"][0]))
    for paragraph in article["paragraphs"]:
        for qa in paragraph["qas"]:
            qa["id"] += "-appended"
    squad_json["data"].append(article)
    train_file.write_text(json.dumps(squad_json), encoding="utf-8")
    runs.append(launcher.run("run-3"))
    for run in runs:
        print(f"  [kfp] squad {run.run_id}: {run.seconds:.0f} s", flush=True)
    return launcher, runs


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_unchanged_data_is_a_cache_hit_and_an_appended_document_trains_again(squad_runs):
    launcher, (first, second, third) = squad_runs
    containers = {n for n, t in first.tasks.items() if t.kind == "container"}
    assert not any(t.cached for t in first.tasks.values())

    # Same files: the fingerprint task runs (never cached) and finds them unchanged; every other
    # task's key is the first run's, its outputs (same artifact ids, same model) reused.
    fingerprint = first.tasks["InputFingerprint"].parameters["fingerprint"]
    assert second.tasks["InputFingerprint"].parameters["fingerprint"] == fingerprint
    assert not second.tasks["InputFingerprint"].cached
    assert {n for n, t in second.tasks.items() if t.cached} == containers - {"InputFingerprint"}
    for name in ("SquadExampleGen", "Trainer", "Pusher"):
        assert second.tasks[name].outputs == first.tasks[name].outputs

    # One more article: a new fingerprint, so ExampleGen runs again (KFP has no other way to
    # know: no preCacheCheck) and writes more windows; every task after it sees a new input
    # artifact id and runs: a new model, trained on them.
    assert third.tasks["InputFingerprint"].parameters["fingerprint"] != fingerprint
    assert not any(t.cached for t in third.tasks.values())
    examples = [r.tasks["SquadExampleGen"].artifact("examples") for r in (first, third)]
    assert examples[0]["name"] != examples[1]["name"]
    assert examples[0]["uri"] != examples[1]["uri"]
    windows = [_count_records(launcher, e["uri"], "train") for e in examples]
    assert windows[1] > windows[0]
    models = [r.tasks["Trainer"].artifact("model") for r in (first, third)]
    assert models[0]["name"] != models[1]["name"] and models[0]["uri"] != models[1]["uri"]
    assert (Path(launcher.gcs.local_path(models[1]["uri"])) / "Format-Serving").is_dir()


def _count_records(launcher, uri: str, split: str) -> int:
    import tensorflow as tf

    files = sorted((Path(launcher.gcs.local_path(uri)) / f"Split-{split}").glob("*.gz"))
    return sum(1 for _ in tf.data.TFRecordDataset([str(f) for f in files], "GZIP"))
