"""InputFingerprint: the data folder's fingerprint, so that open-source KFP's cache sees new data.

On open-source Kubeflow Pipelines a task's cache key is the fingerprint of its input parameter
values, its input artifacts' ids, its command and image (backend/src/v2/cacheutils). KFP's
driver does not run TFX's `lifecycle.preCacheCheck` (only Vertex does), so FileBasedExampleGen's
own driver never fingerprints the input files there: an ExampleGen's key is its parameters
alone, and a document appended under the same `--data_root` is a cache hit at every task, the old
model kept. This component runs first, uncached (`tfx_pipeline.run` clears its cachingOptions),
and hands the folder's fingerprint to each ExampleGen as the `input_fingerprint` parameter
(`channel.future()[0].value`, compiled to a `taskOutputParameter`): changed files change the
ExampleGen's key, so it runs again and everything downstream sees a new artifact; unchanged files
give the same key, a cache hit, and the cached ExampleGen's artifact keeps every downstream key
the same.

The fingerprint lists every file under `input_base` (any depth: XNLI's `multinli/`, SQuAD's JSON,
corpus shards) with its size and modification time (its content's hash on a filesystem without modification
times, e.g. `ram://`), as TFX's `generate_fingerprint` counts a split's files by size and mtime; hand-written because TFX's needs one glob pattern per split and
does not descend into sub-folders.

Example (in a pipeline):

    fingerprint = InputFingerprint(input_base="gs://bucket/data")
    example_gen = TextClassificationExampleGen(
        input_base="gs://bucket/data", task_name="sst-2",
        input_fingerprint=fingerprint.outputs["fingerprint"].future()[0].value)
"""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

OUTPUT_KEY = "fingerprint"


def _content_digest(path: str) -> str:
    digest = hashlib.sha256()
    with fileio.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(input_base: str) -> str:
    """`<files> files, <bytes> bytes, sha256 <hex>` over every file's path, size and mtime
    (its content's sha256 where the filesystem keeps no modification time)."""
    base = input_base.rstrip("/")
    if not fileio.isdir(base):
        raise FileNotFoundError(f"input_base: {input_base}: no such folder")
    rows = []
    for folder, _, names in fileio.walk(base):
        for name in names:
            path = f"{folder.rstrip('/')}/{name}"
            stat = fileio.stat(path)
            # A filesystem without modification times (mtime 0, e.g. ram://) could not tell a
            # rewrite of the same size: its files' contents are hashed instead.
            changed = stat.mtime_nsec or _content_digest(path)
            rows.append((path[len(base) + 1 :], stat.length, changed))
    rows.sort()
    digest = hashlib.sha256("".join(f"{p}\0{n}\0{t}\n" for p, n, t in rows).encode())
    return f"{len(rows)} files, {sum(r[1] for r in rows)} bytes, sha256 {digest.hexdigest()}"


class InputFingerprintSpec(ComponentSpec):
    PARAMETERS: ClassVar[dict] = {"input_base": ExecutionParameter(type=str)}
    INPUTS: ClassVar[dict] = {}
    OUTPUTS: ClassVar[dict] = {OUTPUT_KEY: ChannelParameter(type=standard_artifacts.String)}


class Executor(base_executor.BaseExecutor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        del input_dict
        artifact = artifact_utils.get_single_instance(output_dict[OUTPUT_KEY])
        artifact.value = fingerprint(exec_properties["input_base"])  # written to its uri


class InputFingerprint(base_component.BaseComponent):
    """The fingerprint of `input_base`'s files as a String artifact (module docstring)."""

    SPEC_CLASS = InputFingerprintSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, input_base: str):
        super().__init__(
            spec=InputFingerprintSpec(
                input_base=input_base,
                **{OUTPUT_KEY: types.Channel(type=standard_artifacts.String)},
            )
        )

    def value(self):
        """The fingerprint as an exec property of a downstream component (a placeholder)."""
        return self.outputs[OUTPUT_KEY].future()[0].value
