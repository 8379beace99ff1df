"""model_artifact: the serving / eval folders of a Model artifact, in TFX's current and old layouts."""

import pytest
from ml_metadata.proto import metadata_store_pb2
from tfx.types import standard_artifacts

from tfx_pipeline.components import model_artifact


def _model(uri: str, tfx_version: str | None) -> standard_artifacts.Model:
    """A Model artifact as resolved from ML Metadata (state LIVE), written by `tfx_version`."""
    model = standard_artifacts.Model()
    model.uri = uri
    model.mlmd_artifact.state = metadata_store_pb2.Artifact.LIVE
    if tfx_version:
        model.set_string_custom_property("tfx_version", tfx_version)
    return model


def test_current_layout_for_artifacts_and_uris():
    for model in (_model("ram://bucket/model/7", "1.16.0"), "ram://bucket/model/7"):
        assert model_artifact.serving_dir(model) == "ram://bucket/model/7/Format-Serving"
        assert model_artifact.eval_dir(model) == "ram://bucket/model/7/Format-TFMA"


@pytest.mark.parametrize("tfx_version", ["0.21.4", None])
def test_old_layout_from_the_artifacts_version(tfx_version):
    model = _model("ram://bucket/model/7", tfx_version)
    assert model_artifact.serving_dir(model) == "ram://bucket/model/7/serving_model_dir"
    assert model_artifact.eval_dir(model) == "ram://bucket/model/7/eval_model_dir"
