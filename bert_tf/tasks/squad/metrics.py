"""SQuAD EM/F1 as the official v1.1 and v2.0 evaluation scripts compute them (percent)."""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable

_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, then the articles a/an/the, then collapse whitespace."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1(prediction: str, gold: str, empty_matches_empty: bool) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_matches_empty and (not pred_tokens or not gold_tokens):
        # v2.0: an empty answer is right exactly when the gold is empty too.
        return float(pred_tokens == gold_tokens)
    common = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def iter_questions(dataset: Iterable[dict]) -> Iterable[dict]:
    """Every question dict (`id`, `question`, `answers`, ...) of a SQuAD `data` list."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def squad_v1_metrics(dataset: Iterable[dict], predictions: dict[str, str]) -> dict[str, float]:
    """SQuAD v1.1 `exact_match` and `f1` (percent), best over each question's gold answers.

    A question without a prediction scores 0, as in the official script.
    """
    exact = f1 = 0.0
    total = 0
    for qa in iter_questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            continue
        prediction = predictions[qa["id"]]
        golds = [a["text"] for a in qa["answers"]]
        exact += max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)
        f1 += max(_f1(prediction, g, empty_matches_empty=False) for g in golds)
    if total == 0:
        raise ValueError("the SQuAD dataset has no questions")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def squad_v2_metrics(dataset: Iterable[dict], predictions: dict[str, str]) -> dict[str, float]:
    """SQuAD v2.0 `exact`, `f1`, `total`, and the same over `HasAns_*`/`NoAns_*` questions.

    Unanswerable questions (no gold answer) are right only with an empty prediction. Questions
    without a prediction are left out, as in the official script.
    """
    scores: dict[str, tuple[float, float, bool]] = {}  # id -> (exact, f1, has_answer)
    for qa in iter_questions(dataset):
        if qa["id"] not in predictions:
            continue
        prediction = predictions[qa["id"]]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        scores[qa["id"]] = (
            max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds),
            max(_f1(prediction, g, empty_matches_empty=True) for g in golds),
            bool(qa["answers"]),
        )
    if not scores:
        raise ValueError("no question of the SQuAD dataset has a prediction")
    results: dict[str, float] = {}
    for prefix, keep in (("", None), ("HasAns_", True), ("NoAns_", False)):
        subset = [s for s in scores.values() if keep is None or s[2] == keep]
        if subset:
            results[f"{prefix}exact"] = 100.0 * sum(s[0] for s in subset) / len(subset)
            results[f"{prefix}f1"] = 100.0 * sum(s[1] for s in subset) / len(subset)
            results[f"{prefix}total"] = len(subset)
    return results
