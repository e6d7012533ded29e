"""The CosyVoice3 family: weights, voices, and its three stages (spec §9).

Fun-CosyVoice3-0.5B-2512: text ids -> Qwen2 LM -> 25 Hz speech tokens -> DiT flow -> 80-bin mel
at 50 fps -> causal HiFT -> 24 kHz mono. The stages (`stages.py`) are `frontend` (text ->
segments of text ids), `lm` (autoregressive, continuously batched) and `token2wav` (flow + HiFT,
streamed per hop, in order per request).

Random weights (`tiny_fixture`, `full_random`) give noise, never speech, and say so everywhere
(spec §9.4): a WARNING at load and per request, voice ids starting ``random-``,
`random_weights_note` (in `/v1/models`, the ``X-Voxflow-Weights`` response header and the
comment of a WAV written by ``voxflow speak``).
"""

from __future__ import annotations

import logging

import torch

from voxflow.models.base import ModelFamily, Voice
from voxflow.models.cosyvoice3.instruct import InstructPrompts, check_instruction
from voxflow.models.cosyvoice3.settings import CosyVoice3Settings
from voxflow.models.cosyvoice3.stages import (
    CosyVoice3FrontendStage,
    CosyVoice3LMStage,
    CosyVoice3Token2WavStage,
)
from voxflow.models.cosyvoice3.text import CosyVoice3Tokenizer, default_tokenizer
from voxflow.models.cosyvoice3.token2wav import FlowPrompt
from voxflow.models.cosyvoice3.voice_admin import SavedVoices
from voxflow.models.cosyvoice3.voices import Voice as CosyVoice
from voxflow.models.cosyvoice3.voices import (
    VoiceError,
    load_voices_dir,
    tiny_voice,
)
from voxflow.models.cosyvoice3.voices import voice_id as served_voice_id
from voxflow.models.cosyvoice3.weights import SAMPLE_RATE, Models, fixtures_dir, load_models
from voxflow.stages.stage import Stage

log = logging.getLogger(__name__)

LANGUAGES = ("zh", "en", "ja", "ko", "de", "es", "fr", "it", "ru")
"""The languages Fun-CosyVoice3 is published for; every voice may read each of them."""


class CosyVoice3Family(SavedVoices, ModelFamily):
    """CosyVoice3 with the weights and voices of its settings (see the module docstring).

    Raises (at construction):
        FileNotFoundError, loader.StateDictError: weights missing or not matching the modules.
        VoiceError: an invalid voice file (names the file and the key), built-in or saved.
        ValueError: no voice, or `default_voice` not among them.

    Voices created through ``POST /v1/audio/voices`` are saved in `saved_voices_dir` and served
    with the built-in ones (`voice_admin.SavedVoices`).
    """

    family = "cosyvoice3"
    warmup_text = "Hello."
    follows_instructions = True  # the instruct prompt (instruct.py; spec addendum §2)
    streams_text_in = True  # one bistream generation per fed request (lm_stream.py)
    settings: CosyVoice3Settings

    def __init__(self, name: str, settings: CosyVoice3Settings):
        super().__init__(name, settings)
        if settings.require_graphs and not torch.cuda.is_available():
            raise ValueError(f"model {name}: require_graphs is set, but CUDA is not available "
                             "(the flow's graphs cannot be captured)")
        self.models: Models = load_models(settings)
        self.tokenizer: CosyVoice3Tokenizer = default_tokenizer()
        self.instruct_prompts = InstructPrompts(self.tokenizer)
        self._init_saved_voices()
        self.voice_models: dict[str, CosyVoice] = self._load_voices()
        self._prompts: dict[str, FlowPrompt] = {
            vid: voice.flow_prompt(self.models.device) for vid, voice in self.voice_models.items()
        }
        voices = {vid: Voice(vid, v.language, SAMPLE_RATE, self.family)
                  for vid, v in self.voice_models.items()}
        default = settings.default_voice or next(iter(voices), "")
        self.set_voices(voices, default)
        note = self.random_weights_note()
        if note is not None:
            log.warning("model %s: weights are %s (voices %s)", name, note, ", ".join(voices))

    def _load_voices(self) -> dict[str, CosyVoice]:
        s = self.settings
        random = self.models.random_note is not None
        size = self.models.lm.speech_token_size
        voices: dict[str, CosyVoice] = {}
        if random:  # the fixture voice: random prompt features, served only with random weights
            tiny = tiny_voice(fixtures_dir(s))
            voices[served_voice_id(tiny.name, True)] = tiny
        if s.voices_dir is not None:
            voices.update(load_voices_dir(s.voices_dir, speech_token_size=size,
                                          random_weights=random))
        voices.update(self._read_saved_voices(voices))
        if not voices:
            raise VoiceError(f"model {self.name}: no voices (set voices_dir to a folder of "
                             "NAME.safetensors voice files)")
        return voices

    def check_instructions(self, instructions: str) -> None:
        """`instruct.check_instruction` against `max_instruction_chars` (a 400 naming why)."""
        check_instruction(instructions, self.settings.max_instruction_chars)

    def flow_prompt(self, voice_id: str) -> FlowPrompt:
        """The flow's share of a served voice, on the models' device (built once at load)."""
        return self._prompts[voice_id]

    def flow_cache(self, fed: bool) -> bool:
        """Whether a streamed segment caches its settled flow frames (`flow_settled_cache`):
        `fed` says whether it is one generation fed with streamed text."""
        chosen = self.settings.flow_settled_cache
        if chosen == "auto":
            chosen = "fed" if self.models.device.type == "cpu" else "off"
        return chosen == "all" or (chosen == "fed" and fed)

    def random_weights_note(self) -> str | None:
        return self.models.random_note

    def languages(self, voice_id: str) -> tuple[str, ...]:
        """The voice's own language, then every language CosyVoice3 reads."""
        own = self.voices[voice_id].language
        return (own, *(lang for lang in LANGUAGES if lang != own))

    def stages(self) -> list[Stage]:
        return [CosyVoice3FrontendStage(self), CosyVoice3LMStage(self),
                CosyVoice3Token2WavStage(self)]

    def details(self) -> dict:
        s, m = self.settings, self.models
        return {
            "weights": m.random_note or f"checkpoint {m.source}",
            "device": str(m.device),
            "token2wav_mode": s.token2wav_mode,
            "flow_settled_cache": s.flow_settled_cache,
            "estimator_dtype": s.estimator_dtype,
            "token_hops": [m.hops.token_hop_len, m.hops.token_max_hop_len],
            "lm_max_batch_size": s.lm_max_batch_size,
            "min_len_rule": s.min_len_rule,
            "saved_voices_dir": str(self.saved_dir),
        }
