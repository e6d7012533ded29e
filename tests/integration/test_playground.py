"""The playground page (issue 14, item 1) in headless Chromium against the real server: lists
from the API, speech heard while it streams, the waveform and spectrogram drawn (labelled, and
saying what they will show before the first request), voices labelled with every language they
speak, word highlighting from the server's word timings (Piper and Kokoro), the API's own
error messages, the keyboard, downloads and the API key prompt.

Playwright's Python API drives the system Chromium (Debian: ``apt-get install chromium``;
``.ci/run`` installs it); without Chromium or Playwright the tests are skipped with a message.
With ``VOXFLOW_PLAYGROUND_SCREENSHOT=docs/images/playground.png`` the Piper test saves the
README's screenshot of the page after speaking.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from collections.abc import Iterator

import httpx
import pytest
from conftest import LiveServer, start_server

pytestmark = pytest.mark.integration

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no Chromium on this machine (Debian: apt-get install chromium): the browser "
                "tests of the playground are skipped", allow_module_level=True)

KEY = "sk-playground-test"
NO_TIMINGS = "no word timings for this model"
BACKGROUND = (17, 24, 39)  # the canvases' background (#111827)
SENTENCES = {
    # Several segments, so that the response is still arriving when playback starts.
    "piper": "The quick brown fox jumps over the lazy dog. Streaming audio starts before the "
             "whole answer is written. Each sentence becomes a segment of its own. The page "
             "plays the segments back to back as they arrive.",
    "kokoro": "Hello there. This is Kokoro.",  # Kokoro is slower: two short sentences
}
# Read in the page: how many pixels of a canvas differ from the background.
PAINTED = """([id, background]) => {
  const c = document.getElementById(id);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] !== background[0] || d[i + 1] !== background[1] || d[i + 2] !== background[2]) n++;
  }
  return n;
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--autoplay-policy=no-user-gesture-required"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser) -> Iterator[sync_api.Page]:
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(30_000)
    yield page
    page.close()
    assert not errors, errors  # no uncaught exception in the page's script


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[LiveServer]:
    live = start_server({"server.api_keys": [KEY]})
    yield live
    live.stop()


def open_page(page, url: str) -> None:
    page.goto(f"{url}/")
    page.wait_for_function("window.voxflowStats.listsLoaded === true")


def options(page, select: str) -> list[str]:
    return page.eval_on_selector_all(f"{select} option", "els => els.map(e => e.value)")


def labels(page, select: str) -> list[str]:
    return page.eval_on_selector_all(f"{select} option", "els => els.map(e => e.textContent)")


def served(url: str) -> tuple[list[str], list[dict]]:
    models = httpx.get(f"{url}/v1/models").json()["data"]
    voices = httpx.get(f"{url}/v1/audio/voices").json()["data"]
    return ([m["id"] for m in models if "alias_of" not in m],
            [v for v in voices if "alias_of" not in v])


def test_the_page_lists_the_models_voices_and_languages_the_api_serves(multi_server, page):
    models, voices = served(multi_server.url)
    open_page(page, multi_server.url)
    assert options(page, "#model") == models == ["piper", "kokoro"]
    for model in models:
        page.select_option("#model", model)
        mine = [v for v in voices if v["model"] == model]
        assert options(page, "#voice") == [v["id"] for v in mine]
        # each voice labelled with every language it speaks, its own first (issue 41 item 8e)
        assert labels(page, "#voice") == [f"{v['id']} ({', '.join(v['languages'])})"
                                          for v in mine]
        default = next(v for v in mine if v["default"])
        assert page.input_value("#voice") == default["id"]
        assert options(page, "#language") == ["", *default["languages"]]
    page.select_option("#model", "kokoro")
    assert labels(page, "#voice")[0] == "jf_alpha (ja, en-US, en-GB)"  # Japanese reads English


