"""The compiled fine-tuning pipeline with every optional component runs under the KFP launcher
stand-in (kfp_launcher.py; see test_kfp_launcher.py for the pretraining pipeline and the
harness's own tests): the checkpoint importer as KFP's driver handles one, ExampleValidator,
Transform, the Tuner (two learning rates), the Trainer with its best values, TFMA's Evaluator,
ServingCheck, the Pusher and BulkInferrer, each container as the launcher starts it, the
project's virtualenv standing in for the image. A file of its own so that `make test`'s workers
run it beside the pretraining launch (~10 min each on 2 cores).
"""

import shutil
from pathlib import Path

import bert_tfx_tests_kfp_launcher as kfp_launcher  # tests/tfx_pipeline/kfp_launcher.py (conftest.py)
import pytest

REPO = Path(__file__).resolve().parents[2]
BUCKET = "bert-tfx-ci"
MODEL_NAME = "cls"


def _compile(pipeline_helpers, spec_file: Path, data: str, *extra: str) -> None:
    """`tfx_pipeline.run --runner=kubeflow --pipeline=classify --tune --bulk_inference` on the
    bucket's `data` folder, MiniLM (gs://BUCKET/minilm) as the imported checkpoint, tiny
    sizes, every path a gs:// URI."""
    from tfx_pipeline import configs, run

    pipeline_helpers.run_in_process(
        run,
        "--pipeline=classify",
        "--runner=kubeflow",
        "--image=registry.example.com/bert-tfx:ci",
        "--task_name=text_classification",
        f"--data_root=gs://{BUCKET}/{data}",
        f"--init_checkpoint=gs://{BUCKET}/minilm",
        f"--vocab_file=gs://{BUCKET}/minilm/vocab.txt",
        f"--pipeline_root=gs://{BUCKET}/root",
        f"--serving_model_dir=gs://{BUCKET}/serving",
        f"--model_name={MODEL_NAME}",
        "--max_seq_length=32",
        "--train_batch_size=16",
        "--train_steps=20",
        "--iterations_per_loop=10",
        *pipeline_helpers.tune_flags,
        "--tune_num_train_epochs=1",
        "--bulk_inference",
        "--beam_pipeline_args=" + ",".join(configs.IN_MEMORY_BEAM_PIPELINE_ARGS),
        f"--output_spec_file={spec_file}",
        *extra,
    )


@pytest.fixture(scope="module")
def classify_run(tmp_path_factory, gensim_dir, minilm_dir, pipeline_helpers):
    """The classify pipeline (`_compile`) on the polarity sentences (140 train, 60 dev, the dev
    sentences unlabelled as test.tsv), launched once. Returns the launcher, the run, the
    serving folder and the test sentences."""
    root = tmp_path_factory.mktemp("kfp_classify")
    gcs = root / "gcs"
    texts = pipeline_helpers.write_polarity_task(gensim_dir, gcs / BUCKET / "polarity")
    shutil.copytree(minilm_dir, gcs / BUCKET / "minilm")
    _compile(pipeline_helpers, root / "classify.yaml", "polarity")
    launcher = kfp_launcher.for_repository(root / "classify.yaml", gcs, root / "work", REPO)
    run_1 = launcher.run("run-1")
    print(f"  [kfp] classify run-1: {run_1.seconds:.0f} s", flush=True)
    return launcher, run_1, gcs / BUCKET / "serving" / MODEL_NAME, texts


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
    assert run.tasks["pretrained_checkpoint_importer"].kind == "importer"

    def uri(task: str, key: str) -> str:
        return launcher.gcs.local_path(run.tasks[task].artifact(key)["uri"])

    # With 20 steps either learning rate may score higher on 60 sentences: the best is used.
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
    classify_run, tmp_path, pipeline_helpers
):
    """A spec compiled with --schema_dir (the first run's SchemaGen output, copied into the
    bucket as a curated schema) on new data whose labels include an unseen one (every tenth
    row "neutral") and with three empty training sentences: the launch fails at
    ExampleValidator naming the anomalies; nothing after it runs, nothing is pushed."""
    launcher, run, model_base_path, _ = classify_run
    served = pipeline_helpers.pushed_model(model_base_path)
    bucket = Path(launcher.gcs.local_path(f"gs://{BUCKET}"))
    schema = launcher.gcs.local_path(run.tasks["SchemaGen"].artifact("schema")["uri"])
    shutil.copytree(schema, bucket / "schema")
    shutil.copytree(bucket / "polarity", bucket / "polarity_new")
    for name in ("train", "dev"):
        path = bucket / "polarity_new" / f"{name}.tsv"
        header, *rows = path.read_text().splitlines()
        rows = [r if i % 10 else r.rsplit("\t", 1)[0] + "\tneutral" for i, r in enumerate(rows)]
        if name == "train":  # and three empty sentences
            rows = [
                "\t" + r.rsplit("\t", 1)[1] if i in (3, 50, 99) else r for i, r in enumerate(rows)
            ]
        path.write_text("\n".join([header, *rows]) + "\n")
    spec_file = tmp_path / "classify-new.yaml"
    _compile(pipeline_helpers, spec_file, "polarity_new", f"--schema_dir=gs://{BUCKET}/schema")
    checked = kfp_launcher.for_repository(spec_file, launcher.gcs.root, tmp_path / "work", REPO)
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
    started = {log.name.split(".")[0] for log in (tmp_path / "work/run-new-data").glob("*.log")}
    assert "ImportSchemaGen" in started and not {"Transform", "Tuner", "Trainer"} & started
    assert pipeline_helpers.pushed_model(model_base_path) == served
