"""HF transformers' side of `bench.finetune_suite`, run in the reference environment (`.venv-ref`).

What an HF user runs for the same jobs, on PyTorch's CPU build:

- **fine-tuning**: `BertForSequenceClassification` (random init from the same shape), dropout on,
  `torch.optim.AdamW` over HF `Trainer`'s two parameter groups (no weight decay on biases and
  LayerNorm weights), `get_linear_schedule_with_warmup`, `clip_grad_norm_(1.0)`; bf16 as the
  `Trainer`'s `--bf16` does it on CPU, `torch.autocast("cpu", torch.bfloat16)` around the forward
  pass and the loss;
- **inference from raw text**: `BertTokenizerFast` on the same vocab (padding to the batch's
  longest, truncation at the sequence length, as `pipeline(...)` and most users call it) +
  `BertModel` under `torch.inference_mode()`, the pooled output back as numpy.

`bench.finetune_suite` starts it as `python -m bench.hf_worker` and talks JSON lines: one request
on stdin, one reply on stdout, so that its steps alternate with ours in one loop. Requests:

- `{"op": "train", "config": <HF config dict>, "batch": {name: nested list}, "precision":
  "float32" | "bfloat16", "steps_per_call": n, "seed": s}` -> `{"parameters": n}`;
- `{"op": "train_steps"}` -> `{"seconds", "loss"}`; with `"memory": true` (an untimed call
  after the timed ones: resetting the RSS high-water mark costs page faults) also
  `"step_memory_mb", "peak_memory_mb"`;
- `{"op": "encoder", "config": ..., "vocab_file": path, "seq_length": n}` -> `{}`;
- `{"op": "encode", "batches": [[text, ...], ...]}` -> `{"seconds": [per batch]}`;
- `{"op": "versions"}` -> python, torch, transformers, threads.

Errors come back as `{"error": "<one line>"}`. It imports no project package but `bench.rss` and
no TensorFlow (`bench/__init__.py` only sets environment variables).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from bench import rss

# HF Trainer's `get_decay_parameter_names`: every parameter but biases and LayerNorm weights.
NO_DECAY = ("bias", "LayerNorm.weight")


class FineTuning:
    """`steps_per_call` HF fine-tuning steps on one fixed batch per `steps()` call."""

    def __init__(self, config: dict, batch: dict, precision: str, steps_per_call: int, seed: int):
        if precision not in ("float32", "bfloat16"):
            raise ValueError(f"precision: expected float32 or bfloat16, got {precision!r}")
        torch.manual_seed(seed)
        self.model = transformers.BertForSequenceClassification(
            transformers.BertConfig(**config, num_labels=2)
        ).train()
        named = list(self.model.named_parameters())
        groups = [
            {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": 0.01},
            {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
        ]
        # The suite's schedule (bench.train_suite._optimizer's): 1e-4, long warmup, never 0.
        self.optimizer = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
        self.scheduler = transformers.get_linear_schedule_with_warmup(
            self.optimizer, num_warmup_steps=10_000, num_training_steps=1_000_000
        )
        self.batch = {k: torch.tensor(np.asarray(v, np.int64)) for k, v in batch.items()}
        self.autocast = precision == "bfloat16"
        self.steps_per_call = steps_per_call
        self.parameters = sum(p.numel() for _, p in named)

    def steps(self, memory: bool = False) -> dict:
        before = rss.reset_peak() if memory else 0.0
        start = time.perf_counter()
        losses = []
        for _ in range(self.steps_per_call):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.model(**self.batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))
        result = {"seconds": time.perf_counter() - start, "loss": float(np.mean(losses))}
        if memory:
            peak = rss.peak_mb()
            result.update(step_memory_mb=peak - before, peak_memory_mb=peak)
        return result


class Encoding:
    """Raw strings -> pooled output, the HF way (module docstring)."""

    def __init__(self, config: dict, vocab_file: str, seq_length: int):
        # transformers 5 takes the file as `vocab`; `vocab_file=` would be silently ignored and
        # leave a 5-token vocabulary that maps every word to [UNK].
        self.tokenizer = transformers.BertTokenizerFast(vocab=vocab_file, do_lower_case=True)
        lines = len(Path(vocab_file).read_bytes().splitlines())  # not str: U+001C etc. are tokens
        if len(self.tokenizer) != lines:
            raise ValueError(
                f"{vocab_file}: {lines} tokens, the HF tokenizer has {len(self.tokenizer)}"
            )
        self.model = transformers.BertModel(transformers.BertConfig(**config)).train(False)
        self.seq_length = seq_length

    def __call__(self, texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            features = self.tokenizer(
                texts,
                padding=True,
                truncation=True,
                max_length=self.seq_length,
                return_tensors="pt",
            )
            return self.model(**features).pooler_output.numpy()

    def timed(self, batches: list[list[str]]) -> dict:
        seconds = []
        for texts in batches:
            start = time.perf_counter()
            self(texts)
            seconds.append(time.perf_counter() - start)
        return {"seconds": seconds}


def handle(request: dict, state: dict) -> dict:
    op = request.get("op")
    if op == "versions":
        return {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
        }
    if op == "threads":
        torch.set_num_threads(int(request["threads"]))
        return {"threads": torch.get_num_threads()}
    if op == "train":
        keys = ("config", "batch", "precision", "steps_per_call", "seed")
        state.pop("train", None)  # one case at a time: free the last one's model first
        state["train"] = FineTuning(*(request[k] for k in keys))
        return {"parameters": state["train"].parameters}
    if op == "train_steps":
        return state["train"].steps(bool(request.get("memory", False)))
    if op == "encoder":
        state.pop("encoder", None)
        state["encoder"] = Encoding(request["config"], request["vocab_file"], request["seq_length"])
        return {}
    if op == "encode":
        return state["encoder"].timed(request["batches"])
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    state: dict = {}
    for line in sys.stdin:
        try:
            reply = handle(json.loads(line), state)
        except Exception as e:  # the suite names the failing request and stops
            reply = {"error": f"{type(e).__name__}: {e}".replace("\n", " ")}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
