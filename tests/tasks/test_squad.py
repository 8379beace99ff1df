"""SQuAD library: reading, windowing, span decoding and EM/F1 parity with the official scripts."""

import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest

from bert_tf.tasks import squad

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

TESTDATA = Path(__file__).parents[1] / "testdata"
V1 = TESTDATA / "squad_v1.1.json"
V2 = TESTDATA / "squad_v2.0.json"


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _planted_logits(features, spans):
    """Logits where `spans[i]` = (start, end) of feature i wins; other positions get noise."""
    rng = np.random.default_rng(0)
    seq = max(len(f.tokens) for f in features)
    start = rng.normal(0.0, 1.0, (len(features), seq))
    end = rng.normal(0.0, 1.0, (len(features), seq))
    for i, (s, e) in enumerate(spans):
        start[i, s] += 20.0
        end[i, e] += 20.0
    return start, end


# --- reading --------------------------------------------------------------------------------


def test_read_examples_maps_answers_to_words():
    examples = squad.read_squad_examples(V1, training=True)
    assert len(examples) == 29
    for example in examples:
        words = " ".join(example.doc_tokens[example.start_position : example.end_position + 1])
        assert example.orig_answer_text in words
        # The span is tight: dropping either end word loses part of the answer.
        inner = example.doc_tokens[example.start_position + 1 : example.end_position]
        assert example.orig_answer_text not in " ".join(inner) or not inner


def test_read_v2_marks_unanswerable():
    examples = squad.read_squad_examples(V2, training=True, version_2_with_negative=True)
    impossible = [e for e in examples if e.is_impossible]
    assert len(impossible) == 9
    assert all(e.start_position == e.end_position == -1 for e in impossible)
    # Without the v2 flag, unanswerable training questions are an error naming the question.
    with pytest.raises(ValueError, match=r'"q5_x0".*exactly 1 answer.*version_2_with_negative'):
        squad.read_squad_examples(V2, training=True)


def test_answer_offset_mismatch_names_the_question(tmp_path):
    data = json.loads(V1.read_text(encoding="utf-8"))
    qa = data["data"][2]["paragraphs"][0]["qas"][1]
    qa["answers"][0]["answer_start"] += 3
    path = _write(tmp_path, data)
    with pytest.raises(ValueError, match=rf'"{qa["id"]}": answer_start \d+ does not match'):
        squad.read_squad_examples(path, training=False)


def test_not_squad_json_is_a_clear_error(tmp_path):
    path = _write(tmp_path, {"version": "1.1"})
    with pytest.raises(ValueError, match='"data" list'):
        squad.read_squad_json(path)


# --- windows --------------------------------------------------------------------------------


def _long_context_examples(tmp_path):
    """All test contexts joined into one paragraph, with every question asked of it."""
    data = json.loads(V1.read_text(encoding="utf-8"))
    context, qas = "", []
    for article in data["data"]:
        paragraph = article["paragraphs"][0]
        offset = len(context) + (1 if context else 0)
        context = f"{context} {paragraph['context']}" if context else paragraph["context"]
        for qa in paragraph["qas"]:
            qa = copy.deepcopy(qa)
            qa["answers"][0]["answer_start"] += offset
            qas.append(qa)
    path = _write(tmp_path, {"data": [{"paragraphs": [{"context": context, "qas": qas}]}]})
    return squad.read_squad_examples(path, training=True)


def test_windows_cover_every_answer_with_max_context(tmp_path, tokenizer):
    examples = _long_context_examples(tmp_path)
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=64, doc_stride=24, max_query_length=16, training=True
    )
    by_example = {}
    for feature in features:
        by_example.setdefault(feature.example_index, []).append(feature)
        assert len(feature.input_ids) <= 64
        assert feature.tokens[0] == "[CLS]" and feature.tokens[-1] == "[SEP]"
        first_doc = feature.tokens.index("[SEP]") + 1
        assert feature.segment_ids == [0] * first_doc + [1] * (len(feature.tokens) - first_doc)
    doc_length = len(squad.data._wordpieces(tokenizer, [" ".join(examples[0].doc_tokens)])[0])
    for example_index, example in enumerate(examples):
        windows = by_example[example_index]
        assert len(windows) > 5  # the joined context is several hundred tokens
        # Every doc token has exactly one max-context window. Windows start doc_stride
        # apart (each holds more than doc_stride doc tokens here).
        counts = {}
        for window in windows:
            first_doc = window.tokens.index("[SEP]") + 1
            for position, is_max in window.token_is_max_context.items():
                doc_index = window.doc_span_index * 24 + position - first_doc
                counts[doc_index] = counts.get(doc_index, 0) + int(is_max)
        assert sorted(counts) == list(range(doc_length))
        assert set(counts.values()) == {1}
        # The answer lies whole in at least one window, with max context at its start there.
        answer = squad.data._wordpieces(tokenizer, [example.orig_answer_text])[0]
        hits = [w for w in windows if w.start_position > 0]
        assert hits, example.qas_id
        for window in hits:
            assert window.tokens[window.start_position : window.end_position + 1] == answer
        assert any(w.token_is_max_context[w.start_position] for w in hits), example.qas_id
        # Windows without the whole answer point at [CLS].
        assert all(w.end_position == 0 for w in windows if w.start_position == 0)


