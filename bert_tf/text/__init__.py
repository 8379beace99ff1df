"""Text → model inputs, in the TensorFlow graph (tensorflow-text).

- `tokenization`: WordPiece tokenizer, packer and preprocessor as Keras layers, and the
  featurizers the exported models and the pipelines' Transform share (`pair_features`,
  `mask_aware_features`);
- `masking`: masked-LM masking (80/10/10, whole-word), seeded per example;
- `vocab`: learning a WordPiece vocab from text files (`python -m bert_tf.build_vocab`).
"""
