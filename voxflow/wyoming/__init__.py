"""Home Assistant's Wyoming protocol: a TCP speech server inside `voxflow serve`.

Wyoming (OHF-Voice/wyoming) is how Home Assistant's Assist reaches local speech engines: JSON
header lines with optional data and PCM payloads over TCP. voxflow serves the TTS side of it
from the same process, engine, voices and admission as the HTTP API
(`voxflow.wyoming.server`): ``describe`` answers ``info`` (`voxflow.wyoming.info`),
``synthesize`` and the streaming ``synthesize-start`` / ``-chunk`` / ``-stop`` answer audio
(`voxflow.wyoming.handler`). The `wyoming` package's server, event and message classes do the
framing.
"""
