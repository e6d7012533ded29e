"""The HTTP server: FastAPI app factory and the OpenAI-compatible routes."""
