"""The shipped config files parse as the protos the real tensorflow_model_server reads."""

from pathlib import Path

import numpy as np
import pytest
from tensorflow_serving.config import model_server_config_pb2

from serving.batching import BatchScheduler
from serving.config_protos import BatchingParameters, MonitoringConfig, read_text_proto
from serving.model_manager import validate_config

CONFIGS = Path(__file__).resolve().parents[2] / "serving" / "configs"


def test_models_config_is_valid():
    config = read_text_proto(
        str(CONFIGS / "models.config"), model_server_config_pb2.ModelServerConfig
    )
    models = list(config.model_config_list.config)
    validate_config(models)
    assert {m.name for m in models} == {"bert_classifier", "bert_encoder", "bert_squad"}


@pytest.mark.parametrize("name", ["batching_parameters.txt", "batching_parameters_small_cpu.txt"])
def test_batching_parameters_build_a_scheduler(name):
    params = read_text_proto(str(CONFIGS / name), BatchingParameters)
    scheduler = BatchScheduler.from_proto(lambda inputs: {"y": inputs["x"] * 2}, params)
    try:
        assert scheduler.max_batch_size == params.max_batch_size.value
        out = scheduler.submit({"x": np.arange(3, dtype=np.float32)})
        np.testing.assert_array_equal(out["y"], [0, 2, 4])
    finally:
        scheduler.close()


def test_monitoring_config_enables_prometheus():
    config = read_text_proto(str(CONFIGS / "monitoring.config"), MonitoringConfig)
    assert config.prometheus_config.enable
    assert config.prometheus_config.path == "/monitoring/prometheus/metrics"
