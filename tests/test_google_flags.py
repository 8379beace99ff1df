"""google-research/bert's flag names: each script takes its google counterpart's flags (those
that mean something here), `--use_tpu` selects the TPU strategy, the old spellings `--tpu` and
`--steps_per_loop` stay as aliases, and warmup longer than training warns and trains, with
google's learning rate."""

import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from bert_tf import flags_util, training

TESTDATA = Path(__file__).parent / "testdata"

# google-research/bert's flags of each script, less none: all have a meaning here.
GOOGLE_FLAGS = {
    "run_pretraining": """bert_config_file input_file output_dir init_checkpoint max_seq_length
        max_predictions_per_seq do_train do_eval train_batch_size eval_batch_size learning_rate
        num_train_steps num_warmup_steps save_checkpoints_steps iterations_per_loop
        max_eval_steps use_tpu tpu_name tpu_zone gcp_project master num_tpu_cores""",
    "run_classifier": """data_dir bert_config_file task_name vocab_file output_dir
        init_checkpoint do_lower_case max_seq_length do_train do_eval do_predict
        train_batch_size eval_batch_size predict_batch_size learning_rate num_train_epochs
        warmup_proportion save_checkpoints_steps iterations_per_loop use_tpu tpu_name tpu_zone
        gcp_project master num_tpu_cores""",
    "run_squad": """bert_config_file vocab_file output_dir train_file predict_file
        init_checkpoint do_lower_case max_seq_length doc_stride max_query_length do_train
        do_predict train_batch_size predict_batch_size learning_rate num_train_epochs
        warmup_proportion save_checkpoints_steps iterations_per_loop n_best_size
        max_answer_length use_tpu tpu_name tpu_zone gcp_project master num_tpu_cores
        verbose_logging version_2_with_negative null_score_diff_threshold""",
    "extract_features": """input_file output_file layers bert_config_file max_seq_length
        init_checkpoint vocab_file do_lower_case batch_size use_tpu master num_tpu_cores
        use_one_hot_embeddings""",
    "create_pretraining_data": """input_file output_file vocab_file do_lower_case
        do_whole_word_mask max_seq_length max_predictions_per_seq random_seed dupe_factor
        masked_lm_prob short_seq_prob""",
}
GOOGLE_FLAGS = {script: names.split() for script, names in GOOGLE_FLAGS.items()}
TRAINING_SCRIPTS = ("run_pretraining", "run_classifier", "run_squad")


def _module(script: str):
    return importlib.import_module(f"bert_tf.{script}")


def _parse(script: str, *argv: str) -> flags.FlagValues:
    flag_values = flags.FlagValues()
    _module(script).define_flags(flag_values)
    flag_values([script, *argv])
    return flag_values


@pytest.mark.parametrize("script", GOOGLE_FLAGS)
def test_define_flags_has_googles_flags(script):
    flag_values = flags.FlagValues()
    _module(script).define_flags(flag_values)
    assert [name for name in GOOGLE_FLAGS[script] if name not in flag_values] == []


def _helpfull_flags(script: str) -> set[str]:
    """The flag names `--helpfull` lists under the script's own module."""
    result = subprocess.run(
        [sys.executable, "-m", f"bert_tf.{script}", "--helpfull"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=300,
    )
    assert "--helpfull" not in result.stderr, result.stderr[-2000:]
    names, in_script = set(), False
    for line in result.stdout.splitlines():
        if line and not line.startswith(" "):  # a module's heading
            in_script = line.endswith((f"/{script}.py:", f"bert_tf.{script}:"))
        elif in_script and line.startswith("  --"):
            names.add(line[4:].split(":", 1)[0].removeprefix("[no]"))
    return names


@pytest.mark.parametrize("script", GOOGLE_FLAGS)
def test_helpfull_lists_googles_flags_as_the_scripts_own(script):
    """Shared flags (bert_tf.flags_util) count as the script's: `--help` shows them too."""
    names = _helpfull_flags(script)
    assert [name for name in GOOGLE_FLAGS[script] if name not in names] == []


@pytest.mark.parametrize("script", TRAINING_SCRIPTS)
def test_old_spellings_are_aliases(script):
    args = _parse(script, "--tpu=grpc://10.0.0.2:8470", "--steps_per_loop=7")
    assert args.tpu_name == "grpc://10.0.0.2:8470"
    assert args.iterations_per_loop == 7


class _FakeTpu:
    """Stands in for TPUClusterResolver, the TPU system and TPUStrategy (no TPU here)."""

    def __init__(self, monkeypatch, num_cores: int = 8):
        import tensorflow as tf

        self.resolver_args = None
        fake = self

        class Resolver:
            def __init__(self, tpu=None, zone=None, project=None):
                fake.resolver_args = {"tpu": tpu, "zone": zone, "project": project}

        class Strategy:
            num_replicas_in_sync = num_cores

            def __init__(self, resolver):
                assert isinstance(resolver, Resolver)

        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", Resolver)
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: None)
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: None)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", Strategy)
        self.strategy_class = Strategy


