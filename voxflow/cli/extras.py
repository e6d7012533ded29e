"""A package an optional command needs and the runtime install lacks, named with the command
that installs it, instead of a ``ModuleNotFoundError`` traceback.

``voxflow eval`` (and ``voxflow bench compare --quality``) import Whisper, Resemblyzer, jiwer
and torch, which only the ``eval`` extra installs (pyproject.toml); `make serve` installs the
runtime alone. Resemblyzer is the exception: the Makefile installs it with ``--no-deps``
(it requires ``webrtcvad``, an sdist, where ``webrtcvad-wheels`` gives the same module).
"""

from __future__ import annotations

from voxflow.cli.common import CliError

EVAL_INSTALL = "pip install -e '.[eval]'"
"""Installs the ``eval`` extra into the active environment, from the repository's root."""

NO_DEPS_INSTALLS = {"resemblyzer": "pip install --no-deps 'resemblyzer==0.1.4'"}
"""Modules the extra cannot list (see the module docstring) -> their own install command."""


def missing_module_error(exc: ModuleNotFoundError, command: str) -> CliError:
    """One line for a package `command` needs that is not installed: which module, and how to
    install it (exit status 2, like the CLI's other errors a user fixes).

    Args:
        exc: the failed import; its ``name`` is the module that is missing.
        command: how the message names what failed, e.g. ``voxflow eval``.

    Raises:
        ModuleNotFoundError: `exc` itself when the missing module is voxflow's own (a broken
            install, not an extra to add): its traceback is what helps there.
    """
    module = (exc.name or "").split(".")[0]
    if not module or module == "voxflow":
        raise exc
    if module in NO_DEPS_INSTALLS:
        how = f"install it with: {NO_DEPS_INSTALLS[module]}"
    else:
        how = f"it comes with the eval extra: {EVAL_INSTALL}"
    return CliError(f"{command} needs the Python module '{module}', which is not installed; "
                    f"{how} (or `make install-test`, which installs both)")


__all__ = ["EVAL_INSTALL", "NO_DEPS_INSTALLS", "missing_module_error"]
