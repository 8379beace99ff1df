"""Where a Trainer `Model` artifact keeps its exports: the one place the components unwrap it.

TFX writes the serving SavedModel to `<uri>/Format-Serving` and the eval model to
`<uri>/Format-TFMA`; a Model artifact resolved from ML Metadata that TFX before 0.29 wrote uses
`serving_model_dir` / `eval_model_dir` instead, which `path_utils.is_old_model_artifact` reads off
its `tfx_version` property. A bare URI is taken as the current layout.

    serving_dir(model)  # the SavedModel TF Serving, the Pusher and the evaluators load
"""

from __future__ import annotations

from tfx import types
from tfx.utils import path_utils


def serving_dir(model: types.Artifact | str) -> str:
    """The serving SavedModel's folder in a Model artifact (or its URI)."""
    if isinstance(model, str):
        return path_utils.serving_model_path(model)
    return path_utils.serving_model_path(model.uri, path_utils.is_old_model_artifact(model))


def eval_dir(model: types.Artifact | str) -> str:
    """The eval model's folder in a Model artifact (or its URI)."""
    if isinstance(model, str):
        return path_utils.eval_model_dir(model)
    return path_utils.eval_model_dir(model.uri, path_utils.is_old_model_artifact(model))
