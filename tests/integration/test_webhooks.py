"""The admission webhooks against the real API server.

The daemon serves them on 127.0.0.1 (a free port, a self-signed certificate); each test registers
URL-based webhook configurations (clientConfig.url and the caBundle the daemon reports) scoped to
its own objects, and deletes them at the end, whatever happened.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from hack.localcluster import G2, LocalCluster
from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.pki import write_pki
from reclaim.policy import POLICY_ANNOTATIONS, TOLERATION_SECONDS
from scheduler.admission.rules import ENABLED_LABEL, priority_class_denial
from scheduler.admission.server import (
    MUTATE_POD,
    VALIDATE_PRIORITY_CLASS,
    loop_signal_handlers,
)
from scheduler.daemon import Daemon
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.kube import eventually, gpu_pod, make_namespace
from tests.scheduling import (
    TEST_LABEL,
    isolated,
    make_nodes,
    pod_json,
    running_daemon,
    settings_for,
    wait_bound,
)

VALID_POLICY = dict(zip(POLICY_ANNOTATIONS, ("1000", "60", "300", "5"), strict=True))
MANIFESTS = REPO_ROOT / "manifests"


def shipped_webhook(file: str, daemon: Daemon, **scoping: Any) -> dict[str, Any]:
    """The webhook entry of manifests/`file` (its rules, failurePolicy, timeout, selectors), with
    its Service swapped for `daemon`'s URL (same path) and CA bundle, and `scoping` added:
    `names` narrows the namespaceSelector to those namespaces, `objectSelector` is set."""
    documents = yaml.safe_load_all((MANIFESTS / file).read_text())
    (configuration,) = (d for d in documents if d["kind"].endswith("WebhookConfiguration"))
    (webhook,) = configuration["webhooks"]
    config = daemon.admission.client_config
    assert config is not None
    path = webhook["clientConfig"]["service"]["path"]
    webhook["clientConfig"] = {"url": config["url"] + path, "caBundle": config["caBundle"]}
    if "names" in scoping:
        selector = webhook.setdefault("namespaceSelector", {})
        selector.setdefault("matchExpressions", []).append(
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": scoping["names"]}
        )
    if "objectSelector" in scoping:
        webhook["objectSelector"] = scoping["objectSelector"]
    return webhook


@asynccontextmanager
async def webhook_configurations(
    api_client: client.ApiClient,
    name: str,
    validating: Mapping[str, Any] | None = None,
    mutating: Mapping[str, Any] | None = None,
) -> AsyncIterator[None]:
    """Create the given webhook configurations named `name`; delete them on the way out."""
    admission = client.AdmissionregistrationV1Api(api_client)
    try:
        if validating is not None:
            await admission.create_validating_webhook_configuration(
                {"metadata": {"name": name}, "webhooks": [validating]}
            )
        if mutating is not None:
            await admission.create_mutating_webhook_configuration(
                {"metadata": {"name": name}, "webhooks": [mutating]}
            )
        yield
    finally:
        for delete in (
            admission.delete_validating_webhook_configuration,
            admission.delete_mutating_webhook_configuration,
        ):
            try:
                await delete(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def _priority_class(name: str, annotations: Mapping[str, str], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": name,
            "labels": {TEST_LABEL: namespace},
            "annotations": dict(annotations),
        },
        "value": 100,
    }


async def _refusal(scheduling: client.SchedulingV1Api, body: dict[str, Any]) -> str | None:
    """The API server's refusal message for creating `body`; None (and the class deleted again)
    when it was admitted."""
    try:
        await scheduling.create_priority_class(body)
    except client.ApiException as error:
        if error.status in (400, 403, 422):
            return str(json.loads(error.body).get("message", ""))
        raise
    await scheduling.delete_priority_class(body["metadata"]["name"])
    return None


async def test_a_malformed_reclaim_annotation_is_refused_naming_it_and_the_allowed_values(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str
) -> None:
    settings = settings_for(
        namespace, webhooks={"enabled": True, "address": "127.0.0.1", "port": 0}
    )
    scheduling = client.SchedulingV1Api(api_client)
    bad = _priority_class(f"{namespace}-bad", {**VALID_POLICY, TOLERATION_SECONDS: "-5"}, namespace)
    partial = _priority_class(f"{namespace}-partial", {TOLERATION_SECONDS: "60"}, namespace)
    good = _priority_class(f"{namespace}-good", VALID_POLICY, namespace)
    loop = asyncio.get_running_loop()
    handlers = loop_signal_handlers(loop)
    async with running_daemon(cluster, settings) as daemon:
        await eventually(daemon.admission.serving.wait, what="webhook server listening")
        assert loop_signal_handlers(loop) == handlers  # kopf's SIGINT/SIGTERM handlers undone
        webhook = shipped_webhook(
            "webhooks/webhook-validating.yaml",
            daemon,
            objectSelector={"matchLabels": {TEST_LABEL: namespace}},
        )
        assert webhook["clientConfig"]["url"].endswith("/" + VALIDATE_PRIORITY_CLASS)
        async with webhook_configurations(api_client, namespace, validating=webhook):
            # The API server picks new configurations up within a second or so: retry until then.
            message = await eventually(lambda: _refusal(scheduling, bad), what="bad class refused")
            assert TOLERATION_SECONDS in message
            assert "must be an integer from 0 to 31536000" in message
            assert "'-5'" in message
            message = await eventually(lambda: _refusal(scheduling, partial), what="partial")
            for key in POLICY_ANNOTATIONS:
                if key != TOLERATION_SECONDS:
                    assert f"{key} is missing" in message
            assert await _refusal(scheduling, good) is None  # valid: admitted


async def _dry_run_scheduler_name(core: client.CoreV1Api, namespace: str) -> str:
    pod = gpu_pod("probe", scheduler_name="")
    del pod["spec"]["schedulerName"]
    created = await core.create_namespaced_pod(namespace, pod, dry_run="All")
    return str(created.spec.scheduler_name)


async def test_gpu_pods_of_labelled_namespaces_get_our_scheduler_and_others_are_untouched(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    settings = settings_for(
        namespace, webhooks={"enabled": True, "address": "127.0.0.1", "port": 0}
    )
    await core_api.patch_namespace(namespace, {"metadata": {"labels": {ENABLED_LABEL: "true"}}})
    other = await make_namespace(core_api, f"{namespace}-unlabelled")
    (node,) = await make_nodes(core_api, [isolated(G2, namespace)])
    try:
        async with running_daemon(cluster, settings) as daemon:
            await eventually(daemon.admission.serving.wait, what="webhook server listening")
            webhook = shipped_webhook("webhooks/webhooks.yaml", daemon, names=[namespace, other])
            assert webhook["clientConfig"]["url"].endswith("/" + MUTATE_POD)
            async with webhook_configurations(api_client, namespace, mutating=webhook):

                async def mutated() -> bool:
                    return await _dry_run_scheduler_name(core_api, namespace) == namespace

                await eventually(mutated, what="the mutating webhook in effect")
                # A GPU pod naming no scheduler (the API server fills in default-scheduler).
                pod = gpu_pod("job", node_selector={TEST_LABEL: namespace})
                del pod["spec"]["schedulerName"]
                await core_api.create_namespaced_pod(namespace, pod)
                bound = await wait_bound(core_api, namespace, "job")
                assert bound["spec"]["schedulerName"] == namespace
                assert bound["spec"]["nodeName"] == node
                # A GPU pod in a namespace without the label, and a CPU pod in ours: untouched.
                await core_api.create_namespaced_pod(other, {**pod, "metadata": {"name": "job"}})
                assert (await pod_json(core_api, other, "job"))["spec"][
                    "schedulerName"
                ] == "default-scheduler"
                cpu = gpu_pod("cpu", gpus=0)
                del cpu["spec"]["schedulerName"]
                await core_api.create_namespaced_pod(namespace, cpu)
                assert (await pod_json(core_api, namespace, "cpu"))["spec"][
                    "schedulerName"
                ] == "default-scheduler"
                # Another scheduler named on purpose is respected.
                named = gpu_pod("named", scheduler_name="someone-else")
                await core_api.create_namespaced_pod(namespace, named)
                assert (await pod_json(core_api, namespace, "named"))["spec"][
                    "schedulerName"
                ] == "someone-else"
    finally:
        await core_api.delete_namespace(other)


async def test_pods_are_created_while_the_webhook_server_is_down(
    cluster: LocalCluster, api_client: client.ApiClient, core_api: client.CoreV1Api, namespace: str
) -> None:
    settings = settings_for(
        namespace, webhooks={"enabled": True, "address": "127.0.0.1", "port": 0}
    )
    await core_api.patch_namespace(namespace, {"metadata": {"labels": {ENABLED_LABEL: "true"}}})
    stack = contextlib.AsyncExitStack()
    async with stack:
        daemon = await stack.enter_async_context(running_daemon(cluster, settings))
        await eventually(daemon.admission.serving.wait, what="webhook server listening")
        webhook = shipped_webhook("webhooks/webhooks.yaml", daemon, names=[namespace])
        async with webhook_configurations(api_client, namespace, mutating=webhook):

            async def mutated() -> bool:
                return await _dry_run_scheduler_name(core_api, namespace) == namespace

            await eventually(mutated, what="the mutating webhook in effect")
            await stack.aclose()  # the daemon, and its webhook server, stop
            assert not daemon.admission.serving.is_set()
            pod = gpu_pod("while-down")
            del pod["spec"]["schedulerName"]
            created = await core_api.create_namespaced_pod(namespace, pod)
            assert created.spec.scheduler_name == "default-scheduler"


# --- the ValidatingAdmissionPolicy shipped in manifests/ ---------------------------------------

POLICY_FILE = REPO_ROOT / "manifests" / "reclaim-annotations-policy.yaml"
INTEGER_VALUES = (
    "0",
    "5",
    "+5",
    "-5",
    "007",
    "0" * 31 + "5",
    "1e3",
    "5.0",
    " 5",
    "",
    "x",
    "99999999999",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "31536000",
    "31536001",
    "2592000",
    "2592001",
    "1" * 33,
)
THRESHOLD_VALUES = (
    "5",
    "0",
    "100",
    "100.0",
    "100.5",
    ".5",
    "5.",
    "1e1",
    "1e3",
    "1e-999",
    "1e999",
    "-1",
    "+50",
    "nan",
    "inf",
    "0x10",
    "5%",
    "",
    " 5",
    "1" * 33,
)


def _policy_cases() -> list[dict[str, str]]:
    """Annotation sets: none, each key missing, and each value above in each key."""
    cases: list[dict[str, str]] = [{}, dict(VALID_POLICY)]
    for key in POLICY_ANNOTATIONS:
        cases.append({k: v for k, v in VALID_POLICY.items() if k != key})
        cases.append({key: VALID_POLICY[key]})
        values = THRESHOLD_VALUES if key == POLICY_ANNOTATIONS[-1] else INTEGER_VALUES
        cases.extend({**VALID_POLICY, key: value} for value in values)
    return cases


async def _admitted(scheduling: client.SchedulingV1Api, body: dict[str, Any]) -> bool:
    try:
        await scheduling.create_priority_class(body, dry_run="All")
    except client.ApiException as error:
        if error.status in (400, 403, 422):
            return False
        raise
    return True


async def test_the_admission_policy_decides_as_the_reclaim_parser(
    api_client: client.ApiClient, namespace: str
) -> None:
    policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
    policy["metadata"]["name"] = binding["metadata"]["name"] = namespace
    binding["spec"]["policyName"] = namespace
    binding["spec"]["matchResources"] = {"objectSelector": {"matchLabels": {TEST_LABEL: namespace}}}
    admission = client.AdmissionregistrationV1Api(api_client)
    scheduling = client.SchedulingV1Api(api_client)
    await admission.create_validating_admission_policy(policy)
    try:
        await admission.create_validating_admission_policy_binding(binding)
        bad = _priority_class(namespace, {TOLERATION_SECONDS: "-5"}, namespace)

        async def in_effect() -> bool:
            return not await _admitted(scheduling, bad)

        await eventually(in_effect, what="the admission policy in effect")
        status = (await admission.read_validating_admission_policy(namespace)).status
        assert status.type_checking is None or not status.type_checking.expression_warnings
        disagreements = []
        for index, annotations in enumerate(_policy_cases()):
            body = _priority_class(f"{namespace}-{index}", annotations, namespace)
            expected = priority_class_denial(body) is None
            if await _admitted(scheduling, body) != expected:
                disagreements.append((annotations, expected))
        assert disagreements == []
        # One refusal names every problem: the API server reports only a policy's first failing
        # validation, so the policy has one that joins them all.
        every_bad = dict(zip(POLICY_ANNOTATIONS, ("high", "-5", "0", "nan"), strict=True))
        message = await _refusal(
            scheduling, _priority_class(f"{namespace}-every-bad", every_bad, namespace)
        )
        assert message is not None
        assert [key for key in POLICY_ANNOTATIONS if f"annotation {key}: must be" in message] == (
            list(POLICY_ANNOTATIONS)
        ), message
        partial_bad = _priority_class(f"{namespace}-partial", {TOLERATION_SECONDS: "-5"}, namespace)
        message = await _refusal(scheduling, partial_bad)
        assert message is not None
        assert "missing (all four reclaim-idle-resource annotations are required)" in message
        assert f"annotation {TOLERATION_SECONDS}: must be an integer from 0" in message, message
    finally:
        for delete, name in (
            (admission.delete_validating_admission_policy_binding, namespace),
            (admission.delete_validating_admission_policy, namespace),
        ):
            try:
                await delete(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


async def test_the_webhooks_serve_with_the_manifest_rbac_a_token_and_a_mounted_certificate(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """kopf logs in with the daemon's own credentials (here a ServiceAccount token) and needs no
    rights beyond manifests/rbac.yaml: it manages no webhook configuration and watches nothing.
    The certificate comes from a folder laid out as a mounted kubernetes.io/tls Secret: a leaf
    signed by a CA, with the CA in ca.crt, which becomes the caBundle."""
    pki = write_pki(tmp_path / "pki")
    cert_dir = tmp_path / "webhook-tls"
    cert_dir.mkdir()
    for source, target in (
        (pki.serving_cert, "tls.crt"),
        (pki.serving_key, "tls.key"),
        (pki.ca_cert, "ca.crt"),
    ):
        (cert_dir / target).write_bytes(source.read_bytes())
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    await core_api.patch_namespace(namespace, {"metadata": {"labels": {ENABLED_LABEL: "true"}}})
    settings = settings_for(
        namespace,
        webhooks={"enabled": True, "address": "127.0.0.1", "port": 0, "certDir": str(cert_dir)},
    )
    async with running_daemon(cluster, settings, kubeconfig) as daemon:
        await eventually(daemon.admission.serving.wait, what="webhook server listening")
        assert daemon.admission.client_config is not None
        ca_bundle = base64.b64decode(daemon.admission.client_config["caBundle"])
        assert ca_bundle == pki.ca_cert.read_bytes()
        webhook = shipped_webhook("webhooks/webhooks.yaml", daemon, names=[namespace])
        async with webhook_configurations(api_client, namespace, mutating=webhook):

            async def mutated() -> bool:
                return await _dry_run_scheduler_name(core_api, namespace) == namespace

            await eventually(mutated, what="the mutating webhook in effect")
