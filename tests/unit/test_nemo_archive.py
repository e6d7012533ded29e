"""``.nemo`` archives (`voxflow.models.nemo_archive`): tiny archives built here, a MagpieTTS one
(the family's tiny random model, cfg and weights) and a NanoCodec one (the NeMo-made tiny
decoder under ``audio_decoder.`` with FSQ buffers and encoder keys to skip, gzip-compressed),
read back into models that compute exactly what the originals compute; broken archives raise
`NemoArchiveError` naming the member."""

from __future__ import annotations

import dataclasses
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from magpie_fixtures import one_torch_thread  # noqa: E402,F401 (autouse fixture)
from nanocodec_fixtures import tensors as codec_tensors  # noqa: E402

from voxflow.models.magpie.config import MagpieConfig, checkpoint_sizes  # noqa: E402
from voxflow.models.magpie.family import MagpieFamily  # noqa: E402
from voxflow.models.magpie.generate import DecodeOptions, generate  # noqa: E402
from voxflow.models.magpie.loader import load_model  # noqa: E402
from voxflow.models.magpie.settings import MagpieSettings  # noqa: E402
from voxflow.models.magpie.stages import TextSegment  # noqa: E402
from voxflow.models.magpie.weights import tiny_config, tiny_random_state_dict  # noqa: E402
from voxflow.models.nanocodec.config import DecoderConfig  # noqa: E402
from voxflow.models.nanocodec.fsq import fsq_decode  # noqa: E402
from voxflow.models.nanocodec.loader import load_decoder, split_checkpoint  # noqa: E402
from voxflow.models.nanocodec.stream import decode  # noqa: E402
from voxflow.models.nemo_archive import (  # noqa: E402
    NemoArchiveError,
    nanocodec_config,
    read_nemo,
)
from voxflow.stages.items import RequestInfo, StageBatch, StageItem  # noqa: E402


class _NotAWeight:
    """Pickled into a checkpoint: `weights_only` loading must refuse it."""


