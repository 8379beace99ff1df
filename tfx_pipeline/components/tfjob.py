"""A Kubeflow Training Operator `TFJob`: its manifest, the check of it against the operator's
fields, submitting it and waiting for it. No TensorFlow or TFX (the Kubernetes client is
imported when a cluster client is made), so the flag checks use it before TensorFlow loads.

    template = tfjob.replica_template(replicas=4, image=IMAGE, limits={"nvidia.com/gpu": "1"})
    manifest = tfjob.manifest("bert-trainer-1a2b", "kubeflow", template, command)
    tfjob.check_manifest(manifest)  # [] or one line per problem
    tfjob.run(manifest, tfjob.client())  # submits, waits; raises TFJobFailed

The operator's fields, from its v1 API (kubeflow/training-operator, `pkg/apis/kubeflow.org/v1`:
`tensorflow_types.go`, `common_types.go`) and https://www.kubeflow.org/docs/components/training/
tftraining/: `spec.tfReplicaSpecs` maps a replica type (`Chief`/`Master`, `Worker`, `PS`,
`Evaluator`) to `{replicas, restartPolicy, template}`; restartPolicy is `Always`, `OnFailure`,
`Never` or `ExitCode`; the operator finds the TensorFlow container by its name `tensorflow`
and sets TF_CONFIG in it (`cluster`: `chief`, `worker`, `ps`, `evaluator` host:port lists,
`task`: that replica's type and index); the job's `status.conditions` end in a `Succeeded` or
`Failed` condition whose status is "True". User namespaces of Kubeflow run Istio, whose sidecar
keeps a pod running after its container ends: the docs disable it per pod.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from typing import Any, Protocol

from bert_tf.net import BIND_ERROR, MAX_RESTARTS, free_port, stop_processes

TFJOB_KEY = "tfjob"  # the Trainer's custom_config: replica_template() (distributed_trainer.py)
API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
CONTAINER_NAME = "tensorflow"  # the operator's default container name for TFJob
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
# TF_CONFIG's name of each replica type (the operator lowercases it; Master is the chief).
TF_CONFIG_TYPES = {
    "Chief": "chief",
    "Master": "chief",
    "Worker": "worker",
    "PS": "ps",
    "Evaluator": "evaluator",
}
# Never restarted: a lone restarted replica would wait forever in a collective op for the
# others, and the pipeline's Trainer starts over anyway (KFP's retry policy reruns the step).
RESTART_POLICY = "Never"
_ISTIO = {"sidecar.istio.io/inject": "false"}
# Kubernetes object names: a DNS-1123 label for what the operator names pods and services after.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# The executor's choice of client: "local" runs the replicas as local processes (tests).
CLIENT_ENV = "BERT_TFX_TFJOB_CLIENT"


class TFJobFailed(RuntimeError):
    """The TFJob ended in its Failed condition (or could not be submitted)."""


def replica_template(
    replicas: int,
    image: str,
    limits: dict[str, str] | None = None,
    machine_type: str | None = None,
) -> dict:
    """`spec.tfReplicaSpecs` for `replicas` hosts: one Chief and replicas - 1 Workers, all on
    `image` with the resource `limits` each (Kubernetes quantities, e.g. {"cpu": "8",
    "memory": "32G", "nvidia.com/gpu": "1"}), on nodes of `machine_type` if given (the
    well-known node label `node.kubernetes.io/instance-type`). No command yet: the executor
    adds it (`manifest`)."""

    def spec(count: int) -> dict:
        pod: dict[str, Any] = {
            "containers": [{"name": CONTAINER_NAME, "image": image}],
        }
        if limits:
            pod["containers"][0]["resources"] = {"limits": dict(limits)}
        if machine_type:
            pod["nodeSelector"] = {"node.kubernetes.io/instance-type": machine_type}
        return {
            "replicas": count,
            "restartPolicy": RESTART_POLICY,
            "template": {"metadata": {"annotations": dict(_ISTIO)}, "spec": pod},
        }

    template = {"Chief": spec(1)}
    if replicas > 1:
        template["Worker"] = spec(replicas - 1)
    return template


def manifest(name: str, namespace: str, template: dict, command: list[str]) -> dict:
    """The TFJob `name` in `namespace`: `template`'s replicas (replica_template()), each running
    `command` in its tensorflow container."""
    specs = copy.deepcopy(template)
    for spec in specs.values():
        for container in spec["template"]["spec"]["containers"]:
            if container["name"] == CONTAINER_NAME:
                container["command"] = list(command)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": specs},
    }


def job_name(prefix: str, key: str) -> str:
    """A TFJob name from `prefix` (e.g. the pipeline's name) and a unique `key` (the Trainer's
    output URI): lowercase, at most 50 characters (the operator's pod names add
    `-worker-<i>`), stable for the same key."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:39].strip("-")
    return f"{stem or 'trainer'}-{digest}"


