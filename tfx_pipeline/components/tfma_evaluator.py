"""Evaluator: TFX's TFMA Evaluator, reading `ServingBaseline`'s "nothing serving yet" mark.

Given ServingBaseline's copy of the candidate (`is_candidate` = 1: no model serves yet), it
evaluates without a baseline, as TFX's Evaluator does when no baseline model is given: TFMA
"rubber-stamps" the change thresholds and checks only the value thresholds. The plain Evaluator
would score the candidate twice and compare it with itself (the same verdict, twice the work).
Everything else is TFX's Evaluator, its node id too ("Evaluator").
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx import v1 as tfx
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import executor_spec

from tfx_pipeline.components import blessing


class Executor(evaluator_executor.Executor):
    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        if input_dict.get("baseline_model") and blessing.baseline_model(input_dict) is None:
            input_dict = {k: v for k, v in input_dict.items() if k != "baseline_model"}
        super().Do(input_dict, output_dict, exec_properties)


class Evaluator(tfx.components.Evaluator):
    """`tfx.components.Evaluator` (same arguments) with the executor above."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
