"""Scale-out on Ray Serve: the same FastAPI app as a Serve deployment, one engine per replica.

Nothing here imports Ray at package import: `voxflow.ray.settings` is pure pydantic (every
config validates without the ``ray`` extra) and `voxflow.ray.proxy` is plain ASGI. Ray is
imported by `voxflow.ray.app` (the deployment and the ``serve run`` builder) and
`voxflow.ray.launch` (``voxflow serve --ray``). docs/scale-out.md.
"""
