"""Each option is defined once (#38): every flag of every script and of the pipeline runner, and
every option dataclass field, with one help text and one set of bounds per name.

Two checks:
- declarations: the fields of the option dataclasses (`bert_tf.options`, `bert_tf.tasks.options`,
  `tfx_pipeline.configs`) that declare an option with `option(...)` rather than reuse one with
  `same_as(...)`: one name, one declaration (or identical ones);
- flags: what each program's `define_flags` defines (its absl flags, caught where absl defines
  them): a name means one thing, said the same way (the help's first clause, before a script's own
  remark), in every program, except the names in `SCRIPT_OWN` (google-research's, each program's
  own file or stage).
"""

import dataclasses
import importlib
import re
from collections import defaultdict
from pathlib import Path

import pytest
from absl import flags
from absl.flags import _defines

ROOT = Path(__file__).resolve().parents[1]
PROGRAM_PACKAGES = ("bert_tf", "serving", "tfx_pipeline", "demo")
OPTION_MODULES = ("bert_tf.options", "bert_tf.tasks.options", "tfx_pipeline.configs")
# Names that are each program's own by google-research's convention or by what they name.
SCRIPT_OWN = {
    "input_file": "google-research's: each script's own input (text, TFRecords, examples)",
    "output_file": "google-research's: each script's own output",
    "output_dir": "google-research's: each script's own outputs",
    "do_train": "google-research's: each script's own stages",
    "do_eval": "google-research's: each script's own stages",
    "do_predict": "google-research's: each script's own stages",
    "host": "bert_tf.launch: where its workers listen; serving.server: the interface it binds",
    "vocab_size": "build_vocab: the size to build; run_pretraining: the --preset model's",
    "runner": "create_pretraining_data: the Beam runner (a Beam program's flag); the pipeline "
    "runner: the orchestrator (local, beam, kubeflow, vertex)",
    "beam_pipeline_args": "create_pretraining_data: repeated, each split like a shell line "
    "(as a Beam program's); the pipeline runner: one comma-separated list (as TFX's templates)",
}


def _programs() -> list[str]:
    """Every module of the program packages that defines flags."""
    names = []
    for package in PROGRAM_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "def define_flags(" in path.read_text() and path.name != "options.py":
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                names.append(module.removesuffix(".__main__"))
    return names


def _defined_flags(monkeypatch) -> dict[str, list[tuple[str, str, tuple]]]:
    """flag name -> (program, help, bounds) of each definition."""
    defined = defaultdict(list)
    define_flag = _defines.DEFINE_flag
    program = ""

    def record(flag, flag_values=flags.FLAGS, module_name=None, required=False):
        if not flag.help.startswith("Alias for --"):
            parser = flag.parser
            # Numeric bounds absl checks; choices and option bounds are the declarations' (below).
            bounds = (getattr(parser, "lower_bound", None), getattr(parser, "upper_bound", None))
            defined[flag.name].append((program, flag.help, bounds))
        return define_flag(flag, flag_values, module_name, required)

    monkeypatch.setattr(_defines, "DEFINE_flag", record)
    for program in _programs():
        importlib.import_module(program).define_flags(flags.FlagValues())
    return defined


def _gist(help_text: str) -> str:
    """What a flag is, without absl's enum prefix, a program's remark or its default."""
    text = re.sub(r"^<[^>]*>: ", "", help_text)
    return re.split(r"; | \(|\.(?: |$)", text, maxsplit=1)[0].strip().lower()


def test_programs_are_found():
    programs = _programs()
    for expected in (
        "bert_tf.run_squad",
        "serving.export",
        "tfx_pipeline.runners.run_flags",
        "demo.run",
    ):
        assert expected in programs


def test_every_flag_name_means_one_thing_in_every_program(monkeypatch):
    defined = _defined_flags(monkeypatch)
    # The task options reach the scripts, the export and the pipeline runner alike.
    for name in ("doc_stride", "n_best_size", "masked_lm_prob", "dupe_factor"):
        assert len({program for program, _, _ in defined[name]}) >= 2, name
    drift = []
    for name, definitions in sorted(defined.items()):
        if name in SCRIPT_OWN:
            continue
        # absl's own bounds where a program gives them (others check the declaration's).
        given_bounds = {bounds for _, _, bounds in definitions if bounds != (None, None)}
        if len({_gist(text) for _, text, _ in definitions}) > 1 or len(given_bounds) > 1:
            lines = [f"  {program}: {text!r} {bounds}" for program, text, bounds in definitions]
            drift.append(f"--{name}:\n" + "\n".join(lines))
    assert not drift, "flags defined more than once, differently:\n" + "\n".join(drift)