def test_query_is_truncated(tokenizer):
    example = squad.SquadExample("q", "one two three four five six", ["a", "b"])
    (feature,) = squad.convert_examples_to_features(
        [example], tokenizer, max_seq_length=16, doc_stride=8, max_query_length=3, training=False
    )
    assert feature.tokens == ["[CLS]", "one", "two", "three", "[SEP]", "a", "b", "[SEP]"]


def test_seq_length_must_exceed_query(tokenizer):
    with pytest.raises(ValueError, match="max_seq_length"):
        squad.convert_examples_to_features([], tokenizer, 10, 4, 8, training=False)


def test_training_dataset_batches_positions(tokenizer):
    examples = squad.read_squad_examples(V1, training=True)
    features = squad.convert_examples_to_features(examples, tokenizer, 96, 32, 24, True)
    batch = next(iter(squad.features_to_dataset(features, 96, 4, training=True)))
    assert batch["input_word_ids"].shape == (4, 96)
    assert set(batch) == {
        "input_word_ids",
        "input_mask",
        "input_type_ids",
        "start_positions",
        "end_positions",
    }
    predict = list(squad.features_to_dataset(features, 96, 7, training=False))
    assert sum(len(b["input_word_ids"]) for b in predict) == len(features)
    assert "start_positions" not in predict[0]


# --- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("version_2", [False, True])
def test_decoding_recovers_planted_spans_exactly(tokenizer, version_2):
    path = V2 if version_2 else V1
    train = squad.read_squad_examples(path, True, version_2)
    train_features = squad.convert_examples_to_features(train, tokenizer, 64, 16, 20, True)
    examples = squad.read_squad_examples(path, False, version_2)
    features = squad.convert_examples_to_features(examples, tokenizer, 64, 16, 20, False)
    assert [f.tokens for f in features] == [f.tokens for f in train_features]
    spans = [(f.start_position, f.end_position) for f in train_features]
    start, end = _planted_logits(features, spans)
    predictions, nbest, null_odds = squad.compute_predictions(
        examples, features, start, end, lower_case=True, version_2_with_negative=version_2
    )
    expected = {e.qas_id: e.orig_answer_text for e in train}
    assert predictions == expected
    # Accents and case come back from the original text.
    assert predictions["q7_2"] == "Aristotélēs"
    assert predictions["q16_0"] == "Collège de France"
    for entries in nbest.values():
        texts = [e["text"] for e in entries]
        # v2.0 adds the null answer after n_best_size spans, as google-research does.
        assert len(texts) == len(set(texts)) <= 20 + version_2
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        scores = [e["start_logit"] + e["end_logit"] for e in entries]
        assert scores == sorted(scores, reverse=True) or version_2  # v2 appends the null
    if version_2:
        assert set(null_odds) == set(predictions)
        for qas_id, text in predictions.items():
            assert (null_odds[qas_id] > 0) == (text == "")
        # A high enough threshold answers every question.
        forced, _, _ = squad.compute_predictions(
            examples,
            features,
            start,
            end,
            lower_case=True,
            version_2_with_negative=True,
            null_score_diff_threshold=1e6,
        )
        assert all(forced.values())
    else:
        assert null_odds == {}


def test_decoding_respects_max_answer_length_and_max_context(tokenizer):
    example = squad.SquadExample("q", "who", list("abcdefghijkl"))
    # 6 doc tokens per window, windows start 2 apart: window 0 = a..f, window 1 = c..h.
    features = squad.convert_examples_to_features([example], tokenizer, 10, 2, 4, False)
    assert features[0].tokens[3:9] == list("abcdef") and features[1].tokens[3] == "c"
    start, end = np.zeros((len(features), 10)), np.zeros((len(features), 10))
    start[0, 3], end[0, 8] = 10.0, 10.0  # "a b c d e f" in window 0
    # "c" scores highest in window 1, but window 0 gives "c" more context: ignored.
    start[1, 3], end[1, 3] = 50.0, 50.0

    def predict(max_answer_length):
        predictions, nbest, _ = squad.compute_predictions(
            [example], features, start, end, lower_case=True, max_answer_length=max_answer_length
        )
        return predictions["q"], [e["text"] for e in nbest["q"]]

    assert predict(30)[0] == "a b c d e f"
    answer, texts = predict(2)
    assert answer in ("a", "a b") and all(len(t.split()) <= 2 for t in texts)


