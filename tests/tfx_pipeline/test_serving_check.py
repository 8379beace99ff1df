"""ServingCheck on tiny exports: its executor infra-blesses a servable one, and not one that
uses an op the stock TF Serving lacks (unless allowed), does not load, answers differently from the export in-process, or is not available in time
(without raising); the model server is gone afterwards either way. Our Pusher pushes nothing
without the infra blessing, also in a small pipeline on the local runner (ServingCheck ->
Pusher), and in the same pipeline compiled for Kubeflow and run by the KFP launcher stand-in.
The full pipelines' runs are test_pipelines.py's, test_squad_pipeline.py's and
test_kfp_launcher*.py's."""

import os
import shutil
import time
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text
from tfx import types
from tfx.types import standard_artifacts

from serving.signatures import WARMUP_FILE
from serving.toy_models import save_strings_model
from tfx_pipeline.components import serving_baseline, serving_check


class NoisyModel(tf.Module):
    """`text` -> `noise`: a new random number per call, so no two runs answer alike."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text):
        return {"noise": tf.random.uniform(tf.shape(text))}


def _model_artifact(export_dir: Path) -> standard_artifacts.Model:
    """A Trainer Model artifact whose Format-Serving is `export_dir`."""
    model = standard_artifacts.Model()
    model.uri = str(export_dir.parent)
    assert export_dir.name == "Format-Serving"
    return model


def _strings_export(root: Path) -> Path:
    return save_strings_model(root / "model" / "Format-Serving", warmup_requests=3)


def _server_children() -> list[str]:
    """Command lines of this process's live children that run the model server."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and "serving.server" in cmdline and " Z " not in stat:
            found.append(cmdline)
    return found


def _check(tmp_path: Path, export_dir: Path, timeout_seconds: int = 300, **properties):
    blessing = standard_artifacts.InfraBlessing()
    blessing.uri = str(tmp_path / "blessing")
    os.makedirs(blessing.uri)
    serving_check.Executor().Do(
        {"model": [_model_artifact(export_dir)]},
        {"blessing": [blessing]},
        {"model_name": "strings", "timeout_seconds": timeout_seconds, **properties},
    )
    assert not _server_children()  # stopped in every case
    return blessing


def _not_blessed(blessing) -> str:
    assert blessing.get_int_custom_property("blessed") == 0
    assert os.listdir(blessing.uri).count("INFRA_NOT_BLESSED") == 1
    assert "INFRA_BLESSED" not in os.listdir(blessing.uri)
    return blessing.get_string_custom_property(serving_check.NOT_BLESSED_REASON)


def test_a_servable_export_is_infra_blessed(tmp_path):
    """Three warmup requests, each over gRPC and REST: 6 answers equal the in-process ones
    (int lengths and upper-cased strings, REST's strings included)."""
    blessing = _check(tmp_path, _strings_export(tmp_path))
    assert blessing.get_int_custom_property("blessed") == 1
    assert sorted(os.listdir(blessing.uri)) == ["INFRA_BLESSED", serving_check.SERVER_LOG]
    assert blessing.get_int_custom_property(serving_check.REQUESTS_CHECKED) == 6
    assert blessing.get_string_custom_property(serving_check.MODEL_SERVER) == "serving.server"
    assert not blessing.has_custom_property(serving_check.NOT_BLESSED_REASON)


def test_an_export_that_does_not_load_is_not_blessed(tmp_path):
    export_dir = _strings_export(tmp_path)
    (export_dir / "saved_model.pb").write_bytes(b"not a SavedModel")
    reason = _not_blessed(_check(tmp_path, export_dir))
    assert reason.startswith("the export does not load in-process: "), reason


def test_an_export_the_model_server_does_not_load_is_not_blessed(tmp_path):
    """A warmup file cut inside a record: TFRecordDataset reads the intact records (so the
    export answers in-process), the model server fails the load (as TF Serving does), and the
    check says so at once rather than waiting for the timeout."""
    export_dir = _strings_export(tmp_path)
    with open(export_dir / WARMUP_FILE, "ab") as f:
        f.write(b"\x10\x00")  # the start of a fourth record's length
    start = time.monotonic()
    reason = _not_blessed(_check(tmp_path, export_dir, timeout_seconds=300))
    assert reason.startswith("the model server did not load the model: RuntimeError: strings "), (
        reason
    )
    assert time.monotonic() - start < 200


def test_answers_unlike_the_exports_are_not_blessed(tmp_path):
    """A model whose answers are random: the server's differ from the in-process ones."""
    export_dir = tmp_path / "model" / "Format-Serving"
    save_strings_model(tmp_path / "strings", warmup_requests=1)
    module = NoisyModel()
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})
    (export_dir / WARMUP_FILE).parent.mkdir()
    (export_dir / WARMUP_FILE).write_bytes((tmp_path / "strings" / WARMUP_FILE).read_bytes())
    reason = _not_blessed(_check(tmp_path, export_dir))
    assert reason.startswith("warmup request 1 (serving_default) over gRPC: output 'noise' "), (
        reason
    )


