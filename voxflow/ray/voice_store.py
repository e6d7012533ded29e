"""The store the replicas share saved voices through: Ray's internal key-value store.

Ray keeps it in the cluster's GCS (the head node's Global Control Store), which every replica
of every node reaches, and Ray Serve keeps its own state there too (its controller's
checkpoints). It lives as long as the cluster (longer with GCS fault tolerance, which puts it
in Redis), not as long as one replica: a replica that dies or starts later finds every voice
there. Each put of a key is atomic (a reader gets the whole value or the one before) and a put
can refuse to overwrite, which `voxflow.server.voice_sync` uses as its compare-and-set.

Why this and not Ray's object store or a named actor: objects are immutable and are freed with
their owner (the replica that put them), and an actor holding the voices would be one more
process to place, restart and lose state with; a shared folder would need every node to mount
the same filesystem. Values are whole voice files (tens to hundreds of KB each): small for the
GCS.

The functions are `ray.experimental.internal_kv`'s, which Ray's own libraries (Serve, Tune,
the job manager) use; Ray is pinned (``voxflow[ray]``), so their behaviour is the tested one.
"""

from __future__ import annotations

from ray.experimental import internal_kv

NAMESPACE = "voxflow"
"""The KV namespace of voxflow's keys (Ray's and Serve's use their own)."""


class RayKVVoiceStore:
    """`voxflow.server.voice_sync.VoiceStore` over Ray's internal KV store: the keys of one
    Serve application under ``saved-voices/APP/`` in namespace `NAMESPACE`. Used inside a
    replica (or a driver), where Ray has set up its GCS client.

    Every method raises RuntimeError when Ray is not initialised in this process, and what
    Ray's GCS client raises when the GCS cannot be reached.
    """

    def __init__(self, app: str) -> None:
        self.prefix = f"saved-voices/{app}/"

    def _ready(self) -> None:
        if not internal_kv._internal_kv_initialized():
            raise RuntimeError("Ray's internal KV store is not set up in this process")

    def get(self, key: str) -> bytes | None:
        """The value of `key`, or None."""
        self._ready()
        value = internal_kv._internal_kv_get(self.prefix + key, namespace=NAMESPACE)
        return bytes(value) if value is not None else None

    def put(self, key: str, value: bytes, *, overwrite: bool) -> bool:
        """Store `value`; False (nothing written) when `key` has a value and not `overwrite`."""
        self._ready()
        existed = internal_kv._internal_kv_put(self.prefix + key, value, overwrite,
                                               namespace=NAMESPACE)
        return overwrite or not existed

    def keys(self, prefix: str) -> list[str]:
        """Every key starting with `prefix` (without this store's own prefix)."""
        self._ready()
        found = internal_kv._internal_kv_list(self.prefix + prefix, namespace=NAMESPACE)
        return [k.decode()[len(self.prefix):] for k in found]


__all__ = ["NAMESPACE", "RayKVVoiceStore"]
