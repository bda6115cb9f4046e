"""docs/operations.md, "Rollback, downgrade and uninstall": its commands name objects the manifests
and the scheduler really make, and deleting by name leaves exactly the fencing policy and its
binding, as the section says."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from scheduler.config import SchedulerConfig
from scheduler.kube.device_taint_rules import MANAGED_BY
from tests.datasets import REPO_ROOT
from tests.docs import OPERATIONS, section_blocks
from tests.unit.test_operations_doc import cached_kubectl, kustomize

SECTION = "Rollback, downgrade and uninstall"
FENCE = {
    ("ValidatingAdmissionPolicy", "gpu-scheduler-lease-fence"),
    ("ValidatingAdmissionPolicyBinding", "gpu-scheduler-lease-fence"),
}


def commands() -> list[list[str]]:
    """Every command of the section, split into words."""
    return [
        shlex.split(line)
        for block in section_blocks(OPERATIONS.read_text(), SECTION, "sh")
        for line in block.splitlines()
        if line.strip()
    ]


def deletes_by_name() -> list[list[str]]:
    """`kubectl delete KIND NAME...` lines (not -k, -f or -l)."""
    return [
        words[2:]
        for words in commands()
        if words[:2] == ["kubectl", "delete"]
        and not words[2].startswith("-")
        and not any(w.startswith("-") and w != "--ignore-not-found" for w in words[3:])
    ]


def webhook_objects() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted((REPO_ROOT / "manifests" / "webhooks").glob("webhook*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def test_deleting_by_name_leaves_exactly_the_fencing_policy_and_its_binding() -> None:
    base = kustomize(cached_kubectl(), REPO_ROOT, "manifests/")
    kinds = {o["kind"].lower(): o["kind"] for o in base}
    named = {
        (kinds[kind], name)
        for kind, *names in deletes_by_name()
        if kind in kinds
        for name in names
        if not name.startswith("-")
    }
    existing = {(o["kind"], o["metadata"]["name"]) for o in base}
    assert named <= existing, named - existing  # no name the manifests do not make
    namespaces = {name for kind, name in named if kind == "Namespace"}
    left = {
        (o["kind"], o["metadata"]["name"])
        for o in base
        if o["metadata"].get("namespace") not in namespaces
        and (o["kind"], o["metadata"]["name"]) not in named
    }
    assert left == FENCE


def test_the_webhook_configurations_deleted_first_are_the_components() -> None:
    made = {(o["kind"].lower(), o["metadata"]["name"]) for o in webhook_objects()}
    deleted = {
        (kind, name)
        for kind, *names in deletes_by_name()
        if kind.endswith("webhookconfiguration")
        for name in names
        if not name.startswith("-")
    }
    assert deleted == {(kind, name) for kind, name in made if kind.endswith("webhookconfiguration")}
    # The namespace label the section removes is the mutating webhook's opt-in.
    (mutating,) = [o for o in webhook_objects() if o["kind"] == "MutatingWebhookConfiguration"]
    (label,) = mutating["webhooks"][0]["namespaceSelector"]["matchLabels"]
    assert ["kubectl", "label", "namespace", "--all", f"{label}-"] in commands()


def test_the_selectors_match_what_the_scheduler_and_the_manifests_write() -> None:
    name = SchedulerConfig().scheduler_name
    lines = [" ".join(words) for words in commands()]
    assert f"kubectl delete devicetaintrules -l {MANAGED_BY}={name}" in lines
    assert (
        f"kubectl get pods -A --field-selector spec.schedulerName={name},status.phase=Pending"
        in lines
    )
    deployment = yaml.safe_load((REPO_ROOT / "manifests" / "deployment.yaml").read_text())
    ((key, value),) = deployment["spec"]["template"]["metadata"]["labels"].items()
    (wait,) = [words for words in commands() if words[:2] == ["kubectl", "wait"]]
    assert f"{key}={value}" in wait and "--for=delete" in wait
    for words in commands():
        if "-f" in words:
            assert (REPO_ROOT / words[words.index("-f") + 1]).is_file(), words


def test_the_full_uninstall_deletes_the_overlay() -> None:
    """`kubectl delete -k` names the overlay the install section builds, after the scale-down."""
    order = [" ".join(words[:3]) for words in commands()]
    assert order.index("kubectl scale deployment") < order.index("kubectl delete -k")
    assert ["kubectl", "delete", "-k", "my-cluster/"] in commands()
