"""CORS with voxflow's answers: Starlette's `CORSMiddleware`, its logic kept, with two changes.

- A refused preflight (origin, method or a header not allowed) is a 400 in the OpenAI error
  shape (``code: "cors_not_allowed"``, the refused parts named) instead of Starlette's plain
  text "Disallowed CORS origin".
- A response to an origin that is not allowed carries no ``Access-Control-*`` header at all
  (Starlette adds ``Access-Control-Expose-Headers`` to every response that has an ``Origin``),
  only ``Vary: Origin``, so caches keep the allowed origins' answers apart. Its preflight
  refusal carries ``Vary`` only as well.
"""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import Message, Send

from voxflow.errors import InvalidRequestError, echo
from voxflow.server.errors import error_response


class OpenAICORSMiddleware(CORSMiddleware):
    """`CORSMiddleware` whose refusals are OpenAI-shaped errors (module doc)."""

    def _origin_refused(self, origin: str) -> bool:
        return not self.allow_all_origins and not self.is_allowed_origin(origin=origin)

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 200:
            return response
        origin = request_headers["origin"]
        method = request_headers["access-control-request-method"]
        reasons = []
        if self._origin_refused(origin):
            reasons.append(f"origin {echo(origin)} is not allowed (server.cors_origins)")
        if method not in self.allow_methods:
            reasons.append(f"method {echo(method)} is not allowed "
                           f"({', '.join(self.allow_methods)})")
        if not reasons:  # headers or private network: Starlette's own words, the only others
            reasons.append(bytes(response.body).decode().replace("Disallowed CORS ", "") +
                           " not allowed")
        headers = {key: value for key, value in response.headers.items()
                   if key.lower() not in ("content-length", "content-type")}
        if self._origin_refused(origin):
            headers = {key: value for key, value in headers.items() if key.lower() == "vary"}
        error = InvalidRequestError(
            f"CORS preflight refused: {'; '.join(reasons)}.", code="cors_not_allowed"
        )
        return error_response(error, headers=headers)

    async def send(self, message: Message, send: Send, request_headers: Headers) -> None:
        origin = request_headers.get("Origin")
        if (message["type"] == "http.response.start" and origin is not None
                and self._origin_refused(origin)):
            message.setdefault("headers", [])
            headers = MutableHeaders(scope=message)
            headers["Vary"] = ", ".join([*headers.getlist("Vary"), "Origin"])
            await send(message)
            return
        await super().send(message, send, request_headers)


__all__ = ["OpenAICORSMiddleware"]
