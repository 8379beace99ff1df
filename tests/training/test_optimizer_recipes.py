"""create_optimizer's options where google-research's recipe (the defaults) and HF's differ:
epsilon's place (Keras' vs torch's), bias correction (google-research's Adam has none), the
decay after warmup (google's 1 - step/T vs HF's (T - step)/(T - warmup)) and the weight-decay
exclusions; each checked against the formula it names, in numpy."""

import keras
import numpy as np
import pytest

from bert_tf.training import optimization
from bert_tf.training.optimization import BertAdamW, WarmupLinearDecay, create_optimizer

LR, WD, EPS, B1, B2 = 1e-3, 0.01, 1e-6, 0.9, 0.999
STEPS = 5


def _gradients(shape=(4, 3)):
    rng = np.random.default_rng(0)
    # Small gradients: where epsilon's place matters.
    return [
        (rng.normal(size=shape) * 10.0 ** rng.uniform(-7, -3, size=shape)).astype("float32")
        for _ in range(STEPS)
    ]


def _numpy_adamw(start, gradients, *, torch_epsilon: bool, bias_correction: bool = True):
    p, m, v = start.astype(np.float64), 0.0, 0.0
    for t, g in enumerate(gradients, 1):
        p = p - LR * WD * p
        m = B1 * m + (1 - B1) * g
        v = B2 * v + (1 - B2) * g * g
        bc1, bc2 = 1 - B1**t, 1 - B2**t
        if not bias_correction:
            p = p - LR * m / (np.sqrt(v) + EPS)
        elif torch_epsilon:  # torch.optim.AdamW
            p = p - LR / bc1 * m / (np.sqrt(v) / np.sqrt(bc2) + EPS)
        else:  # Keras: epsilon hat
            p = p - LR * np.sqrt(bc2) / bc1 * m / (np.sqrt(v) + EPS)
    return p


def _run(optimizer, start, gradients):
    variable = keras.Variable(start, name="kernel")
    for g in gradients:
        optimizer.apply([g], [variable])
    return variable.numpy()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"epsilon_after_bias_correction": True},
        {"bias_correction": False},
    ],
)
def test_adamw_updates_follow_their_formulas(options):
    start = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    gradients = _gradients()
    optimizer = BertAdamW(learning_rate=LR, weight_decay=WD, epsilon=EPS, **options)
    expected = _numpy_adamw(
        start,
        gradients,
        torch_epsilon=options.get("epsilon_after_bias_correction", False),
        bias_correction=options.get("bias_correction", True),
    )
    np.testing.assert_allclose(_run(optimizer, start, gradients), expected, rtol=2e-6, atol=1e-9)


def test_defaults_are_keras_adamw_bit_for_bit_and_the_options_matter():
    start = np.random.default_rng(2).normal(size=(4, 3)).astype("float32")
    gradients = _gradients()
    kwargs = {"learning_rate": LR, "weight_decay": WD, "epsilon": EPS}
    ours = _run(BertAdamW(**kwargs), start, gradients)
    np.testing.assert_array_equal(ours, _run(keras.optimizers.AdamW(**kwargs), start, gradients))
    torch_like = _run(BertAdamW(**kwargs, epsilon_after_bias_correction=True), start, gradients)
    assert np.abs(torch_like - ours).max() > 1e-5


def test_hf_schedule_decays_from_the_warmup_peak():
    hf = WarmupLinearDecay(
        1e-4, num_train_steps=100, num_warmup_steps=10, decay_from_warmup_end=True
    )
    # transformers.get_linear_schedule_with_warmup: lr * (T - step) / (T - warmup) after warmup.
    expected = {0: 0.0, 5: 5e-5, 9: 9e-5, 10: 1e-4, 55: 5e-5, 99: 1e-4 / 90, 100: 0.0, 150: 0.0}
    for step, value in expected.items():
        assert float(hf(step)) == pytest.approx(value, rel=1e-5, abs=1e-12), step
    google = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
    assert float(google(10)) == pytest.approx(9e-5, rel=1e-5)
    assert float(google(99)) == pytest.approx(1e-6, rel=1e-5)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(hf))
    assert clone.get_config() == hf.get_config() and clone.decay_from_warmup_end
    no_warmup = WarmupLinearDecay(2e-5, num_train_steps=4, decay_from_warmup_end=True)
    assert [float(no_warmup(s)) for s in range(5)] == pytest.approx([2e-5, 1.5e-5, 1e-5, 5e-6, 0])


def test_create_optimizer_options():
    default = create_optimizer(1e-4, 10, 1)
    assert isinstance(default, BertAdamW) and isinstance(default, keras.optimizers.AdamW)
    assert (default.epsilon, default.bias_correction) == (1e-6, True)
    assert not default.epsilon_after_bias_correction
    hf = create_optimizer(
        1e-4,
        10,
        1,
        epsilon=1e-8,
        decay_from_warmup_end=True,
        epsilon_after_bias_correction=True,
    )
    assert (hf.epsilon, hf.epsilon_after_bias_correction) == (1e-8, True)
    assert float(hf.learning_rate) == 0.0
    config = hf.get_config()
    assert config["epsilon_after_bias_correction"] and config["bias_correction"]
    assert config["learning_rate"]["config"]["decay_from_warmup_end"]
    clone = BertAdamW.from_config(config)
    assert clone.epsilon_after_bias_correction and clone.epsilon == 1e-8
    with pytest.raises(ValueError, match="AdamW options"):
        create_optimizer(1e-4, 10, 1, optimizer_type="lamb", bias_correction=False)