def test_get_final_text_projects_onto_original_words():
    def final(pred, orig, lower_case=True):
        return squad.get_final_text(pred, orig, squad.basic_tokenize([orig], lower_case)[0])

    assert final("steve smith", "Steve Smith's") == "Steve Smith"
    assert final("zurich", "(Zürich)") == "Zürich"
    assert final("1895", "(1895-1943).") == "1895"
    assert final("Zürich", "(Zürich)", lower_case=False) == "Zürich"
    # Not found, or normalization changed the length: the whole original is kept.
    assert final("bern", "(Zürich)") == "(Zürich)"
    assert final("fix", "pre\u00adfix") == "pre\u00adfix"  # soft hyphen dropped


def test_mismatched_logits_rows_are_an_error(tokenizer):
    example = squad.SquadExample("q", "who", ["a"])
    features = squad.convert_examples_to_features([example], tokenizer, 16, 8, 4, False)
    with pytest.raises(ValueError, match="2 start and 2 end logit rows for 1 features"):
        squad.compute_predictions([example], features, np.zeros((2, 16)), np.zeros((2, 16)), True)


# --- metrics --------------------------------------------------------------------------------


def test_normalize_answer():
    assert squad.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert squad.normalize_answer("an apple's theme") == "apples theme"


def _prediction_sets(dataset):
    """{name: predictions}: perfect, partly wrong, empty, random spans, spans around the gold
    answer, one missing."""
    rng = random.Random(0)
    questions = [(qa, p["context"]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]]
    gold = {qa["id"]: (qa["answers"][0]["text"] if qa["answers"] else "") for qa, _ in questions}
    partly = {}
    for i, (qa, context) in enumerate(questions):
        text = gold[qa["id"]]
        if i % 3 == 1:
            text = text.split()[0] + " and more words" if text else "an unasked answer"
        elif i % 3 == 2:
            text = context.split()[i % len(context.split())]
        partly[qa["id"]] = text
    random_spans = {}
    for qa, context in questions:
        words = context.split()
        start = rng.randrange(len(words))
        random_spans[qa["id"]] = " ".join(words[start : start + rng.randint(1, 6)])
    # Character windows around the gold answer: partial overlaps, cut words.
    shifted = {}
    for qa, context in questions:
        answer = (qa["answers"] or qa["plausible_answers"])[0]
        begin = max(0, answer["answer_start"] - rng.randint(0, 12))
        stop = answer["answer_start"] + len(answer["text"]) + rng.randint(-3, 12)
        shifted[qa["id"]] = context[begin:stop]
    missing = dict(gold)
    missing.pop(questions[0][0]["id"])
    return {
        "perfect": gold,
        "partly_wrong": partly,
        "all_empty": {qa["id"]: "" for qa, _ in questions},
        "random": random_spans,
        "shifted": shifted,
        "missing_one": missing,
    }


def test_v1_metrics_equal_official_script(official_squad):
    official_v1, _ = official_squad
    dataset = squad.read_squad_json(V1)
    results = {}
    for name, predictions in _prediction_sets(dataset).items():
        ours = squad.squad_v1_metrics(dataset, predictions)
        theirs = official_v1.evaluate(dataset, predictions)  # Model Garden: fractions
        assert ours["exact_match"] == pytest.approx(100 * theirs["exact_match"]), name
        assert ours["f1"] == pytest.approx(100 * theirs["final_f1"]), name
        results[name] = ours
    assert results["perfect"] == {"exact_match": 100.0, "f1": 100.0}
    assert results["all_empty"] == {"exact_match": 0.0, "f1": 0.0}
    for name in ("partly_wrong", "shifted"):
        assert 0 < results[name]["exact_match"] < results[name]["f1"] < 100, name


def test_v2_metrics_equal_official_script(official_squad):
    _, official_v2 = official_squad
    dataset = squad.read_squad_json(V2)
    results = {}
    for name, predictions in _prediction_sets(dataset).items():
        ours = squad.squad_v2_metrics(dataset, predictions)
        theirs = official_v2.evaluate(dataset, predictions)
        for key, value in ours.items():
            assert value == pytest.approx(theirs[key]), (name, key)
        results[name] = ours
    assert results["perfect"]["exact"] == results["perfect"]["f1"] == 100.0
    # Empty answers are right exactly on the 9 unanswerable questions.
    assert results["all_empty"]["exact"] == pytest.approx(100 * 9 / 38)
    assert results["all_empty"]["NoAns_exact"] == 100.0
    assert results["missing_one"]["total"] == 37