@pytest.mark.parametrize("script", TRAINING_SCRIPTS)
def test_use_tpu_resolves_the_tpu_from_googles_flags(script, monkeypatch):
    tpu = _FakeTpu(monkeypatch)
    args = _parse(
        script, "--use_tpu=True", "--tpu_name=my-tpu", "--tpu_zone=us-central1-b", "--gcp_project=p"
    )
    assert isinstance(training.strategy_from_flags(args), tpu.strategy_class)
    assert tpu.resolver_args == {"tpu": "my-tpu", "zone": "us-central1-b", "project": "p"}
    # google's non-Cloud TPU: --master is the address when there is no --tpu_name.
    args = _parse(script, "--use_tpu", "--master=grpc://10.0.0.2:8470")
    training.strategy_from_flags(args)
    assert tpu.resolver_args["tpu"] == "grpc://10.0.0.2:8470"
    # --distribution_strategy=tpu is the same choice; --nouse_tpu changes nothing else.
    args = _parse(script, "--distribution_strategy=tpu", "--tpu=other")
    training.strategy_from_flags(args)
    assert tpu.resolver_args["tpu"] == "other"
    assert flags_util.strategy_name(_parse(script, "--nouse_tpu")) == "one_device"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--use_tpu", "--distribution_strategy=mirrored"], "--use_tpu conflicts with"),
        (["--nouse_tpu", "--distribution_strategy=tpu"], "--use_tpu=false conflicts with"),
    ],
)
def test_use_tpu_against_another_strategy_is_an_error(argv, message):
    with pytest.raises(ValueError, match=message):
        flags_util.strategy_name(_parse("run_classifier", *argv))


def test_num_tpu_cores_that_disagree_warn(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="absl")
    _FakeTpu(monkeypatch, num_cores=32)
    training.strategy_from_flags(_parse("run_pretraining", "--use_tpu"))
    assert "num_tpu_cores" not in caplog.text  # google's default 8, not given: no warning
    training.strategy_from_flags(_parse("run_pretraining", "--use_tpu", "--num_tpu_cores=8"))
    assert "--num_tpu_cores=8 but the TPU has 32 cores" in caplog.text


class _ResolverCalled(Exception):
    pass


def test_each_script_builds_its_strategy_from_use_tpu(
    monkeypatch, run_main, tmp_path, tiny_pretraining_data
):
    """The scripts themselves: --use_tpu reaches TPUClusterResolver with google's flags."""
    import tensorflow as tf

    def resolver(tpu=None, zone=None, project=None):
        raise _ResolverCalled(tpu, zone, project)

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    tpu = ["--use_tpu", "--tpu_name=t", "--tpu_zone=z", "--gcp_project=p"]
    data = tiny_pretraining_data()
    scripts = {
        "run_pretraining": data.argv(tmp_path / "pretraining"),
        "run_classifier": [
            "--task_name=MRPC",
            f"--data_dir={tmp_path}",
            f"--output_dir={tmp_path / 'classifier'}",
            "--do_train",
        ],
        "run_squad": [
            "--do_train",
            f"--train_file={TESTDATA / 'squad_v1.1.json'}",
            f"--output_dir={tmp_path / 'squad'}",
        ],
    }
    for script, argv in scripts.items():
        with pytest.raises(_ResolverCalled) as raised:
            run_main(_module(script), *argv, *tpu)
        assert raised.value.args == ("t", "z", "p"), script


def _google_learning_rate(step: int, init_lr: float, num_train_steps: int, warmup: int) -> float:
    """google-research/bert optimization.py: polynomial_decay(init_lr, step, num_train_steps,
    end_learning_rate=0, power=1), replaced by init_lr * step / warmup while step < warmup."""
    decayed = init_lr * (1 - min(step, num_train_steps) / num_train_steps)
    return init_lr * step / warmup if warmup and step < warmup else decayed