def test_the_canvases_say_what_they_show_before_the_first_request(multi_server, page):
    # issue 41 item 8e: two unlabelled dark boxes told a fresh user nothing
    open_page(page, multi_server.url)
    captions = {}
    for canvas in ("waveform", "spectrogram"):
        caption = page.get_attribute(f"#{canvas}", "aria-labelledby")
        assert caption, f"#{canvas} has no caption"
        captions[canvas] = page.inner_text(f"#{caption}")
        # the empty state's line is drawn: some pixels, not a painted picture
        painted = page.evaluate(PAINTED, [canvas, BACKGROUND])
        assert 300 < painted < 20_000, (canvas, painted)
    assert captions == {
        "waveform": "Waveform: the speech as it arrives, the orange line where playback is",
        "spectrogram": "Spectrogram: frequency (0 Hz at the bottom) over time, brighter is "
                       "louder"}


@pytest.mark.parametrize(("model", "key"), [("piper", "Enter"), ("kokoro", " ")])
def test_each_model_is_heard_while_it_streams_and_drawn(multi_server, page, model, key):
    open_page(page, multi_server.url)
    page.select_option("#model", model)
    page.fill("#text", SENTENCES[model])
    page.focus("#text")
    page.keyboard.press("Tab")  # the keyboard reaches Speak right after the text
    assert page.evaluate("document.activeElement.id") == "speak"
    page.keyboard.press(key)
    page.wait_for_function("window.voxflowStats.responseEndAt !== undefined"
                           " && window.voxflowStats.playStartedAt !== undefined")
    stats = page.evaluate("window.voxflowStats")
    assert stats["model"] == model and not stats.get("error"), stats
    # Heard before the download was over: Web Audio played the first chunks meanwhile.
    assert stats["firstAudioAt"] < stats["responseEndAt"], stats
    assert stats["playStartedAt"] < stats["responseEndAt"], stats
    assert stats["audioSeconds"] > 1.0 and stats["rtf"] > 0
    assert page.inner_text("#ttfa").endswith(" ms")
    assert float(page.inner_text("#rtf")) == pytest.approx(stats["rtf"], abs=0.001)
    assert page.evaluate(PAINTED, ["waveform", BACKGROUND]) > 1000
    assert page.evaluate(PAINTED, ["spectrogram", BACKGROUND]) > 1000
    # Both models send speech.word events for English: the spoken word is marked as it plays.
    assert stats["wordTimings"], stats
    page.wait_for_function("new Set(window.voxflowStats.highlighted).size >= 2")
    assert page.locator("#transcript .word").count() >= 5
    assert page.inner_text("#status") != NO_TIMINGS
    shot = os.environ.get("VOXFLOW_PLAYGROUND_SCREENSHOT")
    if shot and model == "piper":
        page.wait_for_timeout(1500)  # the playhead a little way in
        page.screenshot(path=shot, full_page=True)
    page.click("#stop")
    page.wait_for_function("window.voxflowStats.done === true")


def test_words_are_highlighted_as_they_are_spoken(multi_server, page):
    # The highlight's timing against a known schedule: the wire format of word timings
    # (speech.word events, docs/api.md) stood in for by the browser, Piper's real audio, one
    # word every equal share of it. The test above checks the server's own events.
    text = "One two three four five six."
    audio = httpx.post(f"{multi_server.url}/v1/audio/speech", json={
        "model": "piper", "voice": "joe", "input": text, "response_format": "pcm",
        "stream": False})
    rate = int(audio.headers["x-sample-rate"])
    words = list(re.finditer(r"\w+", text))
    step = len(audio.content) / 2 / rate / len(words)
    events = [{"type": "speech.audio.delta", "audio": base64.b64encode(audio.content[i:i + 8820])
               .decode()} for i in range(0, len(audio.content), 8820)]
    events[1:1] = [{"type": "speech.word", "word": m.group(), "start": i * step,
                    "end": (i + 1) * step, "text_start": m.start(), "text_end": m.end()}
                   for i, m in enumerate(words)]
    events.append({"type": "speech.audio.done"})
    sse = "".join(f"data: {json.dumps(event)}\n\n" for event in events)

    def answer(route) -> None:
        if (route.request.post_data_json or {}).get("timestamps") is not True:
            route.continue_()
            return
        route.fulfill(status=200, body=sse, headers={
            "Content-Type": "text/event-stream", "X-Sample-Rate": str(rate)})

    page.route("**/v1/audio/speech", answer)
    open_page(page, multi_server.url)
    page.fill("#text", text)
    page.click("#speak")
    page.wait_for_function("window.voxflowStats.done === true", timeout=20_000)
    stats = page.evaluate("window.voxflowStats")
    assert stats["wordTimings"] is True and not stats.get("error"), stats
    assert page.eval_on_selector_all("#transcript .word", "els => els.map(e => e.textContent)") \
        == [m.group() for m in words]
    # Each word in its turn while it played (a frame may skip none: 0.3 s each).
    assert stats["highlighted"] == [f"{i}:{m.group()}" for i, m in enumerate(words)]
    assert page.locator("#transcript .current").count() == 0  # none once it has all played
    assert page.inner_text("#status") == ""