def test_optimizer_recipe_flag_reaches_the_trainers_optimizer(tmp_path):
    from absl import flags

    from bert_tf import options, training
    from bert_tf.modeling.configs import BertConfig
    from bert_tf.modeling.encoder import build_encoder
    from bert_tf.modeling.models import BertClassifier

    flag_values = flags.FlagValues()
    options.define_flags(options.TrainingLoopOptions, flag_values)
    assert flag_values["optimizer_recipe"].parser.enum_values == list(optimization.RECIPES)
    made = {}
    for argv in ([], ["--optimizer_recipe=hf"], ["--optimizer_recipe=hf", "--optimizer=lamb"]):
        flag_values.unparse_flags()
        flag_values(["prog", *argv])
        loop = options.from_flags(options.TrainingLoopOptions, flag_values)
        strategy = training.get_strategy("one_device")
        with strategy.scope():
            model = BertClassifier(build_encoder(BertConfig.from_preset("tiny")), num_classes=2)
        trainer = training.make_trainer(
            model,
            None,
            str(tmp_path),
            strategy,
            loop,
            num_train_steps=10,
            num_warmup_steps=2,
            steps_per_loop=1,
        )
        made[" ".join(argv)] = trainer.optimizer
    google, hf, hf_lamb = made.values()
    assert isinstance(google, BertAdamW) and google.epsilon == 1e-6
    assert not google.epsilon_after_bias_correction
    assert isinstance(hf, BertAdamW) and hf.epsilon == 1e-8 and hf.epsilon_after_bias_correction
    assert isinstance(hf_lamb, optimization.BertLamb) and hf_lamb.epsilon == 1e-8
    schedules = {
        name: WarmupLinearDecay.from_config(o.get_config()["learning_rate"]["config"])
        for name, o in (("google", google), ("hf", hf), ("hf_lamb", hf_lamb))
    }
    # HF's schedule is at its peak right after warmup, google's at 1 - 2/10 of it.
    assert [float(s(2)) for s in schedules.values()] == pytest.approx([4e-5, 5e-5, 5e-5])
    with pytest.raises(ValueError, match="recipe must be one of"):
        optimization.recipe_options("torch")


def test_weight_decay_exclusions_can_be_dropped():
    bias = keras.Variable(np.ones(3, "float32"), name="bias")
    kernel = keras.Variable(np.ones(3, "float32"), name="kernel")
    for exclusions, bias_decayed in (((), True), (("bias",), False)):
        bias.assign(np.ones(3, "float32"))
        kernel.assign(np.ones(3, "float32"))
        optimizer = create_optimizer(
            0.1, num_train_steps=10, num_warmup_steps=0, weight_decay_exclusions=exclusions
        )
        optimizer.apply([np.zeros(3, "float32")] * 2, [bias, kernel])
        assert not np.array_equal(kernel.numpy(), np.ones(3))
        assert (not np.array_equal(bias.numpy(), np.ones(3))) == bias_decayed


@pytest.mark.parametrize("optimizer_type", ["adamw", "lamb"])
@pytest.mark.parametrize("clipnorm", [1.0, None])
def test_embedding_gradients_with_repeated_ids_count_as_their_sum(optimizer_type, clipnorm):
    # An embedding lookup's gradient: a slice per looked-up id, id 1 three times. The gradient
    # is their sum, row 1 = (3, 0), norm 5 with the dense (0, 4); Keras alone would clip by
    # sqrt(3 + 16) and put 3 instead of 9 into Adam's second moment. Ours: as the dense sum.
    import tensorflow as tf

    slices = tf.IndexedSlices(
        tf.constant([[1.0, 0.0]] * 3), tf.constant([1, 1, 1]), tf.constant([4, 2])
    )
    dense = tf.constant([0.0, 4.0])
    results = []
    for gradient in (slices, tf.convert_to_tensor(slices)):
        optimizer = create_optimizer(
            1e-2, 10, 0, optimizer_type, weight_decay=0.0, global_clipnorm=clipnorm
        )
        clipped = optimizer._clip_gradients([gradient, dense])
        assert not isinstance(clipped[0], tf.IndexedSlices)
        norm = float(tf.linalg.global_norm(clipped))
        assert norm == pytest.approx(1.0 if clipnorm else 5.0, rel=1e-6)
        table = keras.Variable(np.ones((4, 2), "float32"), name="embeddings")
        other = keras.Variable(np.ones(2, "float32"), name="kernel")
        for _ in range(3):
            optimizer.apply([gradient, dense], [table, other])
        results.append((table.numpy(), other.numpy()))
    for sparse, summed in zip(*results, strict=True):
        np.testing.assert_array_equal(sparse, summed)
