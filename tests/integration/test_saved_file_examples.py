"""Issue 38 item 9: the docs' examples that save audio to a file ask for a whole file, whose WAV
header carries the exact length (a streamed WAV says "unknown length", 0xFFFFFFFF, which
Python's `wave` and some players misread). Each curl example of README.md and docs/ that writes
a file is found here, its body checked, and the Piper ones are sent to the real server and the
saved file read back with `wave`."""

from __future__ import annotations

import io
import json
import re
import wave
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# curl ... -d '<json>' ... -o FILE (the JSON may span lines)
CURL = re.compile(r"curl [^\n]*?/v1/audio/speech.*?-d '(\{.*?\})'\s*\\?\s*-o (\S+)", re.S)


def saving_examples() -> list[tuple[str, dict, str]]:
    found = []
    for doc in DOCS:
        for body, out in CURL.findall(doc.read_text(encoding="utf-8")):
            found.append((doc.name, json.loads(body), out))
    return found


EXAMPLES = saving_examples()


def test_the_docs_hold_file_saving_examples_and_each_asks_for_a_whole_file():
    assert len(EXAMPLES) >= 3, EXAMPLES  # README's two, docs/api.md's SSML one
    for doc, body, out in EXAMPLES:
        assert body.get("stream") is False, (doc, out)


@pytest.mark.parametrize(("doc", "body", "out"),
                         [e for e in EXAMPLES if e[1]["model"] == "piper"],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_each_piper_example_saves_a_wav_that_wave_reads_whole(joe_server, doc, body, out):
    r = httpx.post(f"{joe_server.url}/v1/audio/speech", json=body, timeout=120)
    assert r.status_code == 200 and "content-length" in r.headers
    with wave.open(io.BytesIO(r.content)) as w:
        frames, rate = w.getnframes(), w.getframerate()
        data = w.readframes(frames)
    assert rate == 22050 and frames > rate // 2
    assert len(data) == 2 * frames == len(r.content) - 44  # the header's length is the file's
