"""Masked LM + next sentence pre-training: the data, the objective and the evaluation.

Modules: `records` (google-research `create_pretraining_data`: text -> NSP pairs -> masked
TFRecords, and their layout), `reader` (checked reading of those records), `objective` (the
loss, the training/eval input pipeline, the evaluation), `beam` (the same records as an Apache
Beam pipeline). The public names of the first three are re-exported here.

`objective`'s `pretraining_loss` (the Trainer's loss), `pretraining_dataset` (static or dynamic
masking) and `evaluate` (google-research's `eval_results.txt` metrics) are the training side.

Example:

```python
from bert_tf.tasks import pretraining
from bert_tf.modeling.configs import BertConfig
from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertPretrainer

model = BertPretrainer(build_encoder(BertConfig.from_preset("tiny")))
data = pretraining.pretraining_dataset("train.tfrecord", 128, 20, batch_size=8, training=False)
pretraining.evaluate(model, data)  # {"loss": ..., "masked_lm_accuracy": ..., ...}
```
"""

from bert_tf.tasks.pretraining.objective import (
    EVAL_KEYS,
    MODEL_INPUTS,
    evaluate,
    pretraining_dataset,
    pretraining_loss,
    remask,
)
from bert_tf.tasks.pretraining.reader import (
    check_pretraining_file,
    read_pretraining_dataset,
)
from bert_tf.tasks.pretraining.records import (
    MODEL_INPUT_NAMES,
    TrainingInstance,
    create_instances_from_document,
    create_pretraining_data,
    create_training_instances,
    document_rng,
    expand_file_patterns,
    feature_spec,
    mask_instances,
    read_documents,
    sentence_pairs,
    text_documents,
    to_example,
    tokenize_documents,
    truncate_seq_pair,
    validate_options,
    write_instance_examples,
)

__all__ = [
    "EVAL_KEYS",
    "MODEL_INPUTS",
    "MODEL_INPUT_NAMES",
    "TrainingInstance",
    "check_pretraining_file",
    "create_instances_from_document",
    "create_pretraining_data",
    "create_training_instances",
    "document_rng",
    "evaluate",
    "expand_file_patterns",
    "feature_spec",
    "mask_instances",
    "pretraining_dataset",
    "pretraining_loss",
    "read_documents",
    "read_pretraining_dataset",
    "remask",
    "sentence_pairs",
    "text_documents",
    "to_example",
    "tokenize_documents",
    "truncate_seq_pair",
    "validate_options",
    "write_instance_examples",
]
