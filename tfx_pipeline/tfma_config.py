"""The classification pipeline's TFMA EvalConfig: the task's official metrics
(`bert_tf.tasks.glue`) as TFMA metrics, its main metric's thresholds, and the labels that decide
the two-class extras. `pipeline.create_classification_pipeline` hands it to the Evaluator
(`components/tfma_evaluator.py`).

    config = tfma_config.classification_eval_config(
        options, tfma_config.task_labels(options.task_name, data_root)
    )
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow_model_analysis as tfma

from bert_tf.tasks import glue
from tfx_pipeline import configs

# `bert_tf.tasks.glue` metric name -> (TFMA metric class, its key's name in TFMA's results).
# The binary ones run in a MetricsSpec binarized on class 1, GLUE's positive class: TFMA then
# scores class 1 one-vs-rest at threshold 0.5, which for two softmax scores is the argmax, so
# they equal sklearn's F1 / MCC that `glue.compute_metrics` reports.
TFMA_METRICS = {
    "accuracy": ("SparseCategoricalAccuracy", "sparse_categorical_accuracy"),
    "f1": ("F1Score", "f1_score"),
    "mcc": ("MatthewsCorrelationCoefficient", "matthews_correlation_coefficient"),
    "pearson": ("PearsonCorrelation", "pearson"),
    "spearmanr": ("SpearmanCorrelation", "spearmanr"),
}
_BINARY_METRICS = ("f1", "mcc")
_CUSTOM_METRICS_MODULE = "tfx_pipeline.tfma_metrics"  # TFMA lacks Pearson/Spearman


def task_labels(task_name: str, data_root: str) -> list[str]:
    """GLUE tasks name their labels; text_classification reads them from its train file, so a
    `data_root` this machine cannot read (a gs:// or /mnt volume path when compiling for
    Kubeflow/Vertex) leaves them unknown: no two-class extras then."""
    processor = glue.get_processor(task_name)
    if processor.labels or processor.is_regression or not os.path.isdir(data_root):
        return list(processor.labels)
    return processor.get_labels(data_root)


def classification_eval_config(
    options: configs.ClassificationOptions, labels: Sequence[str]
) -> tfma.EvalConfig:
    """TFMA on the exported model's `classify` (regression: `regress`) signature.

    Computes the task's official metrics (`bert_tf.tasks.glue`), plus F1 and MCC of class 1 for any
    two-class task; blesses when the task's main metric (its first official one) is at least
    `min_metric` and at most `max_decrease` below the serving model's (ServingBaseline). The
    Evaluator's executor raises that threshold to the eval split's constant-predictor baseline
    plus `min_baseline_gain` and adds the mean predictor's bound for regression
    (`components/tfma_evaluator.py`).
    """
    processor = glue.get_processor(options.task_name)
    names = list(processor.metrics)
    if len(labels) == 2:
        names += [m for m in _BINARY_METRICS if m not in names]
    threshold = tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={"value": options.min_metric}),
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER,
            absolute={"value": -options.max_decrease},
        ),
    )

    def metric(name: str) -> tfma.MetricConfig:
        class_name = TFMA_METRICS[name][0]
        config = tfma.MetricConfig(class_name=class_name)
        if name in ("pearson", "spearmanr"):
            config.module = _CUSTOM_METRICS_MODULE
        if name == names[0]:
            config.threshold.CopyFrom(threshold)
        return config

    specs = [
        tfma.MetricsSpec(
            metrics=[tfma.MetricConfig(class_name="ExampleCount")]
            + [metric(n) for n in names if n not in _BINARY_METRICS]
        )
    ]
    if any(n in _BINARY_METRICS for n in names):
        specs.append(
            tfma.MetricsSpec(
                binarize=tfma.BinarizationOptions(class_ids={"values": [1]}),
                metrics=[metric(n) for n in names if n in _BINARY_METRICS],
            )
        )
    regression = processor.is_regression
    return tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(
                signature_name="regress" if regression else "classify",
                label_key="label",
                prediction_key="outputs" if regression else "scores",
                model_type="tf_generic",  # a Keras 3 export: skip TFMA's Keras 2 loading attempt
            )
        ],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=specs,
    )
