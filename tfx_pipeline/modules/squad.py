"""Module file of the SQuAD pipeline: Trainer's `run_fn`, Tuner's `tuner_fn`.

No `preprocessing_fn`: the SQuAD pipeline has no Transform. Its training features are
doc-stride windows (several per question, each with the answer span mapped from character
offsets onto WordPiece positions, or onto [CLS] when the window misses it), which is not a
per-example TFT `preprocessing_fn`; `SquadExampleGen` builds them with `bert_tf.tasks.squad`, as
google-research `run_squad.py` does, and the exported model tokenizes and windows raw text in
its own graph (`bert_tf.tasks.squad.ingraph.squad_answers`).

The Trainer fine-tunes a `BertSpanLabeler` on the windows with `bert_tf.tasks.squad.loss_fn`,
warm-started from the Trainer's `base_model` (an imported checkpoint in any format
`load_pretrained` reads; its config beside it sets the architecture, else `preset`), and
exports `serving.export_lib.export_squad`'s raw-text SavedModel (`serving_default`: `question`,
`context` -> `answer_text`, `start_char`, `end_char`, `score`). With `--tune`, the Tuner first
fine-tunes and exports once per combination of the BERT paper's grid (`tfx_pipeline.tuning`),
scoring each export's answers to the dev questions with the official F1, and the Trainer trains
with the best one's values.
"""

from __future__ import annotations

import os

from tfx.utils import path_utils

from bert_tf.modeling.encoder import build_encoder
from bert_tf.modeling.models import BertSpanLabeler
from bert_tf.tasks import squad
from serving.export_lib import export_squad
from tfx_pipeline import trainer_lib, tuning
from tfx_pipeline.components import squad_evaluator
from tfx_pipeline.components.squad_example_gen import window_feature_spec


def _fine_tune(fn_args, options: dict, output_dir: str):
    """Fine-tunes `BertSpanLabeler` on ExampleGen's training windows with `options` for
    `trainer_lib.num_train_steps` steps (the options' num_train_epochs unless the component's
    train_args set a step count), checkpoints in `output_dir`: (model, preprocessor)."""
    preprocessor = trainer_lib.preprocessor(options)
    dataset = trainer_lib.transformed_dataset(
        fn_args.train_files,
        window_feature_spec(options["max_seq_length"]),
        options["train_batch_size"],
        training=True,
        seed=options["seed"],
    )
    init_checkpoint, config = trainer_lib.warm_start(
        fn_args.base_model, options, preprocessor.tokenizer.vocabulary_size
    )
    model = trainer_lib.train(
        lambda: BertSpanLabeler(build_encoder(config)),
        squad.loss_fn,
        dataset,
        options,
        trainer_lib.num_train_steps(fn_args, options),
        output_dir,
        init_checkpoint=init_checkpoint,
    )
    return model, preprocessor


def _export(serving_model_dir: str, model, preprocessor, options: dict) -> None:
    trainer_lib.export_serving_model(
        export_squad,
        serving_model_dir,
        model,
        preprocessor,
        doc_stride=options["doc_stride"],
        max_query_length=options["max_query_length"],
        max_answer_length=options["max_answer_length"],
        n_best_size=options["n_best_size"],
        version_2_with_negative=bool(options["version_2_with_negative"]),
        null_score_diff_threshold=float(options["null_score_diff_threshold"]),
    )


def run_fn(fn_args):
    """Fine-tunes with the custom_config's options (the Tuner's best hyperparameters over them
    when the pipeline tunes) and exports the raw-text SQuAD model."""
    options = tuning.apply_hyperparameters(
        trainer_lib.training_options(fn_args.custom_config), fn_args.hyperparameters
    )
    model, preprocessor = _fine_tune(fn_args, options, fn_args.model_run_dir)
    _export(fn_args.serving_model_dir, model, preprocessor, options)


def tuner_fn(fn_args):
    """The BERT paper's search (`tfx_pipeline.tuning`): each trial fine-tunes and exports as
    `run_fn` does, and its export answers the eval split's questions, scored with the official
    F1 as the SquadEvaluator scores them."""
    options = trainer_lib.training_options(fn_args.custom_config)
    v2 = bool(options["version_2_with_negative"])
    # The eval split's folder (fn_args.eval_files: its file patterns).
    (eval_pattern,) = fn_args.eval_files
    questions = squad_evaluator.read_questions(os.path.dirname(eval_pattern))

    def train_and_score(values: dict, trial_dir: str) -> float:
        trial = {**options, **values}
        model, preprocessor = _fine_tune(fn_args, trial, trial_dir)
        # The layout SquadEvaluator reads a Model artifact in.
        _export(path_utils.serving_model_path(trial_dir), model, preprocessor, trial)
        answers = squad_evaluator.answer_questions(trial_dir, questions, options["eval_batch_size"])
        return squad_evaluator.official_metrics(questions, answers, v2)["f1"]

    return tuning.tuner_fn_result(train_and_score, "dev_f1", options, fn_args.working_dir)
