"""scheduler-plugins' coscheduling PodGroups (scheduling.x-k8s.io/v1alpha1, a CRD): reads only,
through the generic custom objects API."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client

GROUP = "scheduling.x-k8s.io"
VERSION = "v1alpha1"
PLURAL = "podgroups"


def list_coscheduling_groups(api_client: client.ApiClient) -> Callable[..., Awaitable[Any]]:
    """A list function over the PodGroups of every namespace, for `scheduler.kube.informer`
    (while the CRD is not served, the informer's list fails and it retries with backoff)."""
    custom = client.CustomObjectsApi(api_client)
    return functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
