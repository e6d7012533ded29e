"""What a speech request sends that the server does not act on (issue 38): top-level fields
voxflow does not know (LibreChat's `backend`, other apps' extras) and `instructions` for a model
that cannot follow them. Refused (``server.unknown_fields: refuse``) or served and named in the
``X-Voxflow-Ignored`` response header and the access line, as apps that send extras expect of
OpenAI's endpoint, which ignores them.
"""

from __future__ import annotations

import re

from voxflow.errors import InvalidRequestError, clip
from voxflow.models.base import ModelFamily
from voxflow.server.schemas import SpeechBody

HEADER = "X-Voxflow-Ignored"
MAX_NAMES = 16  # names in the header; more are counted ("+N more")
_HEADER_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def refuse_unknown(body: SpeechBody, policy: str) -> None:
    """Raise for the first unknown field when `policy` (``server.unknown_fields``) is
    ``refuse``.

    Raises:
        InvalidRequestError: 400 ``unknown_parameter`` naming the field.
    """
    names = body.unknown_fields
    if policy == "refuse" and names:
        raise InvalidRequestError(f"Unrecognized request argument supplied: '{clip(names[0])}'.",
                                  param=clip(names[0]), code="unknown_parameter")


def ignored_fields(body: SpeechBody, family: ModelFamily) -> list[str]:
    """The field names of `body` the served model will not act on: its unknown fields in the
    order sent, then ``instructions`` if it has some and `family` does not follow them."""
    names = body.unknown_fields
    if body.instructions and not family.follows_instructions:
        names.append("instructions")
    return names


INSTRUCTIONS_HEADER = "X-Voxflow-Instructions"


def instructions_value(applied: bool, ignored: list[str]) -> str | None:
    """The ``X-Voxflow-Instructions`` value: ``applied`` when the served model follows the
    request's instructions (CosyVoice3's instruct prompt), ``ignored`` when it was sent some
    and does not (they are then also named in `ignored`, the ``X-Voxflow-Ignored`` names);
    None (no header) when none were sent."""
    if applied:
        return "applied"
    return "ignored" if "instructions" in ignored else None


def header_value(names: list[str]) -> str:
    """`names` as one header value, ``a, b`` (ASCII only: a name outside letters, digits and
    ``_.-``, or over 64 characters, shows as ``?``; past `MAX_NAMES`, ``+N more``)."""
    shown = [n if _HEADER_NAME.fullmatch(n) else "?" for n in names[:MAX_NAMES]]
    if len(names) > MAX_NAMES:
        shown.append(f"+{len(names) - MAX_NAMES} more")
    return ", ".join(shown)
