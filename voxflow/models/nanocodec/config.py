"""NanoCodec decoder configuration and its streaming-cache inventory (spec §2, §4, §6).

`DecoderConfig` holds the `CausalHiFiGANDecoder` constructor arguments (the JSON stored under
the ``config`` metadata key of every fixture file, or a ``.nemo`` archive's decoder section).
`cache_inventory` lists, from the config alone and before anything is allocated, every causal
layer's per-stream state in the order the streaming decoder uses it (spec §6 "Order").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SAMPLE_RATE = 22050
"""Output rate of the 21.5 fps NanoCodec, Hz (spec §2)."""

MAX_STATE_FLOATS = 1 << 22
"""Refuse a topology whose per-stream state exceeds this many values (4 M; full size: 186,816)
before allocating anything (spec §6: report a limit, do not exhaust memory mid-build)."""


@dataclass(frozen=True)
class CacheSpec:
    """One causal layer's per-stream state: ``name`` (module path), [channels, columns] per item.

    For a causal conv: the last (k−1)·d input columns (after its activation). For a transposed
    conv: the un-biased overhang of k−s output columns (spec §6).
    """

    name: str
    channels: int
    columns: int

    @property
    def numel(self) -> int:
        return self.channels * self.columns


@dataclass(frozen=True)
class DecoderConfig:
    """`CausalHiFiGANDecoder` arguments; defaults are the full-size 21.5 fps decoder (spec §4).

    Only what the NanoCodec decoder uses is supported: half_snake activations, a clamp output,
    zero padding, grouped up-samplers with kernel 2·rate. Anything else raises ValueError.
    """

    input_dim: int = 32
    up_sample_rates: tuple[int, ...] = (8, 8, 4, 2, 2)
    base_channels: int = 864
    in_kernel_size: int = 7
    out_kernel_size: int = 3
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[int, ...] = (1, 3, 5)
    activation: str = "half_snake"
    output_activation: str = "clamp"
    pad_mode: str = "zeros"
    n_groups_equal_to_out_channels: bool = True

    def __post_init__(self) -> None:
        wanted = {"activation": "half_snake", "output_activation": "clamp", "pad_mode": "zeros",
                  "n_groups_equal_to_out_channels": True}
        for field, value in wanted.items():
            if getattr(self, field) != value:
                raise ValueError(f"NanoCodec decoder: {field}={getattr(self, field)!r} is not "
                                 f"supported (only {value!r})")
        if self.base_channels % 2 ** len(self.up_sample_rates):
            raise ValueError(f"base_channels {self.base_channels} must halve "
                             f"{len(self.up_sample_rates)} times")
        sizes = (self.input_dim, self.in_kernel_size, self.out_kernel_size,
                 *self.up_sample_rates, *self.resblock_kernel_sizes, *self.resblock_dilation_sizes)
        if min(sizes) < 1:
            raise ValueError("NanoCodec decoder sizes, rates and dilations must be >= 1")

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> DecoderConfig:
        """From the fixtures' / NeMo's keyword arguments; an unknown key raises TypeError."""
        a = dict(doc)
        for key in ("up_sample_rates", "resblock_kernel_sizes", "resblock_dilation_sizes"):
            if key in a:
                a[key] = tuple(int(v) for v in a[key])
        return cls(**a)

    @classmethod
    def tiny(cls) -> DecoderConfig:
        """The fixture decoder: rates [8, 3, 2, 2], 80 base channels, 96 samples per frame."""
        return cls(up_sample_rates=(8, 3, 2, 2), base_channels=80)

    @property
    def samples_per_frame(self) -> int:
        """Output samples per latent frame: prod(up_sample_rates) (1024 full size, 96 tiny)."""
        return math.prod(self.up_sample_rates)

    @property
    def stage_channels(self) -> tuple[int, ...]:
        """Channels into each up-sampler, then out of the last: 864, 432, ..., 27 full size."""
        return tuple(self.base_channels // 2**i for i in range(len(self.up_sample_rates) + 1))


def cache_inventory(config: DecoderConfig) -> list[CacheSpec]:
    """Every causal layer's per-stream state, in streaming order (spec §6): ``pre_conv``; per
    stage the up-sampler tail, then for each kernel j and dilation m the input conv and the skip
    conv; ``post_conv``. Full size: 97 entries, 186,816 values; tiny: 78, 16,812.

    Raises ValueError if the total exceeds `MAX_STATE_FLOATS`.
    """
    chans = config.stage_channels
    specs = [CacheSpec("pre_conv", config.input_dim, config.in_kernel_size - 1)]
    for i, rate in enumerate(config.up_sample_rates):
        c = chans[i + 1]
        specs.append(CacheSpec(f"up_sample_conv_layers.{i}", c, rate))  # k − s = 2s − s
        for j, k in enumerate(config.resblock_kernel_sizes):
            for m, d in enumerate(config.resblock_dilation_sizes):
                block = f"res_layers.{i}.res_blocks.{j}.res_blocks.{m}"
                specs.append(CacheSpec(f"{block}.input_conv", c, (k - 1) * d))
                specs.append(CacheSpec(f"{block}.skip_conv", c, k - 1))
    specs.append(CacheSpec("post_conv", chans[-1], config.out_kernel_size - 1))
    total = sum(s.numel for s in specs)
    if total > MAX_STATE_FLOATS:
        raise ValueError(f"NanoCodec decoder state of {total:,} values per stream exceeds the "
                         f"limit of {MAX_STATE_FLOATS:,}: refusing this topology")
    return specs
