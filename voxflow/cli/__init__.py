"""The `voxflow` command line: `serve`, `speak`, `voices`, `bench` and `eval`.

- ``voxflow serve``: load and validate the settings, log them as JSON, run the HTTP server.
- ``voxflow speak``: synthesize text (an argument or a file) in process, without a server, and
  write it to a file or stdout in any supported format.
- ``voxflow voices``: load the models and list their voices.
- ``voxflow bench run|compare``: measure a speech server, or compare servers started in
  rotation (`voxflow.bench`; docs/benchmarks.md).
- ``voxflow eval wer|speaker``: word error rate and speaker similarity of audio clips
  (`voxflow.eval`).

Settings come from ``--config FILE`` (default: ``configs/piper.yaml`` when it exists relative to
the working directory, else the built-in defaults) with ``--set section.field=value`` overrides.

Exit status: 0 on success; 1 when a model fails to load or synthesis fails inside the engine
(bench: a server fails, or ``--check`` finds differences); 2 for a usage, configuration or input
error (printed as ``voxflow: <message>``, no traceback); 3 when the bench's idle gate times out;
130 when interrupted.

Modules: `main` (parser, entry point), `common` (settings, errors), `serve`, `speak`,
`voices`, `tools` (bench and eval wiring).
"""

from voxflow.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
