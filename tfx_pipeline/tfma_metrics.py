"""TFMA metrics for what TFMA cannot express: STS-B's Pearson and Spearman correlations.

TFMA ships `SquaredPearsonCorrelation` (r², which loses the sign) and no rank correlation. These
metrics collect every (label, prediction) pair of a slice and score them with
`bert_tf.tasks.glue.compute_metrics`, so the Evaluator reports the same numbers as `run_classifier`.
A dev set of a few thousand pairs fits in one accumulator easily.

Use them by name in an EvalConfig (TFMA imports `module` in its Beam workers):

    tfma.MetricConfig(class_name="PearsonCorrelation", module="tfx_pipeline.tfma_metrics")
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types, metric_util

from bert_tf.tasks import glue

_Pairs = tuple[list[float], list[float]]  # labels, predictions


class _CorrelationCombiner(beam.CombineFn):
    def __init__(self, key: metric_types.MetricKey, eval_config, glue_metric: str):
        self._key = key
        self._eval_config = eval_config
        self._glue_metric = glue_metric

    def create_accumulator(self) -> _Pairs:
        return [], []

    def add_input(self, accumulator: _Pairs, element) -> _Pairs:
        for label, prediction, _ in metric_util.to_label_prediction_example_weight(
            element,
            eval_config=self._eval_config,
            model_name=self._key.model_name,
            output_name=self._key.output_name,
        ):
            accumulator[0].append(float(np.asarray(label).item()))  # one value per example
            accumulator[1].append(float(np.asarray(prediction).item()))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[_Pairs]) -> _Pairs:
        labels, predictions = [], []
        for more_labels, more_predictions in accumulators:
            labels += more_labels
            predictions += more_predictions
        return labels, predictions

    def extract_output(self, accumulator: _Pairs) -> dict[metric_types.MetricKey, float]:
        labels, predictions = accumulator
        if len(labels) < 2:
            return {self._key: float("nan")}
        # The metric itself from the task whose official metric it is (STS-B).
        scores = glue.compute_metrics("sts-b", np.array(predictions), np.array(labels))
        return {self._key: scores[self._glue_metric]}


def _correlation(
    name: str,
    glue_metric: str,
    eval_config=None,
    model_name: str = "",
    output_name: str = "",
    sub_key=None,
    example_weighted: bool = False,
) -> metric_types.MetricComputations:
    key = metric_types.MetricKey(
        name=name,
        model_name=model_name,
        output_name=output_name,
        sub_key=sub_key,
        example_weighted=example_weighted,
    )
    return [
        metric_types.MetricComputation(
            keys=[key],
            preprocessors=None,
            combiner=_CorrelationCombiner(key, eval_config, glue_metric),
        )
    ]


class PearsonCorrelation(metric_types.Metric):
    """Pearson's r of predictions and labels (GLUE's STS-B `pearson`)."""

    def __init__(self, name: str = "pearson"):
        super().__init__(
            metric_util.merge_per_key_computations(_correlation), name=name, glue_metric="pearson"
        )

    def get_config(self) -> dict:
        return {"name": self.name}


class SpearmanCorrelation(metric_types.Metric):
    """Spearman's rank correlation of predictions and labels (GLUE's STS-B `spearmanr`)."""

    def __init__(self, name: str = "spearmanr"):
        super().__init__(
            metric_util.merge_per_key_computations(_correlation), name=name, glue_metric="spearmanr"
        )

    def get_config(self) -> dict:
        return {"name": self.name}


metric_types.register_metric(PearsonCorrelation)
metric_types.register_metric(SpearmanCorrelation)
