"""Custom TFX components: the pretraining-corpus and text-classification ExampleGens, and the
pretraining evaluator (masked-LM / NSP accuracy, which TFMA cannot compute from raw examples)."""
