"""kubernetes_asyncio's generated classes loaded when first used (`scheduler.kube.lazy_client`).

The test process imported kubernetes_asyncio long ago, so every check that needs a fresh
interpreter runs one (`fresh`): the package deferred by `import scheduler`, its names the same
as the eager package's, the classes the same, deserialization and the API classes working, and
the daemon built without the modules it does not need (the generated models, the CEL library,
kopf and cryptography).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from scheduler.kube.lazy_client import NotDeferrable, bound_names
from tests.datasets import REPO_ROOT


def fresh(code: str) -> object:
    """What `code`, run in a fresh interpreter from the repository root, prints as JSON on
    its last line (log lines may come before)."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


def test_bound_names_reads_imports_and_literals_without_running_them() -> None:
    source = '''
        """Docstring."""
        from __future__ import absolute_import
        # a comment
        __version__ = "1.2.3"
        from pkg.mod_a import A
        from pkg.mod_b import B as Bee, C
        import pkg.sub as sub
        __all__ = ["A", "Bee"]
        "a lone string"
    '''
    imports, literals = bound_names(textwrap.dedent(source))
    assert imports == {
        "absolute_import": ("__future__", "absolute_import"),
        "A": ("pkg.mod_a", "A"),
        "Bee": ("pkg.mod_b", "B"),
        "C": ("pkg.mod_b", "C"),
        "sub": ("pkg.sub", None),
    }
    assert literals == {"__version__": "1.2.3", "__all__": ["A", "Bee"]}


@pytest.mark.parametrize(
    "statement",
    [
        "from pkg import *",
        "import pkg",
        "setup()",
        "VERSION = compute()",
        "if True:\n    from pkg import A",
        "def f():\n    pass",
        "from . import sibling",
    ],
)
def test_any_other_statement_is_not_deferrable(statement: str) -> None:
    with pytest.raises(NotDeferrable):
        bound_names(f"from pkg.a import A\n{statement}\n")


def test_import_scheduler_defers_the_generated_classes() -> None:
    loaded = fresh(
        """
        import json, sys
        import scheduler
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio"))))
        """
    )
    assert loaded == [
        "kubernetes_asyncio",
        "kubernetes_asyncio.client",
        "kubernetes_asyncio.client.api",
        "kubernetes_asyncio.client.models",
    ]


def test_the_deferred_packages_offer_the_same_names_as_the_eager_ones() -> None:
    listing = """
        import importlib, json, sys
        {prelude}
        packages = ("kubernetes_asyncio", "kubernetes_asyncio.client",
                    "kubernetes_asyncio.client.api", "kubernetes_asyncio.client.models")
        names = {{}}
        for name in packages:
            module = importlib.import_module(name)
            for attribute in dir(module):
                getattr(module, attribute)
            names[name] = sorted(a for a in dir(module) if not a.startswith("_"))
            names[name + ":version"] = getattr(module, "__version__", None)
        print(json.dumps(names))
    """
    eager = fresh(listing.format(prelude="import kubernetes_asyncio"))
    deferred = fresh(listing.format(prelude="import scheduler"))
    assert isinstance(eager, dict) and isinstance(deferred, dict)
    assert len(eager["kubernetes_asyncio.client.models"]) > 500  # really listed
    assert deferred == eager


def test_classes_load_on_first_use_and_deserialize_from_their_models() -> None:
    found = fresh(
        """
        import asyncio, json, sys
        import scheduler
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api
        from kubernetes_asyncio.client.models.v1_lease import V1Lease

        class Response:
            data = json.dumps({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "gpu-scheduler", "resourceVersion": "7"},
                "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
            })

        async def deserialize():
            async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api:
                assert client.CoreV1Api(api).api_client is api
                return api.deserialize(Response(), "V1Lease")

        lease = asyncio.run(deserialize())
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        print(json.dumps({
            "same classes": client.CoreV1Api is CoreV1Api and client.V1Lease is V1Lease,
            "lease": [type(lease).__name__, lease.spec.holder_identity, type(lease.spec).__name__],
            "models": sorted(models),
        }))
        """
    )
    assert found == {
        "same classes": True,
        "lease": ["V1Lease", "a", "V1LeaseSpec"],
        "models": [
            "kubernetes_asyncio.client.models.v1_lease",
            "kubernetes_asyncio.client.models.v1_lease_spec",
            "kubernetes_asyncio.client.models.v1_object_meta",
        ],
    }


def test_a_process_that_imported_the_client_first_keeps_it() -> None:
    found = fresh(
        """
        import json, sys
        import kubernetes_asyncio.client
        from scheduler.kube.lazy_client import defer_generated_client
        root = sys.modules["kubernetes_asyncio"]
        print(json.dumps([defer_generated_client(), sys.modules["kubernetes_asyncio"] is root]))
        """
    )
    assert found == [False, True]


def test_the_daemon_is_built_without_the_modules_only_some_clusters_need() -> None:
    found = fresh(
        """
        import asyncio, json, sys
        import scheduler.cli
        scheduler.cli.build_parser()
        from kubernetes_asyncio import client
        from scheduler.config import SchedulerConfig
        from scheduler.daemon import Daemon

        async def build():
            async with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api:
                Daemon(SchedulerConfig(), api)

        asyncio.run(build())
        tops = {m.split(".")[0] for m in sys.modules}
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        print(json.dumps({
            "heavy": sorted(tops & {"cel_expr_python", "kopf", "cryptography"}),
            "models": len(models),
            "apis": sorted(m.rpartition(".")[2] for m in sys.modules
                           if m.startswith("kubernetes_asyncio.client.api.")),
        }))
        """
    )
    assert isinstance(found, dict)
    assert found["heavy"] == []
    assert found["models"] == 0
    assert "core_v1_api" in found["apis"] and len(found["apis"]) < 15
