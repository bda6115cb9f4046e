"""Write the small stand-ins for the Alibaba traces that unit tests use in a plain clone.

    python -m tests.data.make_small        # rewrites tests/data/openb-small and genai-small

`openb-small/openb_pod_list_gpushare40.csv` stands in for the gpushare variants: its pods
asking for a fraction of one GPU (`gpu_milli` < 1000) ask for about 40 % of the GPUs asked for.

The output is a function of `SEED` only. The files have the columns of the real traces
(cluster-trace-gpu-v2023's openb CSVs and cluster-trace-v2026-GenAI's duty-cycle CSV) and a
few dozen rows of made-up values; none of the traces' data is in them.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

SEED = 20231
HERE = Path(__file__).resolve().parent
OPENB_DIR = HERE / "openb-small"
GENAI_DIR = HERE / "genai-small"

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
MODELS = ("P100", "T4", "V100M16", "V100M32", "A10", "G2", "G3")
GPU_COUNTS = (0, 1, 2, 4, 8)
NODES = 30
PODS = 60
SHARE_PODS = 80
SHARE_FRACTION = 0.75
"""Of the GPU pods of the gpushare stand-in, about this share asks for a fraction of one GPU
(with the seed: 57 of 77, asking for 40 % of the GPUs the GPU pods ask for, as in the
trace's gpushare40 variant, where the percentage is of GPUs asked for, not of pods)."""
SHARE_MILLI = (100, 200, 250, 300, 450, 500, 600, 750, 900)
DUTY_PODS = 8
DUTY_SAMPLES = 30
DUTY_STEP_S = 300.0


def nodes(rng: random.Random) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for index in range(NODES):
        gpus = rng.choice(GPU_COUNTS)
        rows.append(
            {
                "sn": f"small-node-{index:04d}",
                "cpu_milli": rng.choice((32000, 64000, 96000, 128000)),
                "memory_mib": rng.choice((131072, 262144, 524288)),
                "gpu": gpus,
                "model": rng.choice(MODELS) if gpus else "",
            }
        )
    return rows


def pods(rng: random.Random, max_gpus: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    time = 0
    for index in range(PODS):
        gpus = rng.choice((0, 1, 1, 1, 2, 4, max_gpus))
        shares = gpus == 1 and rng.random() < 0.3
        spec = "|".join(sorted(rng.sample(MODELS, 2))) if gpus and rng.random() < 0.2 else ""
        time += rng.randrange(0, 5000)
        rows.append(
            {
                "name": f"small-pod-{index:04d}",
                "cpu_milli": rng.choice((1000, 4000, 8000, 16000)),
                "memory_mib": rng.choice((2048, 8192, 16384, 65536)),
                "num_gpu": gpus,
                "gpu_milli": rng.choice((250, 500, 750)) if shares else (1000 if gpus else 0),
                "gpu_spec": spec,
                "qos": rng.choice(("LS", "BE", "Burstable")),
                "pod_phase": "Running",
                "creation_time": time,
                "deletion_time": time + rng.randrange(1000, 100000),
                "scheduled_time": time,
            }
        )
    return rows


def share_pods(rng: random.Random) -> list[dict[str, object]]:
    """Pods in the columns of the gpushare variants: CPU-only pods, whole-GPU pods of 1, 2, 4
    or 8 GPUs, and (`SHARE_FRACTION` of the GPU pods) pods asking for `gpu_milli` thousandths
    of one GPU; no `gpu_spec`, as in those variants."""
    rows: list[dict[str, object]] = []
    time = 0
    for index in range(SHARE_PODS):
        gpus = rng.choice((0, 1, 1, 1, 1, 1, 1, 2, 4, 8))
        shares = gpus >= 1 and rng.random() < SHARE_FRACTION
        time += rng.randrange(0, 5000)
        rows.append(
            {
                "name": f"small-share-pod-{index:04d}",
                "cpu_milli": rng.choice((1000, 2000, 4000, 8000, 16000)),
                "memory_mib": rng.choice((2048, 4096, 8192, 16384, 65536)),
                "num_gpu": 1 if shares else gpus,
                "gpu_milli": rng.choice(SHARE_MILLI) if shares else (1000 if gpus else 0),
                "gpu_spec": "",
                "qos": rng.choice(("LS", "BE", "Burstable")),
                "pod_phase": "Running",
                "creation_time": time,
                "deletion_time": time + rng.randrange(1000, 100000),
                "scheduled_time": time,
            }
        )
    return rows


def duty(rng: random.Random) -> list[dict[str, object]]:
    """Per pod one shape: idle, busy, busy then idle, idle then busy, or noisy."""
    rows: list[dict[str, object]] = []
    for pod in range(DUTY_PODS):
        shape = pod % 4
        switch = rng.randrange(5, DUTY_SAMPLES - 5)
        for sample in range(DUTY_SAMPLES):
            if shape == 0:
                value = 0.0
            elif shape == 1:
                value = rng.uniform(40, 100)
            elif shape == 2:
                value = rng.uniform(20, 60) if sample < switch else 0.0
            else:
                value = 0.0 if sample < switch else rng.uniform(20, 60)
            rows.append(
                {
                    "value": round(value, 2),
                    "timestamp_anon": 1_000_000 + sample * DUTY_STEP_S,
                    "container_ip": f"pod{pod:02d}",
                }
            )
    rng.shuffle(rows)  # the real trace is not sorted by time either
    return rows


def write(path: Path, columns: tuple[str, ...], rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(SEED)
    all_nodes = nodes(rng)
    write(OPENB_DIR / "openb_node_list_all_node.csv", NODE_COLUMNS, all_nodes)
    gpu_nodes = [row for row in all_nodes if row["gpu"]]
    write(OPENB_DIR / "openb_node_list_gpu_node.csv", NODE_COLUMNS, gpu_nodes)
    write(OPENB_DIR / "openb_pod_list_default.csv", POD_COLUMNS, pods(rng, max_gpus=8))
    short = POD_COLUMNS[:5]  # the multigpu variants end at gpu_milli
    multi = [{k: row[k] for k in short} for row in pods(rng, max_gpus=8)]
    write(OPENB_DIR / "openb_pod_list_multigpu50.csv", short, multi)
    write(
        GENAI_DIR / "pod_gpu_duty_cycle_small.csv",
        ("value", "timestamp_anon", "container_ip"),
        duty(rng),
    )
    # a generator of its own, so that adding this file changed none of the others
    shares = share_pods(random.Random(SEED + 1))
    write(OPENB_DIR / "openb_pod_list_gpushare40.csv", POD_COLUMNS, shares)


if __name__ == "__main__":
    main()
