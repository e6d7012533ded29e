"""Issue 8 item 4: client values quoted in error messages are cut short by one helper, and every
error carries a non-null code."""

from __future__ import annotations

from voxflow.errors import (
    ECHO_LIMIT,
    MESSAGE_LIMIT,
    EngineNotReadyError,
    InvalidRequestError,
    ModelNotFoundError,
    SynthesisError,
    VoxflowError,
    clip,
    echo,
)


def test_item4_echo_keeps_short_values_and_cuts_long_ones() -> None:
    assert echo("joe") == "'joe'"
    assert echo(None) == "'null'" and echo(True) == "'true'" and echo(5) == "'5'"
    long = "v" * 100_000
    assert echo(long) == f"'{'v' * ECHO_LIMIT}…' (100,000 characters)"
    assert clip("x" * ECHO_LIMIT) == "x" * ECHO_LIMIT
    assert clip("x" * (ECHO_LIMIT + 1)).endswith(f"… ({ECHO_LIMIT + 1} characters)")


def test_item4_model_not_found_quotes_a_huge_model_name_briefly() -> None:
    error = ModelNotFoundError("m" * 100_000, ["piper"])
    assert len(error.message) < 200 and "(100,000 characters)" in error.message
    assert error.to_dict()["error"]["code"] == "model_not_found"


def test_item4_every_error_class_has_a_code_and_long_messages_are_cut() -> None:
    codes = {cls: cls("x").code for cls in (VoxflowError, InvalidRequestError,
                                            EngineNotReadyError, SynthesisError)}
    assert codes == {VoxflowError: "server_error", InvalidRequestError: "invalid_request",
                     EngineNotReadyError: "model_not_ready", SynthesisError: "synthesis_failed"}
    error = InvalidRequestError("y" * 50_000, param="p" * 500)
    assert len(error.message) == MESSAGE_LIMIT + 1 and error.message.endswith("…")
    assert len(error.param) < 100
