"""The tasks' own options, declared once: the scripts' flags, the export's and the pipelines'.

`ClassificationOptions` (the task) is taken by `run_classifier` and `--pipeline=classify`;
`SquadOptions` (windows and span search; google-research `run_squad.py`'s names and defaults)
is taken by `run_squad`, `serving.export --task=squad` and `--pipeline=squad`;
`PretrainingDataOptions` (sentence pairs and masking; `create_pretraining_data.py`'s) by
`create_pretraining_data`, `run_pretraining --dynamic_masking` and `--pipeline=pretrain`. Each
uses them through `bert_tf.options` (`define_flags`, `same_as`), so help text and bounds are
written here only (tests/test_option_definitions.py checks every script and pipeline flag).

Imports no TensorFlow (as `bert_tf.options`): scripts check these before importing it.

Example:

    from bert_tf import options
    from bert_tf.tasks.options import SquadOptions
    options.check(SquadOptions(doc_stride=0))  # ValueError: --doc_stride: expected a positive ...
"""

from __future__ import annotations

import dataclasses

from bert_tf.options import option


@dataclasses.dataclass
class ClassificationOptions:
    """Sentence(-pair) classification and regression (`bert_tf.tasks.glue`'s readers)."""

    task_name: str | None = option(
        None,
        "The task, by bert_tf.tasks.glue's name (any case): a GLUE task or xnli, read from their "
        "official files, or text_classification, read from your own .tsv/.csv files with a header",
    )


@dataclasses.dataclass
class SquadOptions:
    """SQuAD v1.1/v2.0 windows and answer search (`bert_tf.tasks.squad`)."""

    doc_stride: int = option(128, "Context tokens between the starts of two windows", above=0)
    max_query_length: int = option(64, "Question tokens kept (the rest is cut)", above=0)
    max_answer_length: int = option(30, "Longest answer, in WordPiece tokens", above=0)
    n_best_size: int = option(
        20, "Start and end candidates kept per window in the span search", above=0
    )
    version_2_with_negative: bool = option(
        False, 'SQuAD v2.0: questions may have no answer (the model may answer "")'
    )
    null_score_diff_threshold: float = option(
        0.0, 'SQuAD v2.0: answer "" when the null score beats the best span by more than this'
    )


@dataclasses.dataclass
class PretrainingDataOptions:
    """Masked-LM + next-sentence examples from text (`bert_tf.tasks.pretraining.records`)."""

    max_predictions_per_seq: int = option(
        20, "Masked-LM predictions per sequence at most", minimum=1
    )
    masked_lm_prob: float = option(0.15, "Fraction of the tokens masked", above=0, below=1)
    do_whole_word_mask: bool = option(False, "Mask whole words (all their WordPieces) at once")
    dupe_factor: int = option(
        10, "Passes over the corpus, each with different sentence pairs and masks", minimum=1
    )
    short_seq_prob: float = option(
        0.1, "Probability of a shorter target length for a pair", minimum=0, maximum=1
    )