def test_a_model_not_available_in_time_is_not_blessed(tmp_path):
    """The deadline bounds the wait (here shorter than the server's start): a clear reason."""
    reason = _not_blessed(_check(tmp_path, _strings_export(tmp_path), timeout_seconds=2))
    assert reason.startswith("timed out: "), reason


class TrimmingModel(tf.Module):
    """`text` -> its first two words, by tf_text.RoundRobinTrimmer: op TFText>RoundRobinTrim,
    which the stock TF Serving 2.13-2.19 lacks (tensorflow-text 2.12.1's ops_lib)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, text):
        words = tf.strings.split(text)
        return {"first_words": tf_text.RoundRobinTrimmer(2).trim([words])[0].to_tensor("")}


def test_an_op_the_stock_server_lacks_is_not_blessed_unless_allowed(tmp_path):
    """Our server would answer (it imports tensorflow_text), the stock one would not load it:
    not blessed before any server starts, naming the op; blessed once `allow_ops` names it."""
    export_dir = tmp_path / "model" / "Format-Serving"
    save_strings_model(tmp_path / "strings", warmup_requests=1)
    module = TrimmingModel()
    tf.saved_model.save(module, str(export_dir), signatures={"serving_default": module.serve})
    (export_dir / WARMUP_FILE).parent.mkdir()
    (export_dir / WARMUP_FILE).write_bytes((tmp_path / "strings" / WARMUP_FILE).read_bytes())
    blessing = _check(tmp_path / "stock", export_dir)
    reason = _not_blessed(blessing)
    assert reason.startswith(f"{export_dir} uses op(s) TFText>RoundRobinTrim that the stock "), (
        reason
    )
    assert "tensorflow_model_server 2.16.1" in reason
    assert reason.endswith("ServingCheck(allow_ops=...): TFText>RoundRobinTrim")
    assert serving_check.SERVER_LOG not in os.listdir(blessing.uri)  # no server was started

    blessing = _check(tmp_path / "custom", export_dir, allow_ops="TFText>RoundRobinTrim")
    assert blessing.get_int_custom_property("blessed") == 1
    component = serving_check.ServingCheck(
        model=types.Channel(type=standard_artifacts.Model),
        model_name="m",
        allow_ops=["TFText>RoundRobinTrim", "OpB"],
    )
    assert component.exec_properties["allow_ops"] == "TFText>RoundRobinTrim,OpB"


def test_the_pusher_pushes_nothing_without_the_infra_blessing(tmp_path):
    """Our Pusher reads the infra blessing as TFX's does, and says why it did not push."""
    model = _model_artifact(_strings_export(tmp_path))
    model_blessing = standard_artifacts.ModelBlessing()
    model_blessing.set_int_custom_property("blessed", 1)
    infra_blessing = standard_artifacts.InfraBlessing()
    infra_blessing.set_int_custom_property("blessed", 0)
    infra_blessing.set_string_custom_property(serving_check.NOT_BLESSED_REASON, "timed out: x")
    pushed_model = standard_artifacts.PushedModel()
    pushed_model.uri = str(tmp_path / "pushed_model")
    serving_baseline.PusherExecutor().Do(
        {"model": [model], "model_blessing": [model_blessing], "infra_blessing": [infra_blessing]},
        {"pushed_model": [pushed_model]},
        {"push_destination": '{"filesystem": {"base_directory": "%s"}}' % (tmp_path / "push")},
    )
    assert pushed_model.get_int_custom_property("pushed") == 0
    assert pushed_model.get_string_custom_property(serving_baseline.NOT_PUSHED_REASON) == (
        "the serving check failed: timed out: x"
    )
    assert not (tmp_path / "push").exists()


def _check_and_push(
    name: str, model_uri: str, blessing_uri: str, root: str, serving: str, metadata=None
):
    """ServingCheck -> Pusher as the pipelines wire them, the Trainer's model (`model_uri`,
    holding Format-Serving) and an evaluator's blessing (blessed=1) imported."""
    from tfx import v1 as tfx

    model = tfx.dsl.Importer(source_uri=model_uri, artifact_type=standard_artifacts.Model).with_id(
        "model_importer"
    )
    evaluator_blessing = tfx.dsl.Importer(
        source_uri=blessing_uri,
        artifact_type=standard_artifacts.ModelBlessing,
        custom_properties={"blessed": 1},
    ).with_id("blessing_importer")
    check = serving_check.ServingCheck(model=model.outputs["result"], model_name="strings")
    pusher = serving_baseline.Pusher(
        model=model.outputs["result"],
        model_blessing=evaluator_blessing.outputs["result"],
        infra_blessing=check.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving)
        ),
    )
    return tfx.dsl.Pipeline(
        pipeline_name=f"serving-check-{name}",
        pipeline_root=root,
        components=[model, evaluator_blessing, check, pusher],
        metadata_connection_config=metadata,
    )


