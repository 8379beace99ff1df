"""The BERT model in Keras (keras-nlp / keras-hub style: one concept per module).

- `configs`: `BertConfig` (google `bert_config.json`, HF `config.json`, presets tiny…large);
- `layers`: the building blocks (embeddings, attention projections, the tied MLM projection);
- `encoder`: the functional Transformer encoder (`build_encoder`, `BertEncoder`);
- `heads`: masked-LM, NSP, classification and span heads;
- `models`: task models (`BertPretrainer`, `BertClassifier`, `BertSpanLabeler`,
  `BertTokenClassifier`, `BertMultipleChoice`).
"""
