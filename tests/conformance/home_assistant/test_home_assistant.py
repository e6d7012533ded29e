"""Home Assistant's own Wyoming integration (``homeassistant.components.wyoming``, the
version pinned in requirements-homeassistant.txt) set up against voxflow's Wyoming listener as
a user adds it (host and port), through `pytest-homeassistant-custom-component`'s test
instance: the config entry loads, one ``tts`` entity with voxflow's voices, and speech from
Piper and Kokoro voices as the WAV Home Assistant builds. `VOXFLOW_WYOMING_PORT` names the
port (run.py sets it)."""

from __future__ import annotations

import io
import os
import wave

import pytest
from homeassistant.components import tts
from homeassistant.config_entries import ConfigEntryState
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

TEXT = "The little red kite circled twice above the harbor."


@pytest.fixture
async def voxflow_tts(hass, socket_enabled):
    """The tts entity Home Assistant made for voxflow's Wyoming server."""
    assert await async_setup_component(hass, "homeassistant", {})
    entry = MockConfigEntry(domain="wyoming", data={
        "host": "127.0.0.1", "port": int(os.environ["VOXFLOW_WYOMING_PORT"])})
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    (state,) = hass.states.async_all("tts")
    assert state.entity_id == "tts.voxflow"  # named after the program in voxflow's info
    return hass.data[tts.DATA_COMPONENT].get_entity(state.entity_id)


async def test_home_assistant_lists_voxflows_voices_by_language(voxflow_tts):
    assert "en_US" in voxflow_tts.supported_languages
    english = {v.voice_id for v in voxflow_tts.async_get_supported_voices("en_US")}
    assert {"joe", "jm_kumo"} <= english  # Kokoro's voices read English too
    japanese = {v.voice_id for v in voxflow_tts.async_get_supported_voices("ja")}
    assert "jm_kumo" in japanese and "joe" not in japanese


@pytest.mark.parametrize(("voice", "rate"), [("joe", 22050), ("jm_kumo", 24000)])
async def test_home_assistant_speaks_through_voxflow(voxflow_tts, voice, rate):
    extension, data = await voxflow_tts.async_get_tts_audio(TEXT, "en_US", {tts.ATTR_VOICE: voice})
    assert extension == "wav"
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (rate, 2, 1)
        seconds = w.getnframes() / rate
    assert 2.0 < seconds < 6.0, seconds  # the whole sentence, spoken once
