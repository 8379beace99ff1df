"""A local stand-in for Kubeflow Pipelines v2 / Vertex AI Pipelines: runs a compiled PipelineSpec's
tasks in DAG order, each container as KFP's launcher would start it, in this machine's Python in
place of the image. A test-support module (no `test_` prefix): this folder's conftest.py loads it
by path as `bert_tfx_tests_kfp_launcher`, the name the launcher tests import.

What a KFP v2 backend does for each task of `root.dag.tasks`, and what this module does instead:

- Order: a task runs once every task it depends on has succeeded: its `dependentTasks` and the
  producers of its `taskOutputArtifact` / `taskOutputParameter` inputs (`task_order`).
- Executor input: the driver builds a `pipeline_spec_pb2.ExecutorInput` from the spec:
  `inputs.parameterValues` (spec 2.1's `runtimeValue.constant`, the 2.0 `constantValue` form goes
  to the legacy `inputs.parameters`), `inputs.artifacts` (upstream outputs as RuntimeArtifacts:
  name, type, uri, metadata), `outputs.artifacts` (a new uri per output under the pipeline root),
  `outputs.parameters` and `outputs.outputFile` (`<task root>/executor_output.json`, where the
  task writes an `ExecutorOutput`). Here `executor_input` builds it as JSON, with Vertex's
  layout: `<pipeline root>/<pipeline name>/<run id>/<task>_<n>/` per task (TFX's entrypoint
  takes the folder's name as the execution's unique id and writes `.temp` in it).
- Placeholders: the launcher substitutes `{{$}}` (the whole executor input as JSON) and
  `{{$.inputs.parameters['x']}}`, `{{$.outputs.artifacts['x'].uri}}`, `{{$.pipeline_root}}`...
  in the container's command and args (`resolve_placeholders`); an unknown one is an error.
- Container: `command + args` of `deploymentSpec.executors[<executorLabel>].container`. The
  image's `python` becomes `python_executable` (the project's virtualenv: the image's Python
  with the same lock), with the repository on PYTHONPATH (the image pip-installs it).
  `lifecycle.preCacheCheck` (TFX's FileBasedExampleGen driver: input span and fingerprint) runs
  first with the same executor input and writes its ExecutorOutput to the task's outputFile;
  the main container then starts on the same executor input, and TFX's entrypoint reads the
  driver's parameter values back from that file.
- Object store: `gs://BUCKET/...` is a folder `<gcs_root>/BUCKET/...` here (`GcsMap`). The
  launcher's view (the URIs passed between tasks, recorded in results) stays `gs://`; URIs and
  string parameters (also inside JSON-encoded ones, such as TFX's serialized protos) are mapped
  to local paths only in what a container sees, and paths in its ExecutorOutput are mapped back:
  a component that writes a path where a URI belongs shows up as a `gs://` URI pointing at the
  right object, as it would on GCS, and an output artifact moved outside the store (a local
  path, lost with the pod on a cluster) is an error.
- Outputs: after a task, its ExecutorOutput's artifacts (uri, metadata merged over the launcher's)
  and parameter values are what downstream tasks get, like KFP's publisher writes them to ML
  Metadata and the next driver reads them back.
- `importer` executors make their artifact from the spec (`artifactUri`, `typeSchema`,
  `metadata`) with no container, as KFP's driver does. `resolver` executors fail: open-source
  KFP's backend does not implement them ("resolver executors not implemented") and the
  project's pipelines must not need them.

Two backends (`backend=`), where they differ:

- `"kfp"`, open-source Kubeflow Pipelines v2: no `lifecycle.preCacheCheck` (its driver does not
  run it); the executor output at the pod-local `/tmp/kfp_outputs/output_metadata.json`, each
  task in its own mount namespace (`unshare`, needs root) where that folder is the task's own
  (so TFX's entrypoint finds no driver output there and takes `kfp_outputs` as the unique id);
  artifact names are numeric ML Metadata ids, an importer without `reimport` reusing the id of
  the artifact with the same URI; and KFP's cache (backend/src/v2/cacheutils): a task with
  `cachingOptions.enableCache` whose key (sha256 of its input parameter values, input artifact
  ids, output artifact types, output parameter types, image and unresolved command + args)
  matches an earlier execution of this Launcher is not run, its outputs (same ids and URIs)
  reused.
- `"vertex"`: the preCacheCheck, task roots under the pipeline root, artifact names as Vertex
  resource names, no cache (every task runs).

Both: a container sees the image's environment only (`image_environment`: the Dockerfile's
`ENV`s, the base image's PATH and LANG, an empty HOME; not this machine's HOME, caches or
PYTHONPATH); `image_files` {path in the image: local folder} are mounted at those paths
(`/opt/bert_tfx`, the image's fetch cache with the default vocab), each in the task's mount
namespace. `ram_buckets` {`ram://NAME`: local folder}: a bucket that every Python process of a
pod (Beam's worker processes too) sees at that `ram://` URI, read-only, through TensorFlow's
in-memory file system: a `sitecustomize` on the pods' PYTHONPATH copies the folder there once
`tensorflow` is imported. Unlike `gs://` here, a `ram://` URI is never rewritten to a local path,
so a component that reads it with `open()`/`os.path` fails as on a real bucket (TensorFlow 2.16
cannot register a Python file system, and its GCS client has no emulator endpoint). `ram://`
has no modification times: its files' fingerprints are names and sizes.

Not modelled: retries, resource limits and accelerators (ignored), conditions, loops, exit
handlers and sub-DAGs (rejected with a clear error), ML Metadata itself, and writes to a
`ram://` bucket (each process has its own copy; the pipelines only read data and checkpoints
there).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Vertex's artifact resource names; TFX's entrypoint hashes an input's name to the int id its
# executors see and maps ids back to names in the blessing (current_model_id/baseline_model_id).
ARTIFACT_NAME_PREFIX = "projects/local/locations/local/metadataStores/default/artifacts/"
# Images' Python interpreters, replaced by `python_executable`.
_PYTHONS = ("python", "python3", "/usr/bin/python3", "/usr/local/bin/python", "/usr/bin/python")
_PLACEHOLDER = re.compile(r"\{\{\$[^{}]*\}\}")
_LOG_TAIL = 6000
KFP, VERTEX = "kfp", "vertex"
# Open-source KFP's launcher: the executor output, in the pod (not in the object store).
POD_OUTPUTS = "/tmp/kfp_outputs"
POD_OUTPUT_FILE = f"{POD_OUTPUTS}/output_metadata.json"
# What python:3.10-slim sets (the Dockerfile's FROM); the Dockerfile's ENVs come on top.
BASE_IMAGE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
RAM_BUCKETS_ENV = "KFP_LAUNCHER_RAM_BUCKETS"
# The pods' sitecustomize (see the module docstring): after `import tensorflow`, each ram_buckets
# folder is copied to its ram:// URI. Hooked on PathFinder, which every finder of the tensorflow
# package ends at (bert_tf.quiet's finder calls it directly).
_SITECUSTOMIZE = """
import importlib.abc, importlib.machinery, json, os