def check_template(template: Any) -> list[str]:
    """One line per way `template` (spec.tfReplicaSpecs) breaks the operator's fields."""
    if not isinstance(template, dict) or not template:
        return ["tfReplicaSpecs: expected a mapping of replica types"]
    errors = []
    unknown = sorted(set(template) - set(REPLICA_TYPES))
    if unknown:
        errors.append(f"tfReplicaSpecs: unknown replica types {unknown} (one of {REPLICA_TYPES})")
    chiefs = [t for t in ("Chief", "Master") if t in template]
    if len(chiefs) > 1:
        errors.append("tfReplicaSpecs: Chief and Master are the same replica; give one")
    for kind, spec in template.items():
        where = f"tfReplicaSpecs.{kind}"
        if not isinstance(spec, dict):
            errors.append(f"{where}: expected a mapping")
            continue
        extra = sorted(set(spec) - {"replicas", "restartPolicy", "template"})
        if extra:
            errors.append(f"{where}: unknown fields {extra}")
        replicas = spec.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            errors.append(f"{where}.replicas: expected an integer >= 1, got {replicas!r}")
        elif kind in chiefs and replicas != 1:
            errors.append(f"{where}.replicas: the chief is one replica, got {replicas}")
        policy = spec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            errors.append(
                f"{where}.restartPolicy: expected one of {RESTART_POLICIES}, got {policy!r}"
            )
        pod = (
            spec.get("template", {}).get("spec", {})
            if isinstance(spec.get("template"), dict)
            else {}
        )
        containers = pod.get("containers") if isinstance(pod, dict) else None
        if not isinstance(containers, list) or not containers:
            errors.append(f"{where}.template.spec.containers: expected a list of containers")
            continue
        named = [c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER_NAME]
        if len(named) != 1:
            errors.append(
                f"{where}.template.spec.containers: expected one container named "
                f"{CONTAINER_NAME!r} (the operator sets TF_CONFIG in it)"
            )
            continue
        if not named[0].get("image"):
            errors.append(f"{where}.template.spec.containers[{CONTAINER_NAME}].image: missing")
        limits = named[0].get("resources", {}).get("limits", {})
        bad = {k: v for k, v in limits.items() if not isinstance(v, str) or not v}
        if bad:
            errors.append(f"{where}: resource limits must be quantity strings, got {bad}")
    return errors