def _broken_copy(export_dir: Path, folder: Path) -> Path:
    """A copy of the export whose saved_model.pb is corrupt, as `<folder>/Format-Serving`."""
    broken = folder / "Format-Serving"
    shutil.copytree(export_dir, broken)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    return broken


def test_on_the_local_runner_the_pusher_pushes_only_a_servable_export(tmp_path, pipeline_helpers):
    """ServingCheck -> Pusher on the local runner: the good export is infra-blessed and pushed;
    a copy with a corrupt saved_model.pb is not infra-blessed, the run still completes, and
    nothing is pushed."""
    from tfx import v1 as tfx

    good = _strings_export(tmp_path / "good")
    broken = _broken_copy(good, tmp_path / "broken" / "model")
    (tmp_path / "blessing").mkdir()
    for name, export_dir in (("good", good), ("broken", broken)):
        root = tmp_path / f"run_{name}"
        pipeline = _check_and_push(
            name,
            str(export_dir.parent),
            str(tmp_path / "blessing"),
            str(root),
            str(root / "serving"),
            tfx.orchestration.metadata.sqlite_metadata_connection_config(
                str(root / "metadata.sqlite")
            ),
        )
        tfx.orchestration.LocalDagRunner().run(pipeline)
        assert not _server_children()
        (states,) = pipeline_helpers.node_states(root / "metadata.sqlite")
        assert states["ServingCheck"] == states["Pusher"] == "COMPLETE", states
        infra = pipeline_helpers.pusher_infra_blessing(root / "metadata.sqlite")
        pushed = list((root / "serving").glob("*/saved_model.pb"))
        if name == "good":
            assert infra.custom_properties["blessed"].int_value == 1
            assert len(pushed) == 1
        else:
            assert infra.custom_properties["blessed"].int_value == 0
            reason = infra.custom_properties[serving_check.NOT_BLESSED_REASON].string_value
            assert reason.startswith("the export does not load in-process: ")
            assert not pushed


def test_under_the_kfp_launcher_a_broken_export_is_not_pushed(tmp_path):
    """The same wiring compiled for Kubeflow Pipelines (KubeflowV2DagRunner, spec 2.1) and run
    task by task by the KFP launcher stand-in (kfp_launcher.py), a broken export in the bucket:
    ServingCheck's container writes INFRA_NOT_BLESSED with the reason, and the Pusher's pushes
    nothing."""
    import bert_tfx_tests_kfp_launcher as kfp_launcher  # kfp_launcher.py (conftest.py)
    import yaml
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kubeflow_v2

    gcs, bucket = tmp_path / "gcs", "gs://bert-tfx-ci"
    _broken_copy(_strings_export(tmp_path / "good"), gcs / "bert-tfx-ci" / "broken" / "model")
    (gcs / "bert-tfx-ci" / "blessing").mkdir()
    pipeline = _check_and_push(
        "broken",
        f"{bucket}/broken/model",
        f"{bucket}/blessing",
        f"{bucket}/root",
        f"{bucket}/serving",
    )
    config = kubeflow_v2.KubeflowV2DagRunnerConfig(
        default_image="registry.example.com/bert-tfx:ci", use_pipeline_spec_2_1=True
    )
    job = kubeflow_v2.KubeflowV2DagRunner(config=config).run(pipeline, write_out=False)
    spec = job["pipelineSpec"]
    spec["defaultPipelineRoot"] = job["runtimeConfig"]["gcsOutputDirectory"]
    spec_file = tmp_path / "serving-check.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    repo = Path(__file__).resolve().parents[2]
    run = kfp_launcher.for_repository(spec_file, gcs, tmp_path / "work", repo).run("run-1")

    infra = run.tasks["ServingCheck"].artifact("blessing")
    assert infra["metadata"]["blessed"] == 0
    reason = infra["metadata"][serving_check.NOT_BLESSED_REASON]
    assert reason.startswith("the export does not load in-process: "), reason
    assert os.listdir(gcs / infra["uri"][len("gs://") :]).count("INFRA_NOT_BLESSED") == 1
    assert int(run.tasks["Pusher"].artifact("pushed_model")["metadata"]["pushed"]) == 0
    assert not list((gcs / "bert-tfx-ci").glob("serving/**/saved_model.pb"))
