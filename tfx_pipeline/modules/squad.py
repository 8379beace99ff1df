"""Module file of the SQuAD pipeline: Trainer's `run_fn`.

No `preprocessing_fn`: the SQuAD pipeline has no Transform. Its training features are
doc-stride windows (several per question, each with the answer span mapped from character
offsets onto WordPiece positions, or onto [CLS] when the window misses it), which is not a
per-example TFT `preprocessing_fn`; `SquadExampleGen` builds them with `bert_tf.tasks.squad`, as
google-research `run_squad.py` does, and the exported model tokenizes and windows raw text in
its own graph (`bert_tf.tasks.squad.ingraph.squad_answers`).

The Trainer fine-tunes a `BertSpanLabeler` on the windows with `bert_tf.tasks.squad.loss_fn`,
warm-started from the Trainer's `base_model` (an imported checkpoint in any format
`load_pretrained` reads; its config beside it sets the architecture, else `preset`), and
exports `serving.export.export_squad`'s raw-text SavedModel (`serving_default`: `question`,
`context` -> `answer_text`, `start_char`, `end_char`, `score`).
"""

from __future__ import annotations

from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertSpanLabeler
from bert_tf.tasks import squad
from serving.export import export_squad
from tfx_pipeline import trainer_lib
from tfx_pipeline.components.squad_example_gen import window_feature_spec


def run_fn(fn_args):
    """Fine-tunes for `trainer_lib.num_train_steps` steps (the custom_config's num_train_epochs
    unless the Trainer's train_args set a step count), exports the raw-text SQuAD model."""
    options = trainer_lib.training_options(fn_args.custom_config)
    seq_length = options["max_seq_length"]
    preprocessor = trainer_lib.preprocessor(options)
    dataset = trainer_lib.transformed_dataset(
        fn_args.train_files,
        window_feature_spec(seq_length),
        options["train_batch_size"],
        training=True,
        seed=options["seed"],
    )

    init_checkpoint, config = trainer_lib.warm_start(
        fn_args.base_model, options["preset"], preprocessor.tokenizer.vocabulary_size
    )
    if seq_length > config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={seq_length} exceeds the model's max_position_embeddings "
            f"({config.max_position_embeddings})"
        )
    model = trainer_lib.train(
        lambda: BertSpanLabeler(build_encoder(config)),
        squad.loss_fn,
        dataset,
        options,
        trainer_lib.num_train_steps(fn_args, options),
        fn_args.model_run_dir,
        init_checkpoint=init_checkpoint,
    )
    trainer_lib.export_serving_model(
        export_squad,
        fn_args.serving_model_dir,
        model,
        preprocessor,
        doc_stride=options["doc_stride"],
        max_query_length=options["max_query_length"],
        max_answer_length=options["max_answer_length"],
        version_2_with_negative=bool(options["version_2_with_negative"]),
        null_score_diff_threshold=float(options["null_score_diff_threshold"]),
    )
