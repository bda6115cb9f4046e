"""Power models per GPU product: utilization -> board power draw.

Contract: ``PowerModel.power_w(util_pct)`` is linear, ``idle_w`` at 0 % (a process holds the GPU
but runs no kernels) up to ``max_w`` at 100 %. A GPU that no process holds draws
``no_process_w``, less than ``idle_w`` (the driver lowers clocks once no context exists).

The H200 numbers are the means measured on a real H200 in
tests/data/h200/README.md: no process 77 W, idle holder 118 W, steady
bf16 matmuls 690 W. Other products use round datasheet-like values with ``no_process_w`` at
0.65 x ``idle_w`` (the H200's measured ratio, 77 / 118).
"""

from __future__ import annotations

from dataclasses import dataclass

NO_PROCESS_RATIO = 77.0 / 118.0


@dataclass(frozen=True)
class PowerModel:
    """Board power of one GPU product, in watts."""

    idle_w: float
    max_w: float
    no_process_w: float

    def power_w(self, util_pct: float) -> float:
        """Power while held at ``util_pct`` (clamped to 0..100)."""
        fraction = min(max(util_pct, 0.0), 100.0) / 100.0
        return self.idle_w + (self.max_w - self.idle_w) * fraction


def _scaled(idle_w: float, max_w: float) -> PowerModel:
    return PowerModel(idle_w, max_w, round(idle_w * NO_PROCESS_RATIO, 1))


H200 = PowerModel(idle_w=118.0, max_w=690.0, no_process_w=77.0)

MODELS: dict[str, PowerModel] = {
    "NVIDIA-H200": H200,
    "NVIDIA-A100-SXM4-80GB": _scaled(60.0, 400.0),
    "NVIDIA-A100-SXM4-40GB": _scaled(55.0, 400.0),
    "NVIDIA-H100-80GB-HBM3": _scaled(70.0, 700.0),
}
UNKNOWN = _scaled(50.0, 300.0)


def model_for(product: str | None) -> PowerModel:
    """The power model for a ``nvidia.com/gpu.product`` label value (``UNKNOWN`` if absent)."""
    if product is None:
        return UNKNOWN
    return MODELS.get(product, UNKNOWN)