@pytest.mark.parametrize("field", [{"speed": "9"}, {"text": ""}], ids=["speed 9", "no text"])
def test_a_bad_request_shows_the_apis_own_message(multi_server, page, field):
    open_page(page, multi_server.url)
    body = {"model": "piper", "voice": "joe", "input": SENTENCES["piper"],
            "response_format": "pcm", "speed": 1.0}
    if "speed" in field:
        page.fill("#speed", field["speed"])
        body["speed"] = float(field["speed"])
    else:
        page.fill("#text", "")
        body["input"] = ""
    expected = httpx.post(f"{multi_server.url}/v1/audio/speech", json=body)
    assert expected.status_code == 400
    page.click("#speak")
    alert = page.get_by_role("alert").filter(has_text=expected.json()["error"]["message"])
    alert.wait_for()
    assert page.inner_text("#error") == expected.json()["error"]["message"]
    assert page.evaluate("window.voxflowStats.done") is True


def test_download_saves_the_chosen_format(multi_server, page):
    open_page(page, multi_server.url)
    page.fill("#text", "Saved as a file.")
    page.select_option("#format", "wav")
    with page.expect_download() as info:
        page.click("#download")
    download = info.value
    assert download.suggested_filename == "speech.wav"
    with open(download.path(), "rb") as f:
        head = f.read(12)
    assert head[:4] == b"RIFF" and head[8:12] == b"WAVE"


def test_the_page_asks_for_a_key_when_the_server_needs_one(keyed_server, page):
    page.goto(f"{keyed_server.url}/")  # the page itself is open
    dialog = page.locator("#key-dialog")
    dialog.wait_for(state="visible")
    page.fill("#key", "sk-wrong")
    page.keyboard.press("Enter")
    wrong = httpx.get(f"{keyed_server.url}/v1/models",
                      headers={"Authorization": "Bearer sk-wrong"}).json()["error"]["message"]
    page.locator("#key-error").filter(has_text=wrong).wait_for()  # the 401's own words
    assert dialog.is_visible()
    page.fill("#key", KEY)
    page.keyboard.press("Enter")
    page.wait_for_function("window.voxflowStats.listsLoaded === true")
    assert options(page, "#model") == ["piper"]
    assert not dialog.is_visible()
    assert page.evaluate("sessionStorage.getItem('voxflow.apiKey')") == KEY
    page.fill("#text", "With a key.")  # speech sends it too
    page.click("#speak")
    page.wait_for_function("window.voxflowStats.responseEndAt !== undefined")
    assert page.evaluate("window.voxflowStats.audioSeconds") > 0.3
    assert page.inner_text("#error") == ""
    page.click("#stop")


def test_the_api_docs_page_renders_offline_from_the_servers_own_files(keyed_server, page):
    # issue 38 item 9: Swagger UI from /docs/assets (no CDN): every request the page makes goes
    # to this server, and it renders every route of the OpenAPI 3.1 document
    hosts: list[str] = []
    page.on("request", lambda request: hosts.append(request.url.split("/")[2]))
    page.goto(f"{keyed_server.url}/docs")
    page.locator(".opblock-summary-path", has_text="/v1/audio/speech").first.wait_for()
    paths = set(page.locator(".opblock-summary-path").all_inner_texts())
    assert {"/v1/audio/speech", "/v1/audio/voices", "/health"} <= {p.strip() for p in paths}
    assert set(hosts) == {keyed_server.url.split("/")[2]}
