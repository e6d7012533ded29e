"""A start-up that fails on a file that cannot be read says so in one line.

Starlette answers a failed lifespan with the whole traceback as the failure's message, which
uvicorn logs before "Application startup failed. Exiting." (exit 3). For a
`voxflow.models.files.ModelFileError` the traceback says nothing the one line does not (which
file, what is wrong), so this middleware puts that line in its place. Other start-up errors
keep their traceback: they are bugs or unexpected.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voxflow.models.files import ModelFileError


class StartupErrorMiddleware:
    """ASGI middleware for the lifespan scope (see the module docstring); the app's lifespan
    puts a start-up `ModelFileError` in ``app.state.startup_error`` before raising it."""

    def __init__(self, app: ASGIApp, state) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_short(message: Message) -> None:
            error = getattr(self.state, "startup_error", None)
            if message["type"] == "lifespan.startup.failed" and isinstance(
                    error, ModelFileError):
                message = {**message, "message": f"start-up failed: {error}"}
            await send(message)

        await self.app(scope, receive, send_short)


__all__ = ["StartupErrorMiddleware"]
