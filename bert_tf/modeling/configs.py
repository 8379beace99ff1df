"""BERT hyper-parameters: google-research `bert_config.json` and HF `config.json` interop.

`BertConfig` holds exactly the fields of google-research/bert's `bert_config.json`, so a file
written here is read by the original `modeling.BertConfig.from_json_file` and vice versa.

Example:

```python
from bert_tf.modeling.configs import BertConfig

config = BertConfig.from_preset("tiny")  # L=2, H=128, A=2, FFN=512, vocab 30522
config.to_json_file("/tmp/bert_config.json")
assert BertConfig.from_json_file("/tmp/bert_config.json") == config
hf = config.to_hf_config()  # {"model_type": "bert", "layer_norm_eps": 1e-12, ...}
assert BertConfig.from_hf_config(hf) == config
```
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert_tf import fileio

# BERT's LayerNorm epsilon (google-research/bert and HF both use 1e-12); not a config field in the
# google format, so it is fixed here and checked when reading an HF config.
LAYER_NORM_EPSILON = 1e-12

# Activation names accepted in `hidden_act`: google-research names plus the HF and Keras aliases.
# "gelu" is the exact erf form (the 2018 checkpoints, HF, TF-Hub; also HF's "gelu_python").
# The tanh approximation is HF's "gelu_new"/"gelu_fast"/"gelu_pytorch_tanh", Keras'
# `gelu(approximate=True)` ("gelu_approximate"), "gelu_tanh"/"gelu_approx", and what
# google-research/bert's current `modeling.gelu` computes: a model trained with that code should
# say one of these names (its bert_config.json says "gelu"). Resolved in `bert_tf.modeling.layers`.
GELU_ERF_NAMES = ("gelu", "gelu_python")
GELU_TANH_NAMES = (
    "gelu_new",
    "gelu_tanh",
    "gelu_approximate",
    "gelu_approx",
    "gelu_fast",
    "gelu_pytorch_tanh",
)
ACTIVATIONS = (
    *GELU_ERF_NAMES,
    *GELU_TANH_NAMES,
    "relu",
    "tanh",
    "swish",
    "silu",
    "linear",
)


def canonical_activation(name: str) -> str:
    """One name per function: "gelu" (erf), "gelu_new" (tanh) or "silu" for their aliases."""
    if name in GELU_ERF_NAMES:
        return "gelu"
    if name in GELU_TANH_NAMES:
        return "gelu_new"
    return "silu" if name == "swish" else name


# Size presets of the BERT paper and Turc et al. 2019 ("Well-Read Students"): name -> (L, H).
# A = H / 64 attention heads and FFN = 4H, as in every released BERT.
PRESETS = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}

# Keys of google-research's multilingual/Chinese bert_config.json that the model never reads.
_GOOGLE_UNUSED_KEYS = {
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
}
# HF config.json keys that describe the same BERT but are not model hyper-parameters.
_HF_IGNORED_KEYS = _GOOGLE_UNUSED_KEYS | {
    "architectures",
    "model_type",
    "layer_norm_eps",
    "pad_token_id",
    "position_embedding_type",
    "transformers_version",
    "_name_or_path",
    "gradient_checkpointing",
    "use_cache",
    "classifier_dropout",
    "torch_dtype",
    "output_past",
    "id2label",
    "label2id",
    # Bookkeeping that `PretrainedConfig.save_pretrained` may write; none changes the encoder.
    "bos_token_id",
    "eos_token_id",
    "sep_token_id",
    "finetuning_task",
    "problem_type",
    "tokenizer_class",
    "output_hidden_states",
    "output_attentions",
    "return_dict",
    "tie_word_embeddings",
    "chunk_size_feed_forward",
    "torchscript",
    "task_specific_params",
    "num_labels",
}
# HF switches that turn BERT into a decoder: accepted only when off.
_HF_FALSE_KEYS = ("is_decoder", "add_cross_attention")


# Keys only an HF `config.json` has (google's bert_config.json has none of them).
_HF_MARKER_KEYS = ("model_type", "architectures", "layer_norm_eps", "transformers_version")


def is_hf_config(values: dict[str, Any]) -> bool:
    """True if a config dict is a Hugging Face `config.json` rather than google's format."""
    return any(key in values for key in _HF_MARKER_KEYS)