def check_manifest(job: Any) -> list[str]:
    """One line per way `job` is not a TFJob the operator accepts (empty: it is)."""
    if not isinstance(job, dict):
        return ["expected a TFJob mapping"]
    errors = []
    if job.get("apiVersion") != API_VERSION or job.get("kind") != KIND:
        errors.append(
            f"apiVersion/kind: expected {API_VERSION}/{KIND}, got "
            f"{job.get('apiVersion')}/{job.get('kind')}"
        )
    name = job.get("metadata", {}).get("name", "")
    if not _NAME.fullmatch(name or "") or len(name) > 50:
        errors.append(f"metadata.name: expected a DNS-1123 label of at most 50, got {name!r}")
    if not job.get("metadata", {}).get("namespace"):
        errors.append("metadata.namespace: missing")
    spec = job.get("spec", {})
    extra = sorted(
        set(spec) - {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"}
    )
    if extra:
        errors.append(f"spec: unknown fields {extra}")
    errors += check_template(spec.get("tfReplicaSpecs"))
    for kind, replica in (spec.get("tfReplicaSpecs") or {}).items():
        for container in replica.get("template", {}).get("spec", {}).get("containers", []):
            if container.get("name") == CONTAINER_NAME and not container.get("command"):
                errors.append(
                    f"tfReplicaSpecs.{kind}: the {CONTAINER_NAME} container has no command"
                )
    return errors


def condition(status: dict) -> tuple[str, str] | None:
    """("Succeeded" | "Failed", message) once the job's status says it ended, else None."""
    for entry in status.get("conditions") or []:
        if entry.get("type") in ("Succeeded", "Failed") and entry.get("status") == "True":
            return entry["type"], entry.get("message", "")
    return None


class Client(Protocol):
    """What the executor needs of a cluster: submit a TFJob, read its status."""

    poll_seconds: float

    def create(self, job: dict) -> None: ...

    def status(self, namespace: str, name: str) -> dict: ...


class KubernetesClient:
    """The cluster the pod runs in (its service account: it needs create/get on tfjobs)."""

    poll_seconds = 30.0

    def __init__(self):
        from kubernetes import client, config  # in the image; only a cluster pod needs it

        config.load_incluster_config()
        self._api = client.CustomObjectsApi()
        self._api_error = client.exceptions.ApiException

    def create(self, job: dict) -> None:
        namespace = job["metadata"]["namespace"]
        try:
            self._api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        except self._api_error as e:
            # 409: this execution's job exists (KFP retried the step): wait for it, not train
            # twice (its name comes from the step's output URI).
            if e.status != 409:
                raise

    def status(self, namespace: str, name: str) -> dict:
        job = self._api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return job.get("status") or {}


def pod_namespace(default: str = "kubeflow") -> str:
    """The namespace this pod runs in (a KFP run's: its user's profile), else `default`."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or default
    except OSError:
        return default


class LocalClient:
    """Runs a TFJob's replicas as processes on this machine, each with the TF_CONFIG the operator
    would give it (loopback addresses, free ports), its output lines prefixed with its replica;
    the job succeeds when every replica exits 0 and fails at the first that does not (the others
    are stopped, as a replica waiting in a collective op would never end). A port picked free can
    be taken before its replica binds it: a replica that says so (bert_tf.net.BIND_ERROR)
    restarts the whole job on new ports, at most MAX_RESTARTS times, as bert_tf.launch does."""

    poll_seconds = 1.0

    def __init__(self, python: str = sys.executable, host: str = "127.0.0.1"):
        self.python, self.host = python, host
        self.replicas: list[tuple[str, dict, subprocess.Popen]] = []
        self.restarts = 0
        self._job: dict | None = None
        self._lost_port: set[int] = set()  # pids of replicas that could not bind their port
        self._echoes: dict[int, threading.Thread] = {}  # pid -> the thread printing its output
        self._failed: str | None = None

    def tf_configs(self, job: dict) -> list[tuple[str, dict, list[str]]]:
        """(replica label, TF_CONFIG, command) for every replica of `job`."""
        cluster: dict[str, list[str]] = {}
        replicas = []
        for kind, spec in job["spec"]["tfReplicaSpecs"].items():
            task_type = TF_CONFIG_TYPES[kind]
            (container,) = [
                c for c in spec["template"]["spec"]["containers"] if c["name"] == CONTAINER_NAME
            ]
            for _ in range(spec.get("replicas", 1)):
                index = len(cluster.setdefault(task_type, []))
                cluster[task_type].append(f"{self.host}:{free_port(self.host)}")
                replicas.append(
                    (task_type, index, [*container["command"], *container.get("args", [])])
                )
        return [
            (
                f"{task_type} {index}",
                {
                    "cluster": cluster,
                    "task": {"type": task_type, "index": index},
                    "environment": "cloud",
                },
                command,
            )
            for task_type, index, command in replicas
        ]

    def create(self, job: dict) -> None:
        self._job = job
        for label, tf_config, command in self.tf_configs(job):
            if command[0] in ("python", "python3"):
                command = [self.python, *command[1:]]  # the image's python: this one
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config)}
            process = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            echo = threading.Thread(target=self._echo, args=(label, process), daemon=True)
            echo.start()
            self._echoes[process.pid] = echo
            self.replicas.append((label, tf_config, process))

    def _echo(self, label: str, process: subprocess.Popen) -> None:
        for line in process.stdout:
            if BIND_ERROR in line:
                self._lost_port.add(process.pid)
            print(f"[{label}] {line}", end="", flush=True)

    def status(self, namespace: str, name: str) -> dict:
        codes = [(label, p.poll()) for label, _, p in self.replicas]
        failed = [(label, code) for label, code in codes if code not in (None, 0)]
        for _, _, process in self.replicas:
            if process.returncode not in (None, 0):
                self._echoes[process.pid].join(5.0)  # its last lines read: did it lose its port?
        lost = [p for _, _, p in self.replicas if p.pid in self._lost_port and p.poll() is not None]
        if failed and lost and self._failed is None and self.restarts < MAX_RESTARTS:
            self.stop()  # nothing has trained yet: the replicas bind before their first step
            self.restarts += 1
            print(f"a replica's port was taken: restarting on new ports ({self.restarts})")
            self.replicas = []
            self.create(self._job)
            return {"conditions": [{"type": "Restarting", "status": "True"}]}
        if failed and self._failed is None:
            label, code = failed[0]
            self._failed = f"replica {label} exited with status {code}"
            self.stop()
        if self._failed:
            return {"conditions": [{"type": "Failed", "status": "True", "message": self._failed}]}
        if all(code == 0 for _, code in codes):
            return {"conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]}
        return {"conditions": [{"type": "Running", "status": "True"}]}

    def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM to the replicas still running, SIGKILL after `grace_seconds`."""
        stop_processes([p for _, _, p in self.replicas], grace_seconds)


def client() -> Client:
    """The cluster's client, or LocalClient when $BERT_TFX_TFJOB_CLIENT is "local"."""
    choice = os.environ.get(CLIENT_ENV, "kubernetes")
    if choice == "local":
        return LocalClient()
    if choice != "kubernetes":
        raise ValueError(f"${CLIENT_ENV}={choice}: expected kubernetes or local")
    return KubernetesClient()


def run(job: dict, cluster: Client, log=print) -> dict:
    """Checks and submits `job`, waits for it to end; returns its final status. Raises
    TFJobFailed with a one-line message naming the job when it fails."""
    errors = check_manifest(job)
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    if errors:
        raise TFJobFailed(f"TFJob {namespace}/{name}: not a valid TFJob: {'; '.join(errors)}")
    try:
        cluster.create(job)
    except Exception as e:  # the API server's refusal, in one line
        raise TFJobFailed(f"TFJob {namespace}/{name}: could not be submitted: {e}") from e
    log(f"TFJob {namespace}/{name} submitted ({_replica_counts(job)})")
    try:
        while True:
            status = cluster.status(namespace, name)
            ended = condition(status)
            if ended:
                break
            time.sleep(cluster.poll_seconds)
    finally:
        if isinstance(cluster, LocalClient):
            cluster.stop()
    kind, message = ended
    if kind == "Failed":
        raise TFJobFailed(
            f"TFJob {namespace}/{name} failed: {message.splitlines()[0] if message else ''}"
        )
    log(f"TFJob {namespace}/{name} succeeded")
    return status


def _replica_counts(job: dict) -> str:
    specs = job["spec"]["tfReplicaSpecs"]
    return ", ".join(f"{kind} x{spec.get('replicas', 1)}" for kind, spec in specs.items())
