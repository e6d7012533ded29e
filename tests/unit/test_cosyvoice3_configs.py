"""The shipped CosyVoice3 configs load and validate (without loading any weights): the
full-size config's `weights` is the one setting for the checkpoint directory, `full_random`
for timing, and the issue's other spellings are refused with a message, never read silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxflow.config import ConfigError, load_settings
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _options(path: Path, overrides: dict | None = None) -> CosyVoice3Settings:
    settings = load_settings(path, overrides)
    (model,) = settings.models
    assert model.family == "cosyvoice3" and model.name == "cosyvoice3"
    assert isinstance(model.options, CosyVoice3Settings)
    return model.options


def test_the_full_size_config_validates_with_random_weights_on_cuda():
    options = _options(CONFIGS / "cosyvoice3.yaml")
    assert options.weights == "full_random" and options.random_weights
    assert options.device == "cuda"
    assert (options.static_chunk_size, options.hop_len, options.max_hop_len) == (50, 25, 100)
    assert options.capture_enabled and options.flow_max_batch_size == 8
    assert options.token2wav_mode == "streaming"


def test_the_full_size_config_takes_a_checkpoint_directory_as_weights(tmp_path):
    for name in ("llm.pt", "flow.pt", "hift.pt"):
        (tmp_path / name).write_bytes(b"")
    options = _options(CONFIGS / "cosyvoice3.yaml",
                       {"models.0.options.weights": str(tmp_path)})
    assert options.weights == tmp_path and not options.random_weights
    assert options.hop_len == 25


@pytest.mark.parametrize(("key", "value", "message"), [
    ("weights", "random", 'weights: "random" is neither "tiny_fixture", "full_random"'),
    ("model_dir", "/nowhere", "model_dir"),  # one way only: `weights`
])
def test_other_spellings_are_refused_naming_the_field(key, value, message):
    with pytest.raises(ConfigError) as info:
        load_settings(CONFIGS / "cosyvoice3.yaml", {f"models.0.options.{key}": value})
    assert message in str(info.value) and "models[0].options" in str(info.value)


def test_the_tiny_config_validates():
    options = _options(CONFIGS / "cosyvoice3-tiny.yaml")
    assert options.weights == "tiny_fixture" and options.device == "cpu"
