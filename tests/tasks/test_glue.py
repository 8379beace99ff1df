"""GLUE processors on hand-made files in the official layouts, the generic task, metrics."""

import numpy as np
import pytest

from bert_tf.tasks import glue

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)


def _write(folder, name, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


def test_cola_has_no_header_in_train_and_dev(tmp_path):
    _write(
        tmp_path,
        "train.tsv",
        [["gj04", "1", "", "Our friends won't buy it."], ["gj04", "0", "*", "They drank the pub."]],
    )
    _write(tmp_path, "test.tsv", [["index", "sentence"], ["0", 'He said "hi".']])
    processor = glue.get_processor("CoLA")
    train = processor.get_train_examples(tmp_path)
    assert [(e.text_a, e.text_b, e.label) for e in train] == [
        ("Our friends won't buy it.", None, "1"),
        ("They drank the pub.", None, "0"),
    ]
    (test,) = processor.get_test_examples(tmp_path)
    assert (test.text_a, test.label) == ('He said "hi".', None)  # quotes kept: no CSV quoting
    _write(tmp_path, "dev.tsv", [["gj04", "1", "The cat sat."]])
    with pytest.raises(ValueError, match=r"dev.tsv:1: 3 tab-separated columns, expected 4"):
        processor.get_dev_examples(tmp_path)


@pytest.mark.parametrize(
    "task, header, row, expected",
    [
        ("sst-2", ["sentence", "label"], ["a gem of a film", "1"], ("a gem of a film", None, "1")),
        (
            "mrpc",
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["1", "702876", "702977", "He left.", "He went."],
            ("He left.", "He went.", "1"),
        ),
        (
            "sts-b",
            [
                "index",
                "genre",
                "filename",
                "year",
                "old_index",
                "source1",
                "source2",
                "sentence1",
                "sentence2",
                "score",
            ],
            [
                "0",
                "main-captions",
                "MSRvid",
                "2012test",
                "0001",
                "none",
                "none",
                "A plane.",
                "An air plane.",
                "5.000",
            ],
            ("A plane.", "An air plane.", 5.0),
        ),
        (
            "qqp",
            ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
            ["7", "15", "16", "How?", "Why?", "0"],
            ("How?", "Why?", "0"),
        ),
        (
            "qnli",
            ["index", "question", "sentence", "label"],
            ["0", "Who?", "Him.", "entailment"],
            ("Who?", "Him.", "entailment"),
        ),
        (
            "rte",
            ["index", "sentence1", "sentence2", "label"],
            ["0", "A b.", "C d.", "not_entailment"],
            ("A b.", "C d.", "not_entailment"),
        ),
        (
            "wnli",
            ["index", "sentence1", "sentence2", "label"],
            ["0", "I x.", "I y.", "1"],
            ("I x.", "I y.", "1"),
        ),
    ],
)
def test_glue_train_layouts(tmp_path, task, header, row, expected):
    _write(tmp_path, "train.tsv", [header, row])
    processor = glue.get_processor(task)
    (example,) = processor.get_train_examples(tmp_path)
    assert (example.text_a, example.text_b, example.label) == expected
    assert processor.is_regression == (task == "sts-b")


def test_mnli_dev_matched_mismatched_and_labels(tmp_path):
    header = [
        "index",
        "promptID",
        "pairID",
        "genre",
        "s1_bin",
        "s2_bin",
        "s1_parse",
        "s2_parse",
        "sentence1",
        "sentence2",
    ]
    row = ["0", "1", "1e", "gov", "( a )", "( b )", "(ROOT a)", "(ROOT b)"]
    _write(
        tmp_path,
        "train.tsv",
        [
            [*header, "label1", "gold_label"],
            [*row, "Premise.", "Hypothesis.", "neutral", "neutral"],
        ],
    )
    labels = ["label1", "label2", "label3", "label4", "label5", "gold_label"]
    dev = ["entailment"] * 6
    _write(tmp_path, "dev_matched.tsv", [header + labels, [*row, "M a.", "M b.", *dev]])
    _write(tmp_path, "dev_mismatched.tsv", [header + labels, [*row, "X a.", "X b.", *dev]])
    _write(tmp_path, "test_mismatched.tsv", [header, [*row, "T a.", "T b."]])
    mnli, mm = glue.get_processor("MNLI"), glue.get_processor("mnli-mm")
    assert mnli.get_labels(tmp_path) == ["contradiction", "entailment", "neutral"]
    assert mnli.get_train_examples(tmp_path)[0].label == "neutral"
    assert mnli.get_dev_examples(tmp_path)[0].text_a == "M a."
    assert mm.get_dev_examples(tmp_path)[0].text_b == "X b."
    assert mm.get_test_examples(tmp_path)[0].label is None
    _write(
        tmp_path,
        "train.tsv",
        [[*header, "label1", "gold_label"], [*row, "P.", "H.", "neutral", "maybe"]],
    )
    with pytest.raises(ValueError, match=r"train.tsv:2: unknown label 'maybe', expected one of"):
        mnli.get_train_examples(tmp_path)


def test_glue_errors_name_file_and_expectation(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"train\.tsv: no such file"):
        glue.get_processor("rte").get_train_examples(tmp_path)
    _write(
        tmp_path,
        "train.tsv",
        [
            ["index", "sentence1", "sentence2", "label"],
            ["0", "a", "b", "entailment"],
            ["1", "a b", "not_entailment"],
        ],
    )
    with pytest.raises(ValueError, match=r"train.tsv:3: 3 tab-separated columns, expected 4"):
        glue.get_processor("rte").get_train_examples(tmp_path)
    _write(
        tmp_path,
        "train.tsv",
        [["index", "sentence1", "sentence2", "score"], ["0", "a", "b", "high"]],
    )
    with pytest.raises(ValueError, match="needs at least 9"):
        glue.get_processor("stsb").get_train_examples(tmp_path)
    with pytest.raises(ValueError, match="unknown task 'squad'"):
        glue.get_processor("squad")


def test_text_classification_any_language_labels_from_train(tmp_path):
    (tmp_path / "train.csv").write_text(
        'text,label\n"这部电影很好看，推荐！",pos\n"Bad, boring.",neg\n"Quite ""good""",pos\n',
        encoding="utf-8",
    )
    (tmp_path / "dev.csv").write_text("label,text\nneg,太差了\n", encoding="utf-8")
    processor = glue.get_processor("text_classification")
    assert processor.get_labels(tmp_path) == ["neg", "pos"]
    train = processor.get_train_examples(tmp_path)
    assert [(e.text_a, e.label) for e in train] == [
        ("这部电影很好看，推荐！", "pos"),
        ("Bad, boring.", "neg"),
        ('Quite "good"', "pos"),
    ]
    (dev,) = processor.get_dev_examples(tmp_path)
    assert (dev.text_a, dev.text_b, dev.label) == ("太差了", None, "neg")
    _write(tmp_path, "test.tsv", [["sentence1", "sentence2"], ["a", "b"]])
    (test,) = processor.get_test_examples(tmp_path)
    assert (test.text_a, test.text_b, test.label) == ("a", "b", None)
    (tmp_path / "dev.csv").write_text("text,label\nmeh,neutral\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev.csv:2: unknown label 'neutral'.*\['neg', 'pos'\]"):
        processor.get_dev_examples(tmp_path)
    (tmp_path / "dev.csv").write_text("review,stars\nok,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dev.csv:1: header .* needs a 'label' column"):
        processor.get_dev_examples(tmp_path)


def test_single_segment_from_the_layout_or_the_training_header(tmp_path):
    """Single-sentence tasks (no second text) are exported with `text_a` alone."""
    assert glue.get_processor("sst-2").single_segment(tmp_path)
    assert glue.get_processor("cola").single_segment(tmp_path)
    assert not glue.get_processor("mrpc").single_segment(tmp_path)
    assert not glue.get_processor("mnli").single_segment(tmp_path)
    processor = glue.get_processor("text_classification")
    _write(tmp_path, "train.tsv", [["text", "label"], ["good", "pos"]])
    assert processor.single_segment(tmp_path)
    _write(tmp_path, "train.tsv", [["sentence1", "sentence2", "label"], ["a", "b", "same"]])
    assert not processor.single_segment(tmp_path)


def test_metrics_match_their_definitions():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 50)
    predictions = np.where(rng.random(50) < 0.7, labels, 1 - labels)
    tp = np.sum((predictions == 1) & (labels == 1))
    tn = np.sum((predictions == 0) & (labels == 0))
    fp = np.sum((predictions == 1) & (labels == 0))
    fn = np.sum((predictions == 0) & (labels == 1))
    accuracy = (tp + tn) / 50
    f1 = 2 * tp / (2 * tp + fp + fn)
    mcc = (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    assert glue.compute_metrics("mrpc", predictions, labels) == pytest.approx(
        {"f1": f1, "accuracy": accuracy}
    )
    assert glue.compute_metrics("qqp", predictions, labels)["f1"] == pytest.approx(f1)
    assert glue.compute_metrics("cola", predictions, labels) == pytest.approx(
        {"mcc": mcc, "accuracy": accuracy}
    )
    assert glue.compute_metrics("rte", predictions, labels) == {"accuracy": pytest.approx(accuracy)}
    scores = rng.uniform(0, 5, 30)
    gold = scores + rng.normal(0, 1, 30)
    ranks = lambda x: np.argsort(np.argsort(x))  # noqa: E731  (no ties in continuous data)
    result = glue.compute_metrics("sts-b", scores, gold)
    assert result["pearson"] == pytest.approx(np.corrcoef(scores, gold)[0, 1])
    assert result["spearmanr"] == pytest.approx(np.corrcoef(ranks(scores), ranks(gold))[0, 1])


def test_xnli_reads_google_research_layout_in_chinese(tmp_path):
    """XNLI-MT's training file (its "contradictory" is "contradiction") and XNLI 1.0's dev/test
    files, of which only the zh rows are read; accuracy is the metric."""
    _write(
        tmp_path / "multinli",
        "multinli.train.zh.tsv",
        [
            ["premise", "hypo", "label"],
            ["他去了商店。", "他在家。", "contradictory"],
            ["天气很好。", "今天晴天。", "entailment"],
            ["我喜欢茶。", "我喝饮料。", "neutral"],
        ],
    )
    header = ["language", "gold_label", "s1_binary", "s2_binary", "s1_parse", "s2_parse"]
    header += ["sentence1", "sentence2", "promptID", "pairID"]
    _write(
        tmp_path,
        "xnli.dev.tsv",
        [
            header,
            ["en", "neutral", "", "", "", "", "He left.", "He went.", "1", "1"],
            ["zh", "entailment", "", "", "", "", "他走了。", "他离开了。", "1", "2"],
            ["zh", "contradiction", "", "", "", "", "猫在睡觉。", "猫在跑。", "2", "3"],
        ],
    )
    processor = glue.get_processor("XNLI")
    assert processor.get_labels(tmp_path) == ["contradiction", "entailment", "neutral"]
    assert not processor.single_segment(tmp_path)
    train = processor.get_train_examples(tmp_path)
    assert [(e.text_a, e.text_b, e.label) for e in train] == [
        ("他去了商店。", "他在家。", "contradiction"),
        ("天气很好。", "今天晴天。", "entailment"),
        ("我喜欢茶。", "我喝饮料。", "neutral"),
    ]
    dev = processor.get_dev_examples(tmp_path)
    assert [(e.text_a, e.text_b, e.label) for e in dev] == [
        ("他走了。", "他离开了。", "entailment"),
        ("猫在睡觉。", "猫在跑。", "contradiction"),
    ]
    assert glue.compute_metrics("xnli", [1, 1], [1, 0]) == {"accuracy": 0.5}
    _write(tmp_path, "xnli.test.tsv", [header, ["zh", "maybe", "", "", "", "", "a", "b", "", ""]])
    (test,) = processor.get_test_examples(tmp_path)  # test labels are not read
    assert (test.text_a, test.label) == ("a", None)
    _write(tmp_path, "xnli.dev.tsv", [header, ["zh", "maybe", "", "", "", "", "a", "b", "", ""]])
    with pytest.raises(ValueError, match=r"xnli\.dev\.tsv:2: unknown label 'maybe'"):
        processor.get_dev_examples(tmp_path)