def test_schedule_with_warmup_longer_than_training_is_googles():
    from bert_tf.training.optimization import WarmupLinearDecay

    schedule = WarmupLinearDecay(1e-4, num_train_steps=50, num_warmup_steps=10000)
    for step in (0, 1, 25, 49, 50, 60):
        expected = _google_learning_rate(step, 1e-4, 50, 10000)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-12), step
    assert float(schedule(49)) == pytest.approx(1e-4 * 49 / 10000)  # still rising at the end


def test_run_pretraining_warmup_longer_than_training_warns_and_trains(
    tiny_pretraining_data, tmp_path, run_main, caplog
):
    """A smoke run with the default --num_warmup_steps=10000 trains (google's behaviour)."""
    from bert_tf import run_pretraining

    caplog.set_level(logging.WARNING, logger="absl")
    data = tiny_pretraining_data()
    argv = data.argv(
        tmp_path,
        num_train_steps=3,
        train_batch_size=4,
        learning_rate=1e-3,
        save_checkpoints_steps=3,
        iterations_per_loop=1,
        log_steps=1,
    )
    run_main(run_pretraining, *argv)  # --num_warmup_steps left at its default, 10000
    assert "--num_warmup_steps=10000 exceeds --num_train_steps=3" in caplog.text
    history = json.loads((tmp_path / "training_log.json").read_text())["history"]
    logged = {entry["step"]: entry["learning_rate"] for entry in history}
    expected = {step: _google_learning_rate(step, 1e-3, 3, 10000) for step in (1, 2, 3)}
    assert logged == pytest.approx(expected, rel=1e-5)


def test_verbose_logging_tells_why_an_answer_is_the_whole_text(caplog):
    """run_squad --verbose_logging: google's INFO lines when an answer cannot be mapped back."""
    from bert_tf.tasks import squad

    caplog.set_level(logging.INFO, logger="absl")
    assert squad.get_final_text("xyz", "John Smith", ["john", "smith"]) == "John Smith"
    assert "Unable to find text" not in caplog.text
    assert squad.get_final_text("xyz", "John Smith", ["john", "smith"], True) == "John Smith"
    assert "Unable to find text: 'xyz' in 'John Smith'" in caplog.text


@pytest.mark.parametrize("script", TRAINING_SCRIPTS)
def test_tpu_job_name_is_accepted_and_informational(script, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    args = _parse(script, "--tpu_job_name=tpu_worker")
    assert args.tpu_job_name == "tpu_worker"
    training.strategy_from_flags(args)  # no TPU: ignored, as google's TPU flags are
    assert "--tpu_job_name ignored: not running on a TPU" in caplog.text
    tpu = _FakeTpu(monkeypatch)
    training.strategy_from_flags(_parse(script, "--use_tpu", "--tpu_job_name=tpu_worker"))
    assert tpu.resolver_args == {"tpu": "", "zone": None, "project": None}
    assert "--tpu_job_name=tpu_worker ignored" in caplog.text


@pytest.mark.parametrize(
    "argv, tried",
    [
        (
            ["--use_tpu=True", "--tpu_name=x"],
            "looking up Cloud TPU 'x', its zone and project from the GCE metadata server",
        ),
        (
            ["--use_tpu", "--tpu_name=x", "--tpu_zone=z", "--gcp_project=p"],
            "looking up Cloud TPU 'x' in zone z of project p through the Cloud TPU API",
        ),
        (["--distribution_strategy=tpu", "--master=grpc://10.0.0.2:8470"], "connecting to"),
        (["--use_tpu"], "looking for a TPU attached to this machine"),
    ],
)
def test_a_tpu_that_cannot_be_found_is_one_line_naming_the_flags(monkeypatch, argv, tried):
    import socket
    import urllib.error

    import tensorflow as tf

    def resolver(tpu=None, zone=None, project=None):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    with pytest.raises(ValueError) as raised:
        training.strategy_from_flags(_parse("run_classifier", *argv))
    message = str(raised.value)
    assert message.startswith(" ".join(argv).replace("=True", "") + ": TPUClusterResolver failed")
    assert tried in message and "Name or service not known" in message
    assert "\n" not in message


def test_use_tpu_off_cloud_is_one_error_line():
    """The real TPUClusterResolver here (no TPU, not Google Cloud)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_tf.run_squad",
            "--do_predict",
            f"--predict_file={TESTDATA / 'squad_v1.1.json'}",
            "--output_dir=/tmp/unused",
            "--use_tpu=True",
            "--tpu_name=x",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --use_tpu --tpu_name=x: TPUClusterResolver failed looking up")
