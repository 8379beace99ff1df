"""BertConfig: google JSON and HF config round trips, presets, validation errors."""

import dataclasses
import json

import pytest

from bert_tf.modeling.configs import PRESETS, BertConfig, canonical_activation

pytestmark = pytest.mark.fast  # `make check` and CI's Bazel pass (tests/BUILD's fast)

GOOGLE_KEYS = {
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
}


def test_json_round_trip_writes_google_keys(tmp_path):
    config = BertConfig(vocab_size=100, hidden_size=64, num_attention_heads=4, hidden_act="relu")
    path = tmp_path / "bert_config.json"
    config.to_json_file(path)
    assert set(json.loads(path.read_text())) == GOOGLE_KEYS
    assert BertConfig.from_json_file(path) == config
    assert [p.name for p in tmp_path.iterdir()] == ["bert_config.json"]  # no temp file left


def test_hf_round_trip_and_minilm_config(minilm_dir):
    config = BertConfig.from_hf_json_file(minilm_dir / "config.json")
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        6,
        384,
        12,
    )
    assert config.vocab_size == 30522 and config.hidden_act == "gelu"
    hf = config.to_hf_config()
    assert hf["model_type"] == "bert" and hf["layer_norm_eps"] == 1e-12
    assert BertConfig.from_hf_config(hf) == config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_follow_the_paper_shapes(name):
    config = BertConfig.from_preset(name, vocab_size=1000)
    layers, hidden = PRESETS[name]
    assert config.num_hidden_layers == layers and config.hidden_size == hidden
    assert config.num_attention_heads * 64 == hidden
    assert config.intermediate_size == 4 * hidden and config.vocab_size == 1000


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"num_attention_heads": 5}, "num_attention_heads"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"vocab_size": 1.5}, "vocab_size"),
        ({"hidden_act": "gelu_erf"}, "hidden_act"),
        ({"hidden_dropout_prob": 1.0}, "hidden_dropout_prob"),
        ({"attention_probs_dropout_prob": -0.1}, "attention_probs_dropout_prob"),
        ({"initializer_range": 0}, "initializer_range"),
    ],
)
def test_validation_names_the_field(changes, field):
    base = dataclasses.asdict(BertConfig(vocab_size=10, hidden_size=64, num_attention_heads=4))
    with pytest.raises(ValueError, match=field):
        BertConfig(**{**base, **changes})


def test_unknown_json_key_names_file_and_key(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({"vocab_size": 10, "hiden_size": 64}))
    with pytest.raises(ValueError, match=r"bert_config\.json.*hiden_size"):
        BertConfig.from_json_file(path)


def test_google_chinese_config_extra_keys_are_accepted(tmp_path):
    # google-research's chinese_L-12_H-768_A-12/bert_config.json carries unused pooler keys.
    values = {**BertConfig(vocab_size=21128).to_dict(), "directionality": "bidi"}
    values.update(pooler_fc_size=768, pooler_type="first_token_transform")
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    assert BertConfig.from_json_file(path) == BertConfig(vocab_size=21128)


def test_bad_json_value_names_file(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"vocab_size": 10, "hidden_act": "mish"}))
    with pytest.raises(ValueError, match=r"cfg\.json.*hidden_act"):
        BertConfig.from_json_file(path)


def test_hf_config_rejects_other_layer_norm_eps_and_model_type():
    hf = BertConfig(vocab_size=10, hidden_size=64, num_attention_heads=4).to_hf_config()
    with pytest.raises(ValueError, match="layer_norm_eps"):
        BertConfig.from_hf_config({**hf, "layer_norm_eps": 1e-5})
    with pytest.raises(ValueError, match="model_type"):
        BertConfig.from_hf_config({**hf, "model_type": "roberta"})


def test_unknown_preset():
    with pytest.raises(ValueError, match="huge"):
        BertConfig.from_preset("huge")


def test_hf_config_json_given_as_bert_config_file_is_read_as_hf(minilm_dir, tmp_path):
    # Regression: a real HF config.json passed where google's bert_config.json is expected was
    # rejected ("unknown BERT config keys ['_name_or_path', 'architectures', ...]").
    hf_file = minilm_dir / "config.json"
    assert BertConfig.from_json_file(hf_file) == BertConfig.from_hf_json_file(hf_file)
    # Told by the keys, not the file name, and an HF-only key alone is enough.
    google = BertConfig(vocab_size=10, hidden_size=64, num_attention_heads=4).to_dict()
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**google, "layer_norm_eps": 1e-12}))
    assert BertConfig.from_json_file(path) == BertConfig(**google)
    # A genuinely unknown key still fails clearly in either format.
    path.write_text(json.dumps({**google, "model_type": "bert", "num_experts": 8}))
    with pytest.raises(ValueError, match=r"bert_config\.json.*num_experts"):
        BertConfig.from_json_file(path)


def test_hf_config_with_decoder_switches_is_refused(tmp_path):
    hf = BertConfig(vocab_size=10, hidden_size=64, num_attention_heads=4).to_hf_config()
    # Bookkeeping keys HF writes are accepted ...
    extras = {"bos_token_id": 0, "problem_type": "single_label_classification", "is_decoder": False}
    assert BertConfig.from_hf_config({**hf, **extras}).vocab_size == 10
    # ... but a decoder/cross-attention BERT is another architecture.
    for key in ("is_decoder", "add_cross_attention"):
        with pytest.raises(ValueError, match=key):
            BertConfig.from_hf_config({**hf, key: True})


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("gelu", "gelu"),
        ("gelu_python", "gelu"),
        ("gelu_new", "gelu_new"),
        ("gelu_tanh", "gelu_new"),
        ("gelu_approximate", "gelu_new"),
        ("gelu_pytorch_tanh", "gelu_new"),
        ("swish", "silu"),
    ],
)
def test_activation_aliases_are_accepted(alias, canonical):
    config = BertConfig(vocab_size=10, hidden_size=64, num_attention_heads=4, hidden_act=alias)
    assert canonical_activation(config.hidden_act) == canonical
