"""The KEDA component (issue 21, point 4): deploy/k8s/components/keda, included by an overlay,
rendered with `kubectl kustomize` and validated offline against KEDA's own CRD schemas (vendored
from kedacore/keda v2.20.2 in deploy/k8s/components/keda/crds), strictly: an unknown field
fails as the API server's strict field validation would. No cluster needed."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "deploy" / "k8s"
COMPONENT = K8S / "components" / "keda"
CRDS = COMPONENT / "crds"
KEDA_VERSION = "v2.20.2"

Obj = dict[str, Any]

jsonschema = pytest.importorskip("jsonschema", reason="the jsonschema package is not installed")


def render(tmp_path: Path, *, namespace: str = "fleetgate", name_prefix: str = "") -> list[Obj]:
    """An overlay of the base with the component, as a user writes one."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot render deploy/k8s with `kubectl kustomize`")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    doc: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [os.path.relpath(K8S / "base", overlay)],
        "components": [os.path.relpath(COMPONENT, overlay)],
    }
    if name_prefix:
        doc["namePrefix"] = name_prefix
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def one(objects: list[Obj], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"no {kind} {name}"
    return found[0]


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (``additionalProperties: false`` wherever an
    object lists its properties and does not keep unknown fields)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and \
                not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_validator(kind: str) -> Any:
    path = CRDS / f"keda.sh_{kind.lower()}s.yaml"
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert crd["spec"]["names"]["kind"] == kind
    version = next(v for v in crd["spec"]["versions"] if v["served"] and v["storage"])
    assert version["name"] == "v1alpha1"
    return jsonschema.Draft7Validator(strict(version["schema"]["openAPIV3Schema"]))


def errors(obj: Obj) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in crd_validator(obj["kind"]).iter_errors(obj)]


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return render(tmp_path_factory.mktemp("keda"))


def test_the_component_is_a_kustomize_component_with_the_keda_crds_of_a_named_release() -> None:
    doc = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text(encoding="utf-8"))
    assert (doc["apiVersion"], doc["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    assert KEDA_VERSION in (CRDS / "README.md").read_text(encoding="utf-8")
    for kind in ("ScaledObject", "TriggerAuthentication"):
        crd_validator(kind)


def test_the_rendered_keda_objects_validate_against_kedas_own_crd_schemas(
    objects: list[Obj],
) -> None:
    for kind in ("ScaledObject", "TriggerAuthentication"):
        obj = one(objects, kind)
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        assert errors(obj) == [], kind


def test_the_schema_check_refuses_a_misspelled_field_and_a_wrong_type(objects: list[Obj]) -> None:
    scaled = one(objects, "ScaledObject")
    typo = copy.deepcopy(scaled)
    typo["spec"]["maxReplicas"] = typo["spec"].pop("maxReplicaCount")  # the HPA's spelling
    assert any("maxReplicas" in e for e in errors(typo))
    wrong = copy.deepcopy(scaled)
    wrong["spec"]["minReplicaCount"] = "one"
    assert errors(wrong)
    auth = copy.deepcopy(one(objects, "TriggerAuthentication"))
    del auth["spec"]["secretTargetRef"][0]["key"]
    assert errors(auth)


def test_the_scaledobject_reads_the_scaling_route_of_the_fleet_with_the_view_token(
    objects: list[Obj],
) -> None:
    scaled = one(objects, "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "metrics-api" and meta["format"] == "json"
    assert meta["valueLocation"] == "schedulable_backlog"  # not the raw backlog: the trap
    assert meta["authMode"] == "bearer" and float(meta["targetValue"]) > 0
    url = urlsplit(meta["url"])
    fleet = named(objects, "ConfigMap", one_name(objects, "ConfigMap", "fleetgate-config"))
    assert url.path == f"/api/fleets/{fleet['data']['fleet']}/scaling"
    service = named(objects, "Service", "fleetgate-coordinator")
    namespace = service["metadata"]["namespace"]
    assert url.hostname == f"fleetgate-coordinator.{namespace}.svc.cluster.local"
    assert url.port == service["spec"]["ports"][0]["port"]
    auth = one(objects, "TriggerAuthentication")
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["parameter"] == "token"  # KEDA's bearer token parameter
    secret = named(objects, "Secret", ref["name"])
    assert ref["key"] in secret.get("stringData", secret.get("data", {}))
    coordinator = named(objects, "Deployment", "fleetgate-coordinator")
    env = {e["name"]: e for c in coordinator["spec"]["template"]["spec"]["containers"]
           for e in c.get("env", [])}
    assert env["FLEETGATE_VIEW_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": ref["name"], "key": ref["key"]}


def one_name(objects: list[Obj], kind: str, prefix: str) -> str:
    (name,) = [o["metadata"]["name"] for o in objects
               if o["kind"] == kind and o["metadata"]["name"].startswith(prefix)]
    return name


def test_the_scaledobject_targets_the_replica_deployment_and_owns_its_count(
    objects: list[Obj],
) -> None:
    spec = one(objects, "ScaledObject")["spec"]
    target = spec["scaleTargetRef"]
    replica = named(objects, "Deployment", target["name"])
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    assert replica["metadata"]["labels"]["app.kubernetes.io/component"] == "replica"
    assert "replicas" not in replica["spec"]  # the HPA KEDA makes owns it
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["minReplicaCount"] <= spec["fallback"]["replicas"] <= spec["maxReplicaCount"]


def test_the_route_the_scaledobject_reads_is_one_the_coordinator_serves() -> None:
    from coordinator.settings import CoordinatorSettings
    from coordinator.web.api import create_app

    app = create_app(CoordinatorSettings.model_validate(
        {"admin_token": "a" * 24, "redis_url": "redis://127.0.0.1:1/0"}), run_watcher=False)
    paths = {getattr(route, "path", "") for route in app.routes}
    assert "/api/fleets/{name}/scaling" in paths


def test_a_name_prefix_in_the_overlay_renames_the_references_with_the_objects(
    tmp_path: Path,
) -> None:
    objects = render(tmp_path, namespace="shop", name_prefix="shop-")
    scaled = one(objects, "ScaledObject")
    named(objects, "Deployment", scaled["spec"]["scaleTargetRef"]["name"])
    auth = named(objects, "TriggerAuthentication",
                 scaled["spec"]["triggers"][0]["authenticationRef"]["name"])
    named(objects, "Secret", auth["spec"]["secretTargetRef"][0]["name"])
    assert scaled["metadata"]["namespace"] == "shop"
