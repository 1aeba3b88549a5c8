"""The deployment's token boundary: no replica can read a token the coordinator accepts.

A replica pod runs the operator's handler code. Its own admin routes (/pool*) need a token, but
if that token (or any other Secret key the replica can read) is one the coordinator's API
accepts, any handler can pause or resume every fleet. The manifests are rendered as they would
be applied (`kubectl kustomize` of the base and of every overlay; compose.yaml parsed with
pyyaml) and, per rendering, what a replica container can read (env `secretKeyRef`, `envFrom`
of a Secret, Secret volumes, projected or not) is compared with where the coordinator's
tokens come from.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.settings import CoordinatorSettings

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
KUSTOMIZATIONS = [
    DEPLOY / "k8s" / "base",
    *sorted(path.parent for path in (DEPLOY / "k8s" / "overlays").glob("*/kustomization.yaml")),
]

# The coordinator settings through which it accepts a Bearer token (the tokens file holds more).
TOKEN_FIELDS = ("admin_token", "view_token", "tokens_file")
TOKEN_VARIABLES = frozenset(f"FLEETGATE_{field.upper()}" for field in TOKEN_FIELDS)

Obj = dict[str, Any]
Source = tuple[str, str]  # (Secret name, key); key "*" is every key of the Secret
ANY_KEY = "*"


def test_the_token_fields_are_the_coordinators_settings() -> None:
    assert set(TOKEN_FIELDS) <= set(CoordinatorSettings.model_fields)


def _render(directory: Path) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot render deploy/k8s with `kubectl kustomize`")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _pods(objects: list[Obj]) -> list[Obj]:
    kinds = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
    return [o["spec"]["template"]["spec"] for o in objects if o["kind"] in kinds]


def _containers(pod: Obj) -> list[Obj]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _runs(container: Obj, command: str) -> bool:
    return command in [*container.get("command", []), *container.get("args", [])]


def _secret_volumes(pod: Obj) -> dict[str, set[Source]]:
    """Each volume name -> the Secret keys it exposes."""
    volumes: dict[str, set[Source]] = {}
    for volume in pod.get("volumes", []):
        sources = []
        if "secret" in volume:
            sources.append(volume["secret"])
        for projected in volume.get("projected", {}).get("sources", []):
            if "secret" in projected:
                sources.append({"secretName": projected["secret"]["name"], **projected["secret"]})
        keys: set[Source] = set()
        for source in sources:
            items = source.get("items")
            name = source["secretName"]
            keys |= {(name, item["key"]) for item in items} if items else {(name, ANY_KEY)}
        volumes[volume["name"]] = keys
    return volumes


def _readable(pod: Obj, container: Obj) -> set[Source]:
    """Every Secret key a container can read: env, envFrom and mounted Secret volumes."""
    readable: set[Source] = set()
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            readable.add((ref["name"], ref["key"]))
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            readable.add((source["secretRef"]["name"], ANY_KEY))
    volumes = _secret_volumes(pod)
    for mount in container.get("volumeMounts", []):
        readable |= volumes.get(mount["name"], set())
    return readable


def _accepted(pod: Obj, container: Obj) -> set[Source]:
    """The Secret keys the coordinator takes its tokens from."""
    accepted: set[Source] = set()
    files: set[str] = set()
    for var in container.get("env", []):
        if var["name"] not in TOKEN_VARIABLES:
            continue
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            accepted.add((ref["name"], ref["key"]))
        if var["name"] == "FLEETGATE_TOKENS_FILE" and "value" in var:
            files.add(var["value"])
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            accepted |= {(source["secretRef"]["name"], name) for name in TOKEN_VARIABLES}
    volumes = _secret_volumes(pod)
    for mount in container.get("volumeMounts", []):
        if any(path.startswith(mount["mountPath"].rstrip("/") + "/") for path in files):
            accepted |= volumes.get(mount["name"], set())
    return accepted


def _shared(readable: set[Source], accepted: set[Source]) -> set[Source]:
    return {
        (name, key)
        for name, key in accepted
        if (name, key) in readable or (name, ANY_KEY) in readable
        or (key == ANY_KEY and any(r_name == name for r_name, _ in readable))
    }


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda path: path.name)
def test_no_replica_container_can_read_a_token_the_coordinator_accepts(directory: Path) -> None:
    objects = _render(directory)
    pods = _pods(objects)
    coordinators = [(p, c) for p in pods for c in _containers(p) if _runs(c, "serve")]
    replicas = [(p, c) for p in pods for c in _containers(p) if _runs(c, "fleetgate-replica")]
    assert coordinators and replicas, "the rendering has no coordinator or no replica"
    accepted = set().union(*(_accepted(p, c) for p, c in coordinators))
    assert accepted, "the coordinator reads no token from a Secret"
    for pod, container in replicas:
        readable = _readable(pod, container)
        assert "FLEETGATE_ADMIN_TOKEN" in {v["name"] for v in container.get("env", [])}, (
            "a replica needs its own admin token for /pool*"
        )
        assert not _shared(readable, accepted), (
            f"{directory.name}: replica container {container['name']} can read the coordinator's"
            f" token(s) {sorted(_shared(readable, accepted))}"
        )


def test_the_dev_replica_admin_token_differs_from_every_coordinator_token() -> None:
    objects = _render(DEPLOY / "k8s" / "overlays" / "dev")
    secrets = {
        o["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
        for o in objects if o["kind"] == "Secret"
    }
    pods = _pods(objects)
    accepted = {
        secrets[name][key]
        for p in pods for c in _containers(p) if _runs(c, "serve")
        for name, key in _accepted(p, c)
    }
    replica_tokens = {
        secrets[var["valueFrom"]["secretKeyRef"]["name"]][var["valueFrom"]["secretKeyRef"]["key"]]
        for p in pods for c in _containers(p) if _runs(c, "fleetgate-replica")
        for var in c["env"] if var["name"] == "FLEETGATE_ADMIN_TOKEN"
    }
    assert replica_tokens and not replica_tokens & accepted


def _compose_variables(value: object) -> set[str]:
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", str(value)))


def test_no_compose_replica_gets_a_variable_the_coordinator_takes_a_token_from() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    coordinator = services["coordinator"]
    accepted = set().union(*(
        _compose_variables(value)
        for key, value in coordinator["environment"].items() if key in TOKEN_VARIABLES
    ))
    assert {"FLEETGATE_ADMIN_TOKEN", "FLEETGATE_VIEW_TOKEN"} <= accepted
    replicas = {n: s for n, s in services.items() if s.get("command") == ["fleetgate-replica"]}
    assert replicas
    for name, service in replicas.items():
        assert "env_file" not in service, f"{name}: an env_file could carry the coordinator's token"
        environment = service["environment"]
        assert "FLEETGATE_ADMIN_TOKEN" in environment, f"{name} needs its own admin token"
        used = set().union(*(_compose_variables(v) for v in environment.values()))
        assert not used & accepted, f"{name} reads the coordinator's {sorted(used & accepted)}"
        for secret in service.get("secrets", []):
            assert secret not in coordinator.get("secrets", []), f"{name} shares {secret}"
