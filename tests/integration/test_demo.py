"""`make demo` brings up the cluster, walks through its steps (placement, reclaim, busy-time, gang,
dra), prints command lines that work as printed, and stops cleanly."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from hack.demo import DEFAULT_WORK_DIR, GANG, GANG_MEMBERS, NAMESPACE, READY_LINE, STEPS
from hack.localcluster.cluster import REPO_ROOT
from tests.docs import DEMO_DIR, operations_commands

STARTUP_TIMEOUT_S = 300


def read_until_ready(demo: subprocess.Popen[str]) -> list[str]:
    assert demo.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        line = demo.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith(READY_LINE):
            break
    return lines


def after(lines: list[str], prefix: str) -> list[str]:
    """The lines after the first one starting with `prefix`."""
    index = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    return lines[index + 1 :]


def check_placement(lines: list[str]) -> None:
    section = after(lines, "step 1, placement: ")
    table = {line.split()[0]: line.split() for line in section if line.split()}
    assert table["ddp-4"][1].startswith("g2-expansion-"), lines
    assert table["ddp-4"][2] == "0,1,2,3" and table["ddp-4"][3] == "0"
    assert table["finetune"][2] in ("0,1", "2,3")
    assert table["h200-only"][1].startswith("g2-expansion-")
    too_big = next(line for line in section if line.startswith("too-big"))
    assert table["too-big"][1] == "<none>" and "largest node has 8" in too_big


def check_reclaim(lines: list[str]) -> None:
    section = after(lines, "step 2, reclaim: ")
    outcome = next(line for line in section if line.startswith("reclaim: "))
    assert outcome == "reclaim: notebook-idle evicted; training bound to demo-reclaim-0 on GPUs 0,1"
    events = after(section, "events:")
    events = events[: events.index("")] if "" in events else events
    reasons = {(line.split()[0], line.split()[1]) for line in events}
    assert ("notebook-idle", "Reclaimed") in reasons, events
    assert ("training", "ReclaimIdleGPUs") in reasons, events
    assert ("training", "Scheduled") in reasons, events
    reclaimed = next(line for line in events if " Reclaimed " in line)
    assert "evicted: GPU usage " in reclaimed and "over 10 s" in reclaimed


def check_busy_time(lines: list[str]) -> None:
    """The busy share of the demo namespace lies strictly between 0 and 1 (idle notebooks and busy
    training share it), and idle-report lists the idle notebook of the placement step."""
    section = after(lines, "step 3, busy-time: ")
    assert section[0].startswith("busy share of measured GPU time since the scheduler started ")
    table = after(section, "busy share of measured GPU time")
    assert table[0].split()[:2] == ["NAMESPACE", "BUSY"], section
    row = next(line.split() for line in table[1:] if line.split()[:1] == [NAMESPACE])
    share, busy, measured, allocated = (float(cell) for cell in row[1:5])
    assert 0.0 < share < 1.0, row
    assert 0 < busy <= measured <= allocated, row
    report = after(section, "$ ")
    command = next(line for line in section if line.startswith("$ "))
    assert " idle-report --kubeconfig " in command and " --config " in command
    assert report[0].split()[:3] == ["NAMESPACE", "POD", "NODE"], section
    rows = {tuple(line.split()[:2]) for line in report[1 : report.index("")]}
    assert (NAMESPACE, "notebook") in rows, report
    assert (NAMESPACE, "ddp-4") not in rows, report


def check_gang(lines: list[str]) -> None:
    """The gang waits with nothing bound while one of its nodes is held (the PodGroup and
    `explain --pod-group` say why), then all members bind, one per gang node."""
    section = after(lines, "step 4, gang: ")
    waiting = next(line for line in section if line.startswith("gang: "))
    assert waiting.startswith(
        f"gang: 0 of {GANG_MEMBERS} members bound, all wait although 3 would fit; "
        f"PodGroup {GANG}: PodGroupInitiallyScheduled=False Unschedulable: "
        f"gang {GANG}: only 3 of minCount {GANG_MEMBERS} members fit: "
    ), waiting
    plan = after(section, "$ ")
    command = next(line for line in section if line.startswith("$ "))
    assert f" explain --pod-group {NAMESPACE}/{GANG} --kubeconfig " in command
    assert plan[0] == f"PodGroup {NAMESPACE}/{GANG} (scheduling.k8s.io/v1beta1): minCount 4"
    assert plan[1] == waiting.split(": ", 3)[3], plan  # the daemon's verdict, word for word
    members = {row.split()[0]: row.split() for row in plan[3:8] if row.split()}
    assert members.keys() == {"MEMBER", *(f"{GANG}-{i}" for i in range(GANG_MEMBERS))}
    assert all(row[1] == "unplaced" for name, row in members.items() if name != "MEMBER")
    table = after(section, "deleting gang-blocker frees 8 GPUs:")
    rows = {line.split()[0]: line.split() for line in table if line.startswith(f"{GANG}-")}
    assert sorted(rows) == [f"{GANG}-{i}" for i in range(GANG_MEMBERS)], table
    assert sorted(row[1] for row in rows.values()) == [f"demo-gang-{i}" for i in range(4)]
    assert {row[2] for row in rows.values()} == {"0,1,2,3,4,5,6,7"}
    assert {row[3] for row in rows.values()} == {"spans"}  # 8 GPUs over two NVLink domains
    done = next(line for line in table if line.startswith("gang: "))
    assert done == (
        f"gang: all {GANG_MEMBERS} members of {GANG} bound, one per node; PodGroup {GANG}: "
        "PodGroupInitiallyScheduled=True Scheduled: 4 of minCount 4 members bound"
    ), done


def check_dra(lines: list[str]) -> None:
    """On the step's own DRA node, the holder gets gpu-0 (selected by UUID), the 2-GPU pod
    gpu-1,gpu-2 in domain 0 (as first fit would), and the 4-GPU pod domain 1 whole where first
    fit would have split gpu-3..gpu-6 over both domains; the last claim carries the finalizer,
    the allocation and the reservation."""
    section = after(lines, "step 5, dra: ")
    assert section[0].startswith("added demo-dra-0 for this step: 8 H200 GPUs"), section[:3]
    assert "uuid == 'GPU-" in section[1], section[:3]
    table = after(section, "the devices gpu-scheduler wrote into each claim's status.allocation")
    assert table[0].split() == ["POD", "NODE", "CLAIM", "DEVICES", "DOMAIN", "FIRST", "FIT",
                                "FIRST", "FIT", "DOMAIN"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in table[1:4]}
    assert rows["dra-holder"] == ["dra-holder", "demo-dra-0", "dra-holder", "gpu-0", "0",
                                  "gpu-0", "0"]  # fmt: skip
    pair, quad = rows["dra-pair"], rows["dra-quad"]
    assert pair[1] == quad[1] == "demo-dra-0", table
    assert pair[2].startswith("dra-pair-gpus-") and quad[2].startswith("dra-quad-gpus-")
    assert pair[3:] == ["gpu-1,gpu-2", "0", "gpu-1,gpu-2", "0"], table
    assert quad[3:] == ["gpu-4,gpu-5,gpu-6,gpu-7", "1", "gpu-3,gpu-4,gpu-5,gpu-6", "spans", "0,1"]
    summary = table[4]
    assert summary.startswith(f"dra: claim {quad[2]}: metadata.finalizers "
                              "resource.kubernetes.io/delete-protection, then status.allocation "
                              "gpu-4,gpu-5,gpu-6,gpu-7 (pool demo-dra-0 of driver gpu.nvidia.com;"
                              " nodeSelector metadata.name In demo-dra-0) with "
                              "status.reservedFor pods/dra-quad"), summary  # fmt: skip


def printed_commands(lines: list[str]) -> list[str]:
    section = after(lines, "try next, from the repository root")
    return [line.strip() for line in section[: section.index("")]]


def run_printed(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shlex.split(command), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )


def check_commands(lines: list[str], work_dir: Path) -> None:
    commands = printed_commands(lines)
    explain = next(c for c in commands if " explain --pod demo/too-big " in c)
    assert not Path(shlex.split(explain)[0]).is_absolute()  # the venv's, relative to the repo
    result = run_printed(explain)
    assert result.returncode == 0, result.stderr
    summary, *rows = result.stdout.splitlines()
    assert summary.startswith("0/") and "nodes are available" in summary, summary
    assert rows[0].split()[:2] == ["NODE", "FEASIBLE"] and len(rows) > 3
    assert all(row.split()[1] == "no" for row in rows[1:])
    # The README's line is the demo's, with the default work folder.
    readme = (REPO_ROOT / "README.md").read_text()
    default = DEFAULT_WORK_DIR.relative_to(REPO_ROOT)
    assert explain.replace(str(work_dir), str(default)) in readme
    missing = run_printed(explain.replace("demo/too-big", "demo/missing"))
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.splitlines() == [
        "gpu-scheduler explain: pod demo/missing not found; "
        "list the pods with `kubectl get pods -n demo`"
    ]
    plan = run_printed(
        next(c for c in commands if f" explain --pod-group {NAMESPACE}/{GANG} " in c)
    )
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[1].startswith(f"gang {GANG} fits: 0 member(s) placed, 4 bound")
    events = run_printed(next(c for c in commands if " get events " in c))
    assert events.returncode == 0 and "Reclaimed" in events.stdout
    claims = run_printed(next(c for c in commands if " get resourceclaims " in c))
    assert claims.returncode == 0, claims.stderr
    listed = {line.split()[0]: line.split()[1:] for line in claims.stdout.splitlines()[1:]}
    assert listed["dra-holder"] == ["gpu-0", "dra-holder"], claims.stdout
    quad = next(row for name, row in listed.items() if name.startswith("dra-quad-gpus-"))
    assert quad == ["gpu-4,gpu-5,gpu-6,gpu-7", "dra-quad"], claims.stdout


def check_operations_doc(lines: list[str], work_dir: Path) -> None:
    """Every docs/operations.md command that needs the demo runs as written (the demo's folder and
    kubectl substituted), and the ones about reclaim show the demo's eviction."""
    kubectl = shlex.split(next(c for c in printed_commands(lines) if " get events " in c))[0]
    outputs = {}
    for command in operations_commands():
        if DEMO_DIR not in command:
            continue
        line = command.replace(DEMO_DIR, str(work_dir))
        if line.startswith("kubectl "):
            line = shlex.quote(kubectl) + line.removeprefix("kubectl")
        result = subprocess.run(
            ["bash", "-c", line], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, (command, result.stderr)
        outputs[command] = result.stdout
    reclaimed = next(out for c, out in outputs.items() if "reason=Reclaimed" in c)
    assert "notebook-idle" in reclaimed and "evicted: GPU usage" in reclaimed
    pending = next(out for c, out in outputs.items() if "jsonpath" in c)
    assert "the largest node has 8" in pending
    offline = next(out for c, out in outputs.items() if "--pod-file" in c)
    assert '"feasible": false' in offline


def test_demo_walks_through_its_steps_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    work_dir = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "hack.demo", "--count", "1", "--work-dir", str(work_dir)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = read_until_ready(demo)
        assert lines and lines[-1] == READY_LINE, lines
        for number, step in enumerate(STEPS, start=1):  # each step says what it shows
            assert f"step {number}, {step.name}: {step.explanation}" in lines
        check_placement(lines)
        check_reclaim(lines)
        check_busy_time(lines)
        check_gang(lines)
        check_dra(lines)
        check_commands(lines, work_dir)
        check_operations_doc(lines, work_dir)
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 0, rest
    assert "every component is gone" in rest
    # Kueue is only started (and built) by --kueue.
    assert not any("Kueue" in line for line in lines), lines
    assert not (work_dir / "kueue").exists() and not (work_dir / "logs" / "kueue.log").exists()
