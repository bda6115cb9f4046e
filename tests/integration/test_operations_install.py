"""docs/operations.md, "Install on a real cluster" and "Upgrade": every `kubectl apply -k` line is
accepted by the local cluster's API server (server-side dry run: every object validated, the
admission policies' CEL compiled, nothing stored). The offline checks of the same kustomizations
are in tests/unit/test_operations_doc.py."""

from __future__ import annotations

from pathlib import Path

from hack.localcluster import LocalCluster
from tests.unit.test_operations_doc import install_commands, lay_out_install

NAMESPACE = "gpu-scheduler"
"""The manifests' namespace: a server-side dry run of its namespaced objects needs it to exist."""


def test_every_apply_line_is_accepted_by_the_api_server(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    folder = lay_out_install(tmp_path)
    applies = [c for c in install_commands() if c.startswith("kubectl apply -k ")]
    assert {c.split()[3] for c in applies} == {"manifests/", "my-cluster/"}
    created = cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0
    if created:
        cluster.kubectl("create", "namespace", NAMESPACE)
    try:
        for command in applies:
            target = folder / command.split()[3]
            result = cluster.kubectl(
                "apply", "-k", str(target), "--dry-run=server", "-o", "name", check=False
            )
            assert result.returncode == 0, (command, result.stderr)
            names = set(result.stdout.split())
            assert {
                "deployment.apps/gpu-scheduler",
                "validatingadmissionpolicy.admissionregistration.k8s.io/gpu-scheduler-lease-fence",
                "validatingadmissionpolicybinding.admissionregistration.k8s.io/"
                "gpu-scheduler-lease-fence",
            } <= names, (command, result.stdout)
            # Nothing was stored: the dry run leaves the cluster as it was.
            absent = cluster.kubectl("get", "deployment", "-n", NAMESPACE, "-o", "name")
            assert absent.stdout.strip() == ""
    finally:
        if created:
            cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
