"""The Trainer's TFJob (tfx_pipeline/components/tfjob.py): the manifest against the Training
Operator's fields, and the local client running a job's replicas as processes with the
TF_CONFIG the operator gives each, waiting for it and failing it in one line."""

import json
import sys
import textwrap

import pytest

from tfx_pipeline.components import tfjob

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

IMAGE = "registry.example.com/bert-tfx-gpu:1"


def _job(replicas=4, command=("python", "-c", "pass"), **kwargs) -> dict:
    template = tfjob.replica_template(replicas, IMAGE, **kwargs)
    return tfjob.manifest("bert-trainer-0123456789", "team-a", template, list(command))


def test_manifest_has_one_chief_and_the_other_replicas_as_workers():
    job = _job(
        4, limits={"cpu": "8", "memory": "32G", "nvidia.com/gpu": "1"}, machine_type="a2-highgpu-1g"
    )
    assert tfjob.check_manifest(job) == []
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "TFJob")
    specs = job["spec"]["tfReplicaSpecs"]
    assert {kind: spec["replicas"] for kind, spec in specs.items()} == {"Chief": 1, "Worker": 3}
    for spec in specs.values():
        assert spec["restartPolicy"] == "Never"
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "tensorflow" and container["image"] == IMAGE
        assert container["command"] == ["python", "-c", "pass"]
        assert container["resources"] == {
            "limits": {"cpu": "8", "memory": "32G", "nvidia.com/gpu": "1"}
        }
        assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "a2-highgpu-1g"}
        # Istio's sidecar would keep a finished replica's pod running (Kubeflow's docs).
        assert spec["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert set(_job(1)["spec"]["tfReplicaSpecs"]) == {"Chief"}


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda j: j["spec"]["tfReplicaSpecs"].update(Boss={}), "unknown replica types ['Boss']"),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"),
            "tfReplicaSpecs.Worker.restartPolicy: expected one of",
        ),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Chief"].update(replicas=2),
            "tfReplicaSpecs.Chief.replicas: the chief is one replica",
        ),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=0),
            "tfReplicaSpecs.Worker.replicas: expected an integer >= 1",
        ),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ].update(name="trainer"),
            "expected one container named 'tensorflow'",
        ),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Chief"].update(gpus=1), "unknown fields ['gpus']"),
        (lambda j: j["spec"].update(replicaSpecs={}), "spec: unknown fields ['replicaSpecs']"),
        (lambda j: j.update(apiVersion="kubeflow.org/v1beta2"), "apiVersion/kind: expected"),
        (lambda j: j["metadata"].update(name="Bert_Trainer"), "metadata.name: expected"),
    ],
)
def test_check_manifest_names_what_the_operator_would_refuse(edit, expected):
    job = _job()
    edit(job)
    errors = tfjob.check_manifest(job)
    assert any(expected in e for e in errors), errors


def test_job_name_is_a_short_stable_label():
    name = tfjob.job_name("Bert_Pretraining pipeline" * 3, "gs://b/root/Trainer/model/7")
    assert name == tfjob.job_name("Bert_Pretraining pipeline" * 3, "gs://b/root/Trainer/model/7")
    assert name != tfjob.job_name("Bert_Pretraining pipeline" * 3, "gs://b/root/Trainer/model/8")
    assert len(name) <= 50 and tfjob._NAME.fullmatch(name)


# A replica: writes the TF_CONFIG it got; worker 0 exits with $EXIT_CODE in the failing case.
_REPLICA = textwrap.dedent(
    """
    import json, os, sys
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    with open(os.path.join(sys.argv[1], f"{task['type']}-{task['index']}.json"), "w") as f:
        json.dump(config, f)
    print("replica done")
    sys.exit(int(sys.argv[2]) if task["type"] == "worker" else 0)
    """
)


def test_local_client_runs_each_replica_with_its_tf_config(tmp_path, capsys):
    job = _job(3, command=("python", "-c", _REPLICA, str(tmp_path), "0"))
    status = tfjob.run(job, tfjob.LocalClient(python=sys.executable), log=print)
    assert tfjob.condition(status)[0] == "Succeeded"
    seen = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert set(seen) == {"chief-0", "worker-0", "worker-1"}
    cluster = seen["chief-0"]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "worker": 2}
    addresses = [a for hosts in cluster.values() for a in hosts]
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
    for name, config in seen.items():
        kind, index = name.split("-")
        assert config["cluster"] == cluster
        assert config["task"] == {"type": kind, "index": int(index)}
    out = capsys.readouterr().out
    assert "TFJob team-a/bert-trainer-0123456789 submitted (Chief x1, Worker x2)" in out
    assert "[worker 1] replica done" in out


def test_a_failed_replica_fails_the_job_in_one_line(tmp_path):
    job = _job(2, command=("python", "-c", _REPLICA, str(tmp_path), "3"))
    with pytest.raises(tfjob.TFJobFailed) as failed:
        tfjob.run(job, tfjob.LocalClient(python=sys.executable), log=lambda _: None)
    assert str(failed.value) == (
        "TFJob team-a/bert-trainer-0123456789 failed: replica worker 0 exited with status 3"
    )


def test_an_invalid_manifest_is_never_submitted():
    class Refusing:
        poll_seconds = 0.0

        def create(self, job):
            raise AssertionError("submitted")

    job = _job()
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    with pytest.raises(tfjob.TFJobFailed, match=r"^TFJob team-a/bert-trainer-\w+: not a valid"):
        tfjob.run(job, Refusing())


def test_client_choice(monkeypatch):
    monkeypatch.setenv(tfjob.CLIENT_ENV, "local")
    assert isinstance(tfjob.client(), tfjob.LocalClient)
    monkeypatch.setenv(tfjob.CLIENT_ENV, "ssh")
    with pytest.raises(ValueError, match="expected kubernetes or local"):
        tfjob.client()


def test_kubernetes_client_creates_the_custom_object_and_reattaches_on_a_retry():
    from kubernetes.client.exceptions import ApiException

    calls, answers = [], [None, ApiException(status=409), ApiException(status=403)]

    class Api:
        def create_namespaced_custom_object(self, *args):
            calls.append(args)
            answer = answers.pop(0)
            if answer:
                raise answer

    cluster = object.__new__(tfjob.KubernetesClient)  # no cluster here: its API stubbed
    cluster._api, cluster._api_error = Api(), ApiException
    job = _job()
    cluster.create(job)
    assert calls == [("kubeflow.org", "v1", "team-a", "tfjobs", job)]
    cluster.create(job)  # 409: the same execution's job exists (a retried step): wait for it
    with pytest.raises(ApiException):
        cluster.create(job)  # anything else is an error


def test_local_client_restarts_the_job_when_a_port_was_taken(tmp_path):
    """A replica whose port another process took (TensorFlow's "Could not start gRPC server")
    restarts the whole job on new ports, as bert_tf.launch does."""
    replica = textwrap.dedent(
        """
        import json, os, sys
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        marker = os.path.join(sys.argv[1], "lost")
        if task["type"] == "worker" and not os.path.exists(marker):
            open(marker, "w").close()
            print("Could not start gRPC server")
            sys.exit(1)
        open(os.path.join(sys.argv[1], task["type"]), "a").write("ran\\n")
        """
    )
    cluster = tfjob.LocalClient(python=sys.executable)
    job = _job(2, command=("python", "-c", replica, str(tmp_path)))
    status = tfjob.run(job, cluster, log=lambda _: None)
    assert tfjob.condition(status)[0] == "Succeeded" and cluster.restarts == 1
    assert (tmp_path / "worker").read_text() == "ran\n"