def _read_json_object(path: str | os.PathLike) -> dict[str, Any]:
    try:
        values = json.loads(fileio.read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; expected a JSON BERT config") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object of BERT config keys")
    return values


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of google-research `bert_config.json` (same names, same meaning).

    Args:
        vocab_size: WordPiece vocabulary size.
        hidden_size: H, width of every Transformer layer.
        num_hidden_layers: L, number of Transformer layers.
        num_attention_heads: A; must divide `hidden_size`.
        intermediate_size: width of the feed-forward layer (4H in released models).
        hidden_act: feed-forward activation, one of `ACTIVATIONS`.
        hidden_dropout_prob: dropout on embeddings and on every residual branch.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        max_position_embeddings: number of learned positions (longest sequence).
        type_vocab_size: number of segment ids (2 in every released checkpoint).
        initializer_range: stddev of the truncated-normal weight initializer.
    """

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first bad field and what was expected."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.num_attention_heads={self.num_attention_heads} must divide "
                f"hidden_size={self.hidden_size}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig.hidden_act={self.hidden_act!r} is not supported; "
                f"expected one of {', '.join(ACTIVATIONS)}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {value!r}")
        if (
            isinstance(self.initializer_range, bool)
            or not isinstance(self.initializer_range, (int, float))
            or self.initializer_range <= 0
        ):
            raise ValueError(
                f"BertConfig.initializer_range must be a positive number, "
                f"got {self.initializer_range!r}"
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> BertConfig:
        """Builds a config from google-format keys; unknown keys raise ValueError naming them."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in values.items() if k not in _GOOGLE_UNUSED_KEYS}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(
                f"{source}: unknown BERT config keys {unknown}; expected keys from {sorted(fields)}"
            )
        if "vocab_size" not in values:
            raise ValueError(f"{source}: missing required key 'vocab_size'")
        try:
            return cls(**values)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BertConfig:
        """Reads a google-research `bert_config.json` or a Hugging Face BERT `config.json`.

        The format is told by the keys (`is_hf_config`), not by the file name, so an HF
        `config.json` passed as `--bert_config_file` reads like one beside `--init_checkpoint`.
        """
        values = _read_json_object(path)
        if is_hf_config(values):
            return cls.from_hf_config(values, source=str(path))
        return cls.from_dict(values, source=str(path))

    def to_json_file(self, path: str | os.PathLike) -> None:
        """Writes google-research `bert_config.json` atomically (temp file, then rename)."""
        fileio.atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_hf_config(cls, values: dict[str, Any], source: str = "HF config") -> BertConfig:
        """Builds a config from a Hugging Face BERT `config.json` dict."""
        model_type = values.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(f"{source}: model_type must be 'bert', got {model_type!r}")
        eps = values.get("layer_norm_eps", LAYER_NORM_EPSILON)
        if eps != LAYER_NORM_EPSILON:
            raise ValueError(
                f"{source}: layer_norm_eps must be {LAYER_NORM_EPSILON} (BERT's), got {eps!r}"
            )
        position_type = values.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(
                f"{source}: position_embedding_type must be 'absolute', got {position_type!r}"
            )
        for key in _HF_FALSE_KEYS:
            if values.get(key):
                raise ValueError(f"{source}: {key}=true is a BERT decoder; expected an encoder")
        kept = {
            k: v for k, v in values.items() if k not in _HF_IGNORED_KEYS and k not in _HF_FALSE_KEYS
        }
        return cls.from_dict(kept, source=source)

    @classmethod
    def from_hf_json_file(cls, path: str | os.PathLike) -> BertConfig:
        """Reads a Hugging Face BERT `config.json`."""
        return cls.from_hf_config(_read_json_object(path), source=str(path))

    def to_hf_config(self) -> dict[str, Any]:
        """Returns a Hugging Face `BertModel` config.json dict."""
        return {
            **self.to_dict(),
            "architectures": ["BertModel"],
            "model_type": "bert",
            "layer_norm_eps": LAYER_NORM_EPSILON,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
        }

    @classmethod
    def from_preset(cls, name: str, vocab_size: int = 30522) -> BertConfig:
        """A paper-size config: tiny, mini, small, medium, base or large."""
        if name not in PRESETS:
            raise ValueError(f"unknown BERT preset {name!r}; expected one of {', '.join(PRESETS)}")
        layers, hidden = PRESETS[name]
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=hidden // 64,
            intermediate_size=4 * hidden,
        )
