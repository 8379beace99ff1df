"""SQuAD v1.1 / v2.0 for BERT: reading, windowed features, span decoding and EM/F1.

Follows google-research/bert `run_squad.py` step by step, so features, predictions and scores
line up with the paper's setup:

- `read_squad_examples`: the context is split on whitespace into "doc words"; each answer's
  character offset becomes a (start, end) word index.
- `convert_examples_to_features`: every doc word is WordPiece-split (all words of all examples
  in batched calls of the in-graph `BertTokenizer`), long contexts become overlapping windows of
  `[CLS] query [SEP] doc-window [SEP]` (stride `doc_stride`), and each window records which of
  its tokens have their "max context" there.
- `compute_predictions`: n-best start/end search over all windows of an example, projection of
  the WordPiece span back onto the original context text (`get_final_text`), v2.0 null odds.
- `squad_v1_metrics` / `squad_v2_metrics`: EM/F1 as the official evaluation scripts compute
  them (scores in percent).

Modules: `data` (reading, windows, tf.data, loss), `postprocess` (n-best decoding), `ingraph`
(the same decoding in TF ops, for exported models),
`metrics` (official EM/F1); their public names are re-exported here.

Example:

    from bert_tf.tasks import squad
    from bert_tf import training
    from bert_tf.text.tokenization import BertTokenizer

    tokenizer = BertTokenizer("vocab.txt")
    examples = squad.read_squad_examples("dev-v1.1.json", training=False)
    features = squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64,
        training=False)
    dataset = squad.features_to_dataset(features, 384, batch_size=32, training=False)
    outputs = training.predict(model, dataset)  # model: a trained BertSpanLabeler
    predictions, nbest, null_odds = squad.compute_predictions(
        examples, features, outputs["start_logits"], outputs["end_logits"],
        lower_case=tokenizer.lower_case)
    squad.squad_v1_metrics(squad.read_squad_json("dev-v1.1.json"), predictions)
    # {"exact_match": ..., "f1": ...}
"""

from bert_tf.tasks.squad.data import (
    SquadExample,
    SquadFeature,
    convert_examples_to_features,
    feature_arrays,
    features_to_dataset,
    loss_fn,
    read_squad_examples,
    read_squad_json,
)
from bert_tf.tasks.squad.metrics import (
    iter_questions,
    normalize_answer,
    squad_v1_metrics,
    squad_v2_metrics,
)
from bert_tf.tasks.squad.postprocess import (
    basic_tokenize,
    compute_predictions,
    get_final_text,
)

__all__ = [
    "SquadExample",
    "SquadFeature",
    "basic_tokenize",
    "compute_predictions",
    "convert_examples_to_features",
    "feature_arrays",
    "features_to_dataset",
    "get_final_text",
    "iter_questions",
    "loss_fn",
    "normalize_answer",
    "read_squad_examples",
    "read_squad_json",
    "squad_v1_metrics",
    "squad_v2_metrics",
]