_BUCKETS = json.loads(os.environ.get("KFP_LAUNCHER_RAM_BUCKETS") or "{}")
_find_spec = importlib.machinery.PathFinder.find_spec


class _FillBuckets(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        gfile = module.io.gfile
        for uri, local in _BUCKETS.items():
            for folder, _, names in os.walk(local):
                for name in names:
                    path = os.path.join(folder, name)
                    target = uri.rstrip("/") + "/" + os.path.relpath(path, local)
                    gfile.makedirs(target.rsplit("/", 1)[0])
                    with open(path, "rb") as f, gfile.GFile(target, "wb") as out:
                        out.write(f.read())


def _find_tensorflow(cls, fullname, path=None, target=None):
    spec = _find_spec(fullname, path, target)
    if fullname == "tensorflow" and spec is not None and spec.loader is not None:
        importlib.machinery.PathFinder.find_spec = _find_spec
        spec.loader = _FillBuckets(spec.loader)
    return spec


if _BUCKETS:
    importlib.machinery.PathFinder.find_spec = classmethod(_find_tensorflow)
"""


def image_environment(dockerfile: str | os.PathLike) -> dict[str, str]:
    """The environment of a container of the Dockerfile's image: BASE_IMAGE_ENV and its `ENV`
    instructions (KEY=VALUE forms, continuation lines joined)."""
    env = dict(BASE_IMAGE_ENV)
    text = re.sub(r"\\\n", " ", Path(dockerfile).read_text())
    for line in text.splitlines():
        if line.startswith("ENV "):
            for word in shlex.split(line[4:]):
                key, _, value = word.partition("=")
                env[key] = value
    return env


class LauncherError(RuntimeError):
    """The spec asks for something a KFP v2 backend would reject, or this stand-in cannot do."""


class TaskFailed(RuntimeError):
    """A task's container exited non-zero (the message names the task and ends with its log)."""


# --- the object store ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GcsMap:
    """`gs://BUCKET/x` <-> `<root>/BUCKET/x`, as plain prefix rewriting of strings."""

    root: Path

    @property
    def _local_prefix(self) -> str:
        return str(self.root).rstrip("/") + "/"

    def local_path(self, uri: str) -> str:
        """The local path of a `gs://` URI (other URIs and paths unchanged)."""
        return self._local_prefix + uri[len("gs://") :] if uri.startswith("gs://") else uri

    def to_local(self, value: Any) -> Any:
        """`value` (a string, or lists/dicts of them) with every `gs://` replaced by the local
        root: also inside JSON-encoded strings (TFX passes protos and configs that way)."""
        return _map_strings(value, lambda s: s.replace("gs://", self._local_prefix))

    def to_remote(self, value: Any) -> Any:
        """The inverse of `to_local`: local-root paths back to `gs://` URIs."""
        return _map_strings(value, lambda s: s.replace(self._local_prefix, "gs://"))


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    return value


# --- reading the spec ---------------------------------------------------------------------------


def load_spec(path: str | os.PathLike) -> tuple[dict, dict]:
    """(PipelineSpec, runtime config) from `tfx_pipeline.run`'s output: a KFP PipelineSpec YAML
    (`--runner=kubeflow`, as KFP's client uploads it) or a Vertex PipelineJob JSON
    (`--runner=vertex`: `pipelineSpec` plus `runtimeConfig`). The runtime config has the
    pipeline root (`gcsOutputDirectory`) and `parameterValues` when the file carries them."""
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        document = yaml.safe_load(text)
    else:
        document = json.loads(text)
    if "pipelineSpec" in document:  # a Vertex PipelineJob
        return document["pipelineSpec"], document.get("runtimeConfig", {})
    return document, {}


def _producers(task: Mapping) -> set[str]:
    """Every task `task` waits for: dependentTasks and producers of its inputs."""
    found = set(task.get("dependentTasks", []))
    inputs = task.get("inputs", {})
    for section, key in (
        ("artifacts", "taskOutputArtifact"),
        ("parameters", "taskOutputParameter"),
    ):
        for spec in inputs.get(section, {}).values():
            if key in spec:
                found.add(spec[key]["producerTask"])
    return found


def task_order(spec: Mapping) -> list[str]:
    """The root DAG's tasks in an order KFP could run them one at a time: every task after all
    it depends on (ties by name, so the order is stable). Raises LauncherError on an unknown
    dependency or a cycle."""
    tasks = spec["root"]["dag"]["tasks"]
    waits_for = {name: _producers(task) for name, task in tasks.items()}
    for name, producers in waits_for.items():
        unknown = producers - set(tasks)
        if unknown:
            raise LauncherError(f"task {name} depends on unknown task(s) {sorted(unknown)}")
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(tasks):
        ready = sorted(n for n in tasks if n not in done and waits_for[n] <= done)
        if not ready:
            stuck = sorted(set(tasks) - done)
            raise LauncherError(f"dependency cycle among tasks {stuck}")
        order.extend(ready[:1])  # one at a time: a newly unblocked task may sort first
        done.add(ready[0])
    return order


# --- placeholders ---------------------------------------------------------------------------------


def _parameter_string(value: Any) -> str:
    """A parameter as the launcher substitutes it: strings as they are, numbers in Go's
    `strconv.FormatFloat(v, 'f', -1, 64)` form (32.0 -> "32"), anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, sort_keys=True)


def _legacy_value(value: Mapping) -> Any:
    """A spec-2.0 `Value` ({intValue|doubleValue|stringValue}) as a Python value."""
    for key in ("stringValue", "doubleValue"):
        if key in value:
            return value[key]
    return int(value["intValue"])


def resolve_placeholders(
    text: str, executor_input: Mapping, context: Mapping[str, str], local_path=lambda u: u
) -> str:
    """`text` with KFP v2's placeholders substituted from `executor_input` (the JSON the
    container gets) and `context` (pipeline_root, pipeline_job_name, pipeline_job_uuid,
    pipeline_task_name, pipeline_task_uuid, pipeline_job_resource_name). `.path` of an artifact
    is where KFP mounts its URI (`gs://b/x` -> `/gcs/b/x`); here `local_path(uri)`.
    Raises LauncherError on a placeholder it does not know (KFP leaves none unresolved)."""
    inputs = executor_input.get("inputs", {})
    outputs = executor_input.get("outputs", {})

    def artifact(where: Mapping, name: str, field: str, placeholder: str) -> str:
        artifacts = where.get("artifacts", {}).get(name, {}).get("artifacts", [])
        if len(artifacts) != 1:
            raise LauncherError(f"{placeholder}: no single artifact {name!r}")
        if field == "uri":
            return artifacts[0]["uri"]
        if field == "path":
            return local_path(artifacts[0]["uri"])
        if field == "metadata":
            return json.dumps(artifacts[0].get("metadata", {}), sort_keys=True)
        raise LauncherError(f"unknown artifact field in {placeholder}")

    def substitute(match: re.Match) -> str:
        placeholder = match.group(0)
        body = placeholder[3:-2]  # between "{{$" and "}}"
        if body == "":
            return json.dumps(executor_input, sort_keys=True)
        if body.startswith(".") and body[1:] in context:
            return context[body[1:]]
        found = re.fullmatch(
            r"\.(inputs|outputs)\.(parameters|artifacts)\['([^']+)'\](?:\.(\w+))?", body
        )
        if not found:
            raise LauncherError(f"unsupported placeholder {placeholder}")
        side, kind, name, field = found.groups()
        if side == "inputs" and kind == "parameters" and field is None:
            if name in inputs.get("parameterValues", {}):
                return _parameter_string(inputs["parameterValues"][name])
            if name in inputs.get("parameters", {}):
                return _parameter_string(_legacy_value(inputs["parameters"][name]))
            raise LauncherError(f"{placeholder}: no input parameter {name!r}")
        if side == "outputs" and kind == "parameters" and field == "output_file":
            return outputs["parameters"][name]["outputFile"]
        if kind == "artifacts" and field:
            return artifact(inputs if side == "inputs" else outputs, name, field, placeholder)
        raise LauncherError(f"unsupported placeholder {placeholder}")

    return _PLACEHOLDER.sub(substitute, text)


# --- running a pipeline ---------------------------------------------------------------------------


@dataclasses.dataclass
class TaskResult:
    """What the launcher recorded for one task (URIs in the launcher's `gs://` view)."""

    name: str
    kind: str  # "container" or "importer"
    executor_input: dict  # as built by the launcher (gs:// view); {} for an importer
    outputs: dict[str, list[dict]]  # output key -> RuntimeArtifact dicts (name/type/uri/metadata)
    parameters: dict[str, Any]  # output parameter values
    log: Path | None = None
    seconds: float = 0.0
    cached: bool = False  # KFP: an earlier execution's outputs, the task not run

    def artifact(self, key: str) -> dict:
        (found,) = self.outputs[key]
        return found


@dataclasses.dataclass
class PipelineRun:
    run_id: str
    pipeline_root: str
    tasks: dict[str, TaskResult]  # in the order they ran
    seconds: float


class Launcher:
    """Runs a compiled PipelineSpec locally; see the module docstring.

    Args:
        spec: the PipelineSpec (dict, as `load_spec` returns it).
        gcs_root: the folder standing in for `gs://` (BUCKET/... under it).
        work_dir: per-run logs and scratch working directories.
        runtime_config: a PipelineJob's runtimeConfig (gcsOutputDirectory, parameterValues).
        python_executable: the Python that replaces the image's `python`.
        pythonpath: folders on the containers' PYTHONPATH (the image has the code installed).
        env: the image's environment (`image_environment`; default BASE_IMAGE_ENV); nothing
            of this process's environment reaches a container.
        task_timeout: seconds a container may run.
        echo: called with each finished task's one-line summary (e.g. print), or None.
        backend: KFP (open-source Kubeflow Pipelines) or VERTEX; see the module docstring.
        image_files: {absolute path under /opt in the image: local folder mounted there}.
        ram_buckets: {"ram://NAME": local folder}, visible to the pods' Python processes.
    """

    def __init__(
        self,
        spec: Mapping,
        gcs_root: str | os.PathLike,
        work_dir: str | os.PathLike,
        runtime_config: Mapping | None = None,
        python_executable: str = sys.executable,
        pythonpath: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        task_timeout: float = 1800,
        echo: Callable[[str], None] | None = None,
        backend: str = VERTEX,
        image_files: Mapping[str, str | os.PathLike] | None = None,
        ram_buckets: Mapping[str, str | os.PathLike] | None = None,
    ):
        _check_proto(spec, "PipelineSpec", "the spec")
        if backend not in (KFP, VERTEX):
            raise LauncherError(f"backend must be {KFP!r} or {VERTEX!r}, got {backend!r}")
        for path in image_files or {}:
            if not path.startswith("/opt/"):
                raise LauncherError(f"image_files: {path}: only paths under /opt are mounted")
        self.backend = backend
        self.image_files = {k: str(v) for k, v in (image_files or {}).items()}
        self.ram_buckets = {k.rstrip("/"): str(v) for k, v in (ram_buckets or {}).items()}
        # KFP's ML Metadata and cache: they outlive a run.
        self._ids = itertools.count(1)
        self._imported: dict[tuple[str, str], str] = {}  # (uri, schema) -> artifact id
        self._cache: dict[str, TaskResult] = {}  # cache key -> the execution's result
        self.spec = spec
        self.gcs = GcsMap(Path(gcs_root))
        self.work_dir = Path(work_dir)
        self.runtime_config = dict(runtime_config or {})
        self.python_executable = python_executable
        self.pythonpath = list(pythonpath or [])
        self.env = dict(env or BASE_IMAGE_ENV)
        self.task_timeout = task_timeout
        self.echo = echo

    # -- one run ---------------------------------------------------------------------------------

    def run(
        self,
        run_id: str,
        pipeline_root: str | None = None,
        parameter_values: Mapping[str, Any] | None = None,
    ) -> PipelineRun:
        """One pipeline run (`run_id` names its folders: a new id, new task roots). Raises
        TaskFailed at the first failing task, LauncherError on an unsupported spec."""
        started = time.monotonic()
        spec = self.spec
        if "dag" not in spec.get("root", {}):
            raise LauncherError("the spec has no root DAG")
        root = (
            pipeline_root
            or self.runtime_config.get("gcsOutputDirectory")
            or spec.get("defaultPipelineRoot")
        )
        if not root:
            raise LauncherError("no pipeline root: pass one, or compile with defaultPipelineRoot")
        pipeline_name = spec["pipelineInfo"]["name"]
        run_root = f"{root.rstrip('/')}/{pipeline_name}/{run_id}"
        pipeline_inputs = self._pipeline_parameters(parameter_values)
        (self.work_dir / run_id).mkdir(parents=True, exist_ok=True)
        results: dict[str, TaskResult] = {}
        for number, (name, task, component, executor) in enumerate(self.plan(), start=1):
            context = {
                "pipeline_root": root,
                "pipeline_job_name": f"{pipeline_name}-{run_id}",
                "pipeline_job_uuid": run_id,
                "pipeline_job_resource_name": f"projects/local/locations/local/pipelineJobs/{run_id}",
                "pipeline_task_name": name,
                "pipeline_task_uuid": f"{run_id}-{number}",
            }
            task_root = f"{run_root}/{name}_{number}"
            if "importer" in executor:
                result = self._import(
                    name, task, component, executor["importer"], pipeline_inputs, run_id
                )
            elif cached := self._cached(
                name, task, component, executor["container"], results, pipeline_inputs
            ):
                result = cached
            else:
                result = self._run_container(
                    name,
                    task,
                    component,
                    executor["container"],
                    results,
                    pipeline_inputs,
                    task_root,
                    context,
                    run_id,
                )
            results[name] = result
            if self.echo:
                self.echo(
                    f"{name}: {'cached' if result.cached else 'done'} in {result.seconds:.0f} s"
                )
        return PipelineRun(run_id, root, results, time.monotonic() - started)

    def plan(self) -> list[tuple[str, Mapping, Mapping, Mapping]]:
        """(task name, task, component, executor) in run order. Checks the whole spec first, as
        KFP's backend does when a run is created: a spec it would reject fails before any task
        runs."""
        spec = self.spec
        planned = []
        for name in task_order(spec):
            task = spec["root"]["dag"]["tasks"][name]
            for field in (
                "triggerPolicy",
                "iteratorPolicy",
                "parameterIterator",
                "artifactIterator",
            ):
                if task.get(field):
                    raise LauncherError(f"task {name}: {field} (conditions/loops) is not supported")
            component = spec["components"][task["componentRef"]["name"]]
            if "dag" in component:
                raise LauncherError(f"task {name}: sub-DAG components are not supported")
            executor = spec["deploymentSpec"]["executors"][component["executorLabel"]]
            if "resolver" in executor:
                raise LauncherError(
                    f"task {name}: resolver executors not implemented (open-source KFP's backend "
                    "rejects them); the pipeline must not use a TFX Resolver"
                )
            if not {"importer", "container"} & set(executor):
                raise LauncherError(f"task {name}: unsupported executor {sorted(executor)}")
            planned.append((name, task, component, executor))
        return planned

    def _pipeline_parameters(self, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
        """Root input parameters: the spec's defaults, the runtime config's, then `overrides`."""
        values = {
            name: definition["defaultValue"]
            for name, definition in self.spec["root"]
            .get("inputDefinitions", {})
            .get("parameters", {})
            .items()
            if "defaultValue" in definition
        }
        values.update(self.runtime_config.get("parameterValues", {}))
        values.update(overrides or {})
        return values

    # -- inputs ----------------------------------------------------------------------------------

    def _input_parameters(
        self,
        name: str,
        task: Mapping,
        component: Mapping,
        results: Mapping[str, TaskResult],
        pipeline_inputs: Mapping[str, Any],
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        """(parameterValues, legacy parameters) of a task, as KFP's driver resolves them:
        the task's constant / upstream output / pipeline input, else the component's default."""
        values: dict[str, Any] = {}
        legacy: dict[str, dict] = {}
        for key, spec in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in spec:
                runtime = spec["runtimeValue"]
                if "constant" in runtime:  # spec 2.1
                    values[key] = runtime["constant"]
                elif "constantValue" in runtime:  # spec 2.0 (Vertex only)
                    legacy[key] = runtime["constantValue"]
                else:
                    raise LauncherError(f"task {name}: parameter {key}: empty runtimeValue")
            elif "taskOutputParameter" in spec:
                producer = spec["taskOutputParameter"]
                values[key] = results[producer["producerTask"]].parameters[
                    producer["outputParameterKey"]
                ]
            elif "componentInputParameter" in spec:
                pipeline_key = spec["componentInputParameter"]
                if pipeline_key not in pipeline_inputs:
                    raise LauncherError(f"task {name}: pipeline parameter {pipeline_key} not set")
                values[key] = pipeline_inputs[pipeline_key]
            else:
                raise LauncherError(f"task {name}: parameter {key}: unsupported {sorted(spec)}")
        for key, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
            if key in values or key in legacy:
                continue
            if "defaultValue" in definition:
                values[key] = definition["defaultValue"]
            elif not definition.get("isOptional"):
                raise LauncherError(f"task {name}: required parameter {key} has no value")
        return values, legacy

    @staticmethod
    def _input_artifacts(
        name: str, task: Mapping, component: Mapping, results: Mapping[str, TaskResult]
    ) -> dict[str, dict]:
        """Upstream outputs as the executor input's RuntimeArtifact lists; the type is the
        consuming component's input definition's (what KFP's driver passes)."""
        artifacts = {}
        definitions = component.get("inputDefinitions", {}).get("artifacts", {})
        for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" not in spec:
                raise LauncherError(
                    f"task {name}: artifact input {key}: unsupported {sorted(spec)}"
                )
            producer = spec["taskOutputArtifact"]
            upstream = results[producer["producerTask"]].outputs[producer["outputArtifactKey"]]
            artifact_type = definitions.get(key, {}).get("artifactType")
            listed = []
            for artifact in upstream:
                artifact = copy.deepcopy(artifact)
                if artifact_type:
                    artifact["type"] = artifact_type
                listed.append(artifact)
            artifacts[key] = {"artifacts": listed}
        for key, definition in definitions.items():
            if key not in artifacts and not definition.get("isOptional"):
                raise LauncherError(f"task {name}: required artifact input {key} not connected")
        return artifacts

    # -- importer --------------------------------------------------------------------------------

    def _import(
        self,
        name: str,
        task: Mapping,
        component: Mapping,
        importer: Mapping,
        pipeline_inputs: Mapping[str, Any],
        run_id: str,
    ) -> TaskResult:
        """KFP's driver handles an importer itself: an artifact at `artifactUri` with the spec's
        type and metadata, published as the component's single output."""
        started = time.monotonic()
        uri_spec = importer["artifactUri"]
        if "constant" in uri_spec:
            uri = uri_spec["constant"]
        elif "constantValue" in uri_spec:
            uri = _legacy_value(uri_spec["constantValue"])
        elif "runtimeParameter" in uri_spec:
            values, legacy = self._input_parameters(name, task, component, {}, pipeline_inputs)
            key = uri_spec["runtimeParameter"]
            uri = values[key] if key in values else _legacy_value(legacy[key])
        else:
            raise LauncherError(f"task {name}: importer artifactUri {sorted(uri_spec)} unsupported")
        (key,) = component["outputDefinitions"]["artifacts"]
        if self.backend == KFP:
            # KFP's driver reuses the artifact of the same URI unless `reimport` is set.
            schema = json.dumps(importer["typeSchema"], sort_keys=True)
            if importer.get("reimport") or (uri, schema) not in self._imported:
                self._imported[uri, schema] = self._new_id()
            artifact_name = self._imported[uri, schema]
        else:
            artifact_name = f"{ARTIFACT_NAME_PREFIX}{run_id}-{task_id(name)}-{key}"
        artifact = {
            "name": artifact_name,
            "type": importer["typeSchema"],
            "uri": uri,
            "metadata": copy.deepcopy(importer.get("metadata", {})),
        }
        return TaskResult(
            name, "importer", {}, {key: [artifact]}, {}, None, time.monotonic() - started
        )

    # -- containers ------------------------------------------------------------------------------

    def executor_input(
        self,
        name: str,
        task: Mapping,
        component: Mapping,
        results: Mapping[str, TaskResult],
        pipeline_inputs: Mapping[str, Any],
        task_root: str,
        run_id: str,
    ) -> dict:
        """The ExecutorInput (JSON form, launcher's gs:// view) KFP's driver builds."""
        values, legacy = self._input_parameters(name, task, component, results, pipeline_inputs)
        inputs: dict[str, Any] = {}
        if values:
            inputs["parameterValues"] = values
        if legacy:
            inputs["parameters"] = legacy
        artifacts = self._input_artifacts(name, task, component, results)
        if artifacts:
            inputs["artifacts"] = artifacts
        kfp = self.backend == KFP
        outputs: dict[str, Any] = {
            "outputFile": POD_OUTPUT_FILE if kfp else f"{task_root}/executor_output.json"
        }
        definitions = component.get("outputDefinitions", {})
        if definitions.get("artifacts"):
            outputs["artifacts"] = {
                key: {
                    "artifacts": [
                        {
                            # KFP: the ML Metadata id, given when the output is published.
                            "name": ""
                            if kfp
                            else f"{ARTIFACT_NAME_PREFIX}{run_id}-{task_id(name)}-{key}",
                            "type": definition["artifactType"],
                            "uri": f"{task_root}/{key}",
                            "metadata": {},
                        }
                    ]
                }
                for key, definition in definitions["artifacts"].items()
            }
        if definitions.get("parameters"):
            parameters = f"{POD_OUTPUTS}/parameters" if kfp else f"{task_root}/parameters"
            outputs["parameters"] = {
                key: {"outputFile": f"{parameters}/{key}"} for key in definitions["parameters"]
            }
        executor_input = {"inputs": inputs, "outputs": outputs}
        _check_proto(executor_input, "ExecutorInput", f"task {name}'s executor input")
        return executor_input

    def _command(self, container: Mapping, executor_input: dict, context: Mapping) -> list[str]:
        """command + args with placeholders resolved, on the container's local view."""
        local_input = self.gcs.to_local(executor_input)
        local_context = {k: self.gcs.to_local(v) for k, v in context.items()}
        command = [*container.get("command", []), *container.get("args", [])]
        if not command:
            raise LauncherError("a container with neither command nor args (image entrypoint)")
        resolved = [
            self.gcs.to_local(
                resolve_placeholders(part, local_input, local_context, self.gcs.local_path)
            )
            for part in command
        ]
        if resolved[0] in _PYTHONS:
            resolved[0] = self.python_executable
        else:
            raise LauncherError(
                f"the container runs {resolved[0]!r}, not the image's python: cannot stand in"
            )
        return resolved

    def _environment(self, container: Mapping, run_id: str) -> dict[str, str]:
        """The image's environment (nothing of this process's): its ENVs, an empty HOME, the
        image's installed code (`pythonpath`), the spec's container env."""
        env = dict(self.env)
        home = self.work_dir / run_id / "home"
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
        # The interpreter standing in for the image's: its scripts folder first on PATH.
        env["PATH"] = os.pathsep.join([str(Path(self.python_executable).parent), env["PATH"]])
        pythonpath = list(self.pythonpath)
        if self.ram_buckets:
            site = self.work_dir / "ram_buckets_site"
            site.mkdir(parents=True, exist_ok=True)
            (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
            pythonpath.append(str(site))
            env[RAM_BUCKETS_ENV] = json.dumps(self.ram_buckets)
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(pythonpath)
        for variable in container.get("env", []):
            env[variable["name"]] = self.gcs.to_local(variable.get("value", ""))
        return env

    def _pod(self, command: list[str], pod_outputs: Path) -> list[str]:
        """`command` in a mount namespace of its own: the image's files at their paths and,
        on KFP, `pod_outputs` as the pod-local POD_OUTPUTS."""
        mounts = []
        if self.image_files:
            mounts.append("mount -t tmpfs tmpfs /opt")  # the image's /opt, not this machine's
            for path, local in sorted(self.image_files.items()):
                mounts += [
                    f"mkdir -p {shlex.quote(path)}",
                    f"mount --bind {shlex.quote(local)} {shlex.quote(path)}",
                ]
        if self.backend == KFP:
            mounts += [
                f"mkdir -p {POD_OUTPUTS}",
                f"mount --bind {shlex.quote(str(pod_outputs))} {POD_OUTPUTS}",
            ]
        if not mounts:
            return command
        script = "set -e; " + "; ".join(mounts) + '; exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "pod",
            *command,
        ]

    def _pod_outputs(self, name: str, run_id: str) -> Path:
        """This machine's folder behind a task's POD_OUTPUTS (KFP)."""
        return self.work_dir / run_id / f"{name}.pod_outputs"

    def _local_output(self, path: str, name: str, run_id: str) -> Path:
        """A path the container wrote (under POD_OUTPUTS on KFP, else in the object store)."""
        if self.backend == KFP and path.startswith(POD_OUTPUTS + "/"):
            return self._pod_outputs(name, run_id) / path[len(POD_OUTPUTS) + 1 :]
        return Path(self.gcs.local_path(path))

    def _new_id(self) -> str:
        return str(next(self._ids))

    def cache_key(
        self, task: Mapping, component: Mapping, container: Mapping, inputs: Mapping
    ) -> str:
        """KFP's cache key (cacheutils.GenerateCacheKey): input artifact ids, input parameter
        values, output artifact types, output parameter types, image and the spec's command and
        args, as sorted JSON, sha256."""
        definitions = component.get("outputDefinitions", {})
        key = {
            "inputArtifactNames": {
                k: [a["name"] for a in v["artifacts"]]
                for k, v in inputs.get("artifacts", {}).items()
            },
            "inputParameterValues": inputs.get("parameterValues", {}),
            "outputArtifactsSpec": {
                k: {"type": v["artifactType"]} for k, v in definitions.get("artifacts", {}).items()
            },
            "outputParametersSpec": {
                k: v["parameterType"] for k, v in definitions.get("parameters", {}).items()
            },
            "containerSpec": {
                "image": container.get("image", ""),
                "cmdArgs": [*container.get("command", []), *container.get("args", [])],
            },
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

    def _cached(
        self,
        name: str,
        task: Mapping,
        component: Mapping,
        container: Mapping,
        results: Mapping[str, TaskResult],
        pipeline_inputs: Mapping[str, Any],
    ) -> TaskResult | None:
        """KFP: the earlier execution with this task's cache key, if caching is on for it."""
        if self.backend != KFP or not task.get("cachingOptions", {}).get("enableCache"):
            return None
        values, _ = self._input_parameters(name, task, component, results, pipeline_inputs)
        inputs = {
            "parameterValues": values,
            "artifacts": self._input_artifacts(name, task, component, results),
        }
        found = self._cache.get(self.cache_key(task, component, container, inputs))
        if found is None:
            return None
        return dataclasses.replace(
            copy.deepcopy(found), name=name, log=None, seconds=0.0, cached=True
        )

    def _execute(self, name: str, step: str, command: list[str], env: dict, run_id: str) -> Path:
        """Runs one container command, its output streamed to a log file; TaskFailed on error."""
        scratch = self.work_dir / run_id / f"{name}.{step}.cwd"
        scratch.mkdir(parents=True, exist_ok=True)
        log = self.work_dir / run_id / f"{name}.{step}.log"
        with open(log, "w", encoding="utf-8") as out:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            try:
                completed = subprocess.run(
                    self._pod(command, self._pod_outputs(name, run_id)),
                    cwd=scratch,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=self.task_timeout,
                )
                code = completed.returncode
            except subprocess.TimeoutExpired:
                code = f"timeout after {self.task_timeout} s"
        if code != 0:
            tail = log.read_text(errors="replace")[-_LOG_TAIL:]
            raise TaskFailed(f"task {name} ({step}) failed: exit {code}; log {log}:\n{tail}")
        return log

    def _read_executor_output(self, executor_input: Mapping, name: str, run_id: str) -> dict:
        """The task's ExecutorOutput (launcher's gs:// view); {} if it wrote none (KFP allows
        that: the outputs keep the launcher's metadata)."""
        path = self._local_output(executor_input["outputs"]["outputFile"], name, run_id)
        if not path.exists():
            return {}
        return self.gcs.to_remote(json.loads(path.read_text()))

    @staticmethod
    def _merge_outputs(executor_input: dict, executor_output: Mapping) -> None:
        """ExecutorOutput artifacts over the executor input's outputs: uri and metadata (merged),
        the launcher's name and type kept, as KFP's publisher records them."""
        outputs = executor_input["outputs"].get("artifacts", {})
        for key, listed in executor_output.get("artifacts", {}).items():
            if key not in outputs:
                raise LauncherError(f"ExecutorOutput names an undeclared output artifact {key!r}")
            launched = outputs[key]["artifacts"]
            written = listed.get("artifacts", [])
            if len(written) != len(launched):
                raise LauncherError(
                    f"output {key}: {len(written)} artifacts, {len(launched)} expected"
                )
            for ours, theirs in zip(launched, written, strict=True):
                uri = theirs.get("uri") or ours["uri"]
                if ours["uri"].startswith("gs://") and not uri.startswith("gs://"):
                    raise LauncherError(
                        f"output {key}: moved from the object store to the pod's {uri}"
                    )
                ours["uri"] = uri
                ours["metadata"] = {**ours.get("metadata", {}), **theirs.get("metadata", {})}

    def _run_container(
        self,
        name: str,
        task: Mapping,
        component: Mapping,
        container: Mapping,
        results: Mapping[str, TaskResult],
        pipeline_inputs: Mapping[str, Any],
        task_root: str,
        context: Mapping[str, str],
        run_id: str,
    ) -> TaskResult:
        started = time.monotonic()
        executor_input = self.executor_input(
            name, task, component, results, pipeline_inputs, task_root, run_id
        )
        env = self._environment(container, run_id)
        Path(self.gcs.local_path(task_root)).mkdir(parents=True, exist_ok=True)
        self._pod_outputs(name, run_id).mkdir(parents=True, exist_ok=True)
        pre_check = container.get("lifecycle", {}).get("preCacheCheck")
        if pre_check and self.backend == VERTEX:  # open-source KFP's driver does not run it
            # Vertex runs the driver (same executor input) before its cache lookup; the driver
            # writes its ExecutorOutput (span, fingerprint, resolved input_config) to the task's
            # outputFile, which stays there: TFX's entrypoint reads it back and overrides its
            # exec properties with it, so the executor input itself is not rewritten here.
            command = self._command(
                {"command": pre_check.get("command", []), "args": pre_check.get("args", [])},
                executor_input,
                context,
            )
            self._execute(name, "driver", command, env, run_id)
            if not Path(self.gcs.local_path(executor_input["outputs"]["outputFile"])).exists():
                raise TaskFailed(f"task {name}: its preCacheCheck driver wrote no ExecutorOutput")
        log = self._execute(
            name, "executor", self._command(container, executor_input, context), env, run_id
        )
        executor_output = self._read_executor_output(executor_input, name, run_id)
        self._merge_outputs(executor_input, executor_output)
        parameters = dict(executor_output.get("parameterValues", {}))
        for key, spec in executor_input["outputs"].get("parameters", {}).items():
            path = self._local_output(spec["outputFile"], name, run_id)
            if key not in parameters and path.exists():  # a component writing the file itself
                text = path.read_text()
                try:
                    parameters[key] = json.loads(text)
                except json.JSONDecodeError:
                    parameters[key] = text
        for key in component.get("outputDefinitions", {}).get("parameters", {}):
            if key not in parameters:
                raise TaskFailed(f"task {name}: no value for output parameter {key}; log {log}")
        outputs = {
            key: listed["artifacts"]
            for key, listed in executor_input["outputs"].get("artifacts", {}).items()
        }
        if self.backend == KFP:  # published: new ML Metadata ids
            for artifact in itertools.chain(*outputs.values()):
                artifact["name"] = self._new_id()
        result = TaskResult(
            name, "container", executor_input, outputs, parameters, log, time.monotonic() - started
        )
        if self.backend == KFP and task.get("cachingOptions", {}).get("enableCache"):
            key = self.cache_key(task, component, container, executor_input["inputs"])
            self._cache[key] = copy.deepcopy(result)
        return result


def _check_proto(value: Mapping, message: str, what: str) -> None:
    """Raises LauncherError unless `value` parses as pipeline_spec_pb2.<message> (no unknown
    fields): what KFP's backend validates, and a guard against typos in this module."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    try:
        json_format.ParseDict(value, getattr(pipeline_spec_pb2, message)())
    except json_format.ParseError as e:
        raise LauncherError(f"{what} is not a valid {message}: {e}") from e


def task_id(name: str) -> str:
    """A task name as a lowercase resource-name segment."""
    return re.sub(r"[^a-z0-9-]", "-", name.lower())


def for_repository(
    spec_file: str | os.PathLike,
    gcs_root: Path,
    work_dir: Path,
    repo: Path,
    backend: str = VERTEX,
    image_files: Mapping[str, str | os.PathLike] | None = None,
    ram_buckets: Mapping[str, str | os.PathLike] | None = None,
):
    """The Launcher of a compiled spec file (PipelineSpec YAML or PipelineJob JSON) in the
    environment of the repository's Dockerfile, `repo` on PYTHONPATH standing in for the image's
    installed package, each task's log lines echoed."""
    spec, runtime_config = load_spec(spec_file)
    return Launcher(
        spec,
        gcs_root,
        work_dir,
        runtime_config=runtime_config,
        pythonpath=[str(repo)],
        env=image_environment(repo / "Dockerfile"),
        echo=lambda line: print(f"  [kfp] {line}", flush=True),
        backend=backend,
        image_files=image_files,
        ram_buckets=ram_buckets,
    )