def _save(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _archive(path: Path, members: dict[str, bytes], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _magpie_cfg(config: MagpieConfig) -> dict:
    """A NeMo-style cfg for `config` (what ``model_config.yaml`` would hold)."""
    params = dataclasses.asdict(config.inference)
    for key in ("estimate_alignment_from_layers", "apply_prior_to_layers"):
        params[key] = list(params[key])
    return {
        "model_type": "decoder_ce", "embedding_dim": config.d_model,
        "frame_stacking_factor": config.frame_stacking,
        "local_transformer_type": "autoregressive",
        "local_transformer_n_layers": config.lt_layers,
        "local_transformer_n_heads": config.lt_heads,
        "local_transformer_hidden_dim": config.lt_hidden,
        "encoder": dataclasses.asdict(config.encoder),
        "decoder": dataclasses.asdict(config.decoder),
        "inference_parameters": params,
    }


def test_a_magpie_archive_loads_into_the_same_model(tmp_path):
    config = tiny_config(MagpieSettings(greedy=True, max_frames=12))
    state = tiny_random_state_dict(config, seed=3)
    path = _archive(tmp_path / "magpie.nemo", {
        "./model_config.yaml": yaml.safe_dump(_magpie_cfg(config)).encode(),
        "./model_weights.ckpt": _save(state),
        "./tokenizer.json": b"{}",  # other artifacts are ignored
    })
    archive = read_nemo(path)
    read_config = MagpieConfig.from_nemo(archive.config, num_codebooks=8, codebook_size=2016,
                                         **checkpoint_sizes(archive.state_dict))
    assert read_config == config
    model = load_model(archive.state_dict, read_config)
    original = load_model(state, config)
    text = torch.tensor([[1, 5, 7, 2, 19]])
    args = (text, torch.tensor([5]), torch.tensor([1]), DecodeOptions(greedy=True))
    assert torch.equal(generate(model, *args).codes, generate(original, *args).codes)


def _codec_archive(path: Path) -> Path:
    """The NeMo-made tiny decoder as a NanoCodec ``.nemo`` (gzip, weights wrapped)."""
    module_state = codec_tensors("tiny_decoder_state_dict.safetensors")
    checkpoint = {f"audio_decoder.{k}": v for k, v in module_state.items()}
    for g in range(8):
        checkpoint[f"vector_quantizer.fsqs.{g}.dim_base_index"] = torch.tensor(
            [1, 8, 56, 336], dtype=torch.int32).reshape(1, 4, 1)
        checkpoint[f"vector_quantizer.fsqs.{g}.num_levels"] = torch.tensor(
            [8, 7, 6, 6], dtype=torch.int32).reshape(1, 4, 1)
    checkpoint["audio_encoder.pre_conv.bias"] = torch.zeros(3)  # skipped
    cfg = {"sample_rate": 22050, "audio_decoder": {
        "_target_": "nemo.collections.tts.modules.audio_codec_modules.CausalHiFiGANDecoder",
        "up_sample_rates": [8, 3, 2, 2], "base_channels": 80, "input_dim": 32,
        "activation": "half_snake", "output_activation": "clamp"}}
    return _archive(path, {
        "model_config.yaml": yaml.safe_dump(cfg).encode(),
        "model_weights.ckpt": _save({"state_dict": checkpoint}),  # wrapped: unwrapped on read
    }, mode="w:gz")


def test_a_nanocodec_archive_loads_the_decoder_and_checks_its_quantizer(tmp_path):
    module_state = codec_tensors("tiny_decoder_state_dict.safetensors")
    archive = read_nemo(_codec_archive(tmp_path / "codec.nemo"))
    config = DecoderConfig.from_dict(nanocodec_config(archive.config))
    assert config == DecoderConfig.tiny()
    decoder_state, quantizer = split_checkpoint(archive.state_dict)
    assert len(decoder_state) == 311 and len(quantizer) == 16
    decoder = load_decoder(decoder_state, config)
    reference = load_decoder(module_state, DecoderConfig.tiny())
    latent = fsq_decode(torch.randint(0, 2016, (1, 8, 5), generator=torch.Generator()
                                      .manual_seed(0)))
    assert torch.equal(decode(decoder, latent), decode(reference, latent))


def test_broken_archives_are_named(tmp_path):
    good_yaml, good_ckpt = b"model_type: decoder_ce\n", _save({"w": torch.zeros(1)})
    cases = {
        "no weights": ({"model_config.yaml": good_yaml}, "holds no model_weights.ckpt"),
        "no config": ({"model_weights.ckpt": good_ckpt}, "holds no model_config.yaml"),
        "list config": ({"model_config.yaml": b"- 1\n", "model_weights.ckpt": good_ckpt},
                        "model_config.yaml is not a mapping"),
        "not weights": ({"model_config.yaml": good_yaml, "model_weights.ckpt": _save([1, 2])},
                        "not a state dict"),
        "code": ({"model_config.yaml": good_yaml,
                  "model_weights.ckpt": _save({"w": _NotAWeight()})}, "cannot be loaded"),
    }
    for name, (members, message) in cases.items():
        with pytest.raises(NemoArchiveError, match=message):
            read_nemo(_archive(tmp_path / f"{name}.nemo", members))
    (tmp_path / "plain.nemo").write_bytes(b"not a tar at all" * 64)
    with pytest.raises(NemoArchiveError, match="not a .nemo"):
        read_nemo(tmp_path / "plain.nemo")
    with pytest.raises(FileNotFoundError):
        read_nemo(tmp_path / "absent.nemo")
    with pytest.raises(NemoArchiveError, match="audio_decoder"):
        nanocodec_config({"sample_rate": 22050})


def test_the_magpie_family_serves_a_codec_archive(tmp_path):
    path = _codec_archive(tmp_path / "codec.nemo")
    with pytest.raises(ValueError, match="neither"):
        MagpieSettings(codec_weights=tmp_path / "absent.nemo")

    def render(codec_weights) -> tuple[str, bytes]:
        family = MagpieFamily("magpie", MagpieSettings(codec_weights=codec_weights,
                                                       greedy=True, max_frames=8))
        frontend, acoustic, codec = family.stages()
        info = RequestInfo("r", "magpie", "random-0", "en", 0, True)
        item = StageItem(info, 0, TextSegment("Hi.", family.tokenizer.encode("Hi.")))
        state = acoustic.open_state(item)
        codes = []
        step = 0
        while True:
            result = acoustic.step(StageBatch.of([item], step=(step,)), [state])[0]
            step += 1
            if result.emit is not None:
                codes.append(result.emit)
            if result.done:
                break
        acoustic.close_state(state)
        part = StageItem(info, 0, np.concatenate(codes, axis=1), final=True)
        audio = codec.run(StageBatch.of([part]))[0]
        codec.close()
        return family.random_weights_note(), audio.samples.tobytes()

    note, from_archive = render(path)
    assert note == "random (tiny_random acoustic, codec.nemo codec): output is noise, not speech"
    assert len(from_archive) == 8 * 96 * 4
    assert from_archive == render("tiny_fixture")[1]  # the same decoder, the same bytes