def test_script_own_names_are_still_defined_by_several_programs(monkeypatch):
    defined = _defined_flags(monkeypatch)
    stale = [name for name in SCRIPT_OWN if len({p for p, _, _ in defined.get(name, [])}) < 2]
    assert not stale, f"SCRIPT_OWN names no longer shared: {stale}"


def _declarations() -> dict[str, dict[tuple, list[str]]]:
    """option name -> its declared meaning (help, choices, bounds) -> where."""
    declared = defaultdict(lambda: defaultdict(list))
    for module_name in OPTION_MODULES:
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
                continue
            if cls.__module__ != module_name:
                continue
            for field in dataclasses.fields(cls):
                meta = field.metadata
                if "help" not in meta or "declared_in" in meta:
                    continue  # a plain default of a subclass, or a reuse (same_as)
                if field.name not in {f.name for c in cls.__mro__[1:] for f in _fields(c)}:
                    keys = ("help", "choices", "minimum", "maximum", "above", "below")
                    meaning = tuple(meta.get(k) for k in keys)
                    declared[field.name][meaning].append(f"{module_name}.{cls.__qualname__}")
    return declared


def _fields(cls: type) -> tuple:
    return dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()


def test_each_option_is_declared_once():
    declared = _declarations()
    assert {"doc_stride", "masked_lm_prob", "learning_rate", "preset"} <= set(declared)
    twice = {name: dict(meanings) for name, meanings in declared.items() if len(meanings) > 1}
    assert not twice, f"options declared more than once, differently: {twice}"


@pytest.mark.parametrize(
    "module, cls, name",
    [
        ("tfx_pipeline.configs", "SquadOptions", "doc_stride"),
        ("tfx_pipeline.configs", "SquadOptions", "null_score_diff_threshold"),
        ("tfx_pipeline.configs", "PretrainingOptions", "masked_lm_prob"),
        ("tfx_pipeline.configs", "PretrainingOptions", "short_seq_prob"),
    ],
)
def test_pipeline_task_options_reuse_the_task_declarations(module, cls, name):
    field = {f.name: f for f in dataclasses.fields(getattr(importlib.import_module(module), cls))}
    assert field[name].metadata["declared_in"].startswith("bert_tf.tasks.options.")


def test_masked_lm_prob_has_one_bound_everywhere():
    """The pipeline allowed 1 while create_pretraining_data refused it (#38): one bound now."""
    from bert_tf import options
    from bert_tf.tasks.options import PretrainingDataOptions
    from tfx_pipeline import configs

    for value, ok in ((0.15, True), (1.0, False), (0.0, False)):
        data = options.errors(PretrainingDataOptions(masked_lm_prob=value))
        pipeline = configs.option_specs()["masked_lm_prob"].check(value)
        assert (not data) is ok and (pipeline is None) is ok, value


def test_the_pipeline_trainer_takes_the_scripts_loop_options():
    """--optimizer, --optimizer_recipe and --gradient_accumulation_steps reach the pipelines'
    Trainer as the scripts' TrainingLoopOptions (trainer_lib.train), checked up front (#39)."""
    from bert_tf import options
    from tfx_pipeline import configs

    chosen = configs.PretrainingOptions(
        optimizer="lamb", optimizer_recipe="hf", gradient_accumulation_steps=4, preset="tiny"
    )
    assert configs.check_options("pretrain", chosen) == []
    loop = options.from_dict(
        options.TrainingLoopOptions, configs.custom_config(chosen), save_checkpoints_steps=7
    )
    assert (loop.optimizer, loop.optimizer_recipe, loop.gradient_accumulation_steps) == (
        "lamb",
        "hf",
        4,
    )
    assert (loop.seed, loop.train_batch_size, loop.save_checkpoints_steps) == (12345, 32, 7)
    bad = configs.ClassificationOptions(optimizer="sgd", gradient_accumulation_steps=3)
    assert configs.check_options("classify", bad) == [
        "--optimizer: expected one of adamw, lamb, got sgd",
        "--gradient_accumulation_steps=3 must divide --train_batch_size=32",
    ]
