"""Peak memory of single model runs: the constants behind the memory gate's predictions.

Run from the repository root (about a minute, both models' real weights):

    .venv/bin/python benchmarks/working_sets.py [--out working_sets.json]

Each run starts with ONNX Runtime's arena empty (every run shrinks it at its end, as a run
over the process's budget does) and its peak is the process's high-water RSS above the RSS
before it (``VmHWM`` reset through ``/proc/self/clear_refs``). Printed next to each measured
peak is what the stage predicts for the same run (`Stage.working_set_bytes`):

- Piper (voice joe): the acoustic stage under load (encoder, then each window decoded in line)
  for segments of growing length, and the decoder stage's windows of a lone request;
- Kokoro (jm_kumo, English): segments of growing length, at speed 1 and at 0.6.

Linux only (``/proc``). Figures are MiB (2**20 bytes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # fakes: request states without a server

MIB = 1 << 20


def rss_and_peak() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def peak_of(fn) -> tuple[object, int]:
    """Run `fn()`; returns its result and the RSS high-water mark above the RSS before it."""
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    before, _ = rss_and_peak()
    out = fn()
    _, peak = rss_and_peak()
    return out, peak - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()

    from fakes import make_state, run_stage, stage_item

    from voxflow.memory_budget import BUDGET
    from voxflow.models.kokoro.model import KokoroAcousticStage, KokoroFamily
    from voxflow.models.kokoro.settings import KokoroSettings
    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.model import PiperAcousticStage, PiperDecoderStage, PiperFamily
    from voxflow.models.piper.settings import PiperSettings
    from voxflow.stages.items import StageBatch

    BUDGET.start(0)  # no headroom: every run is over budget and shrinks the arena at its end
    BUDGET.models = {"all": 1}
    rows: list[dict] = []

    def report(model: str, what: str, measured: int, predicted: int) -> None:
        rows.append({"model": model, "run": what, "peak_mib": round(measured / MIB, 1),
                     "predicted_mib": round(predicted / MIB, 1)})
        print(f"{model:7s} {what:44s} peak {measured / MIB:7.1f}   predicted "
              f"{predicted / MIB:7.1f}", flush=True)

    sentences = (ROOT / "benchmarks" / "data" / "sentences.txt").read_text().splitlines()
    texts = [sentences[0][:40], sentences[0], sentences[1], " , ".join(sentences[1:3]),
             " , ".join(sentences[4:8])[:300]]

    piper = PiperFamily("piper", PiperSettings())
    joe = piper.voice_models["joe"]
    acoustic, decoder = PiperAcousticStage(piper), PiperDecoderStage(piper)
    state, _ = make_state(voice="joe")
    run_stage(acoustic, [stage_item(state, 1, text_to_segments(joe.config, texts[1], 400, None,
                                                               400)[0])])  # warm-up
    for text in texts:
        segment = text_to_segments(joe.config, text, 400, None, 400)[0]
        item = stage_item(state, 1, segment)
        n = segment.phoneme_ids.size
        with piper.runs.run():  # another run in progress: the windows are decoded in line
            _, peak = peak_of(lambda item=item: run_stage(acoustic, [item]))
        report("piper", f"acoustic, in line, {n} phoneme ids", peak,
               acoustic.working_set_bytes(StageBatch.of([item])))
        [windows] = run_stage(acoustic, [item])  # alone: windows for the decoder stage
        for window in windows:
            w_item = stage_item(state, 1, window)
            _, peak = peak_of(lambda w_item=w_item: run_stage(decoder, [w_item]))
            report("piper", f"  decoder window, {window.span[1] - window.span[0]} frames",
                   peak, decoder.working_set_bytes(StageBatch.of([w_item])))

    kokoro = KokoroFamily("kokoro", KokoroSettings())
    k_stage = KokoroAcousticStage(kokoro)
    for speed in (1.0, 0.6):
        k_state, _ = make_state(voice="jm_kumo", speed=speed)
        for text in texts:
            segment = kokoro.frontend.segments(text, "en-us", 400, None)[0]
            item = stage_item(k_state, 1, segment)
            _, peak = peak_of(lambda item=item: run_stage(k_stage, [item]))
            report("kokoro", f"{segment.token_ids.size} tokens, speed {speed}", peak,
                   k_stage.working_set_bytes(StageBatch.of([item])))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
