"""Static checks of the deployment: the kustomize tree under deploy/k8s, the Dockerfile and the
compose file.

The Kubernetes objects are rendered with `kubectl kustomize` (skipped, with the reason, where
kubectl is missing) and validated with the `kubernetes_validate` package's strict schemas for
KUBERNETES_VERSION. No cluster and no Docker engine are needed.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "k8s" / "base"
DEV_OVERLAY = DEPLOY / "k8s" / "overlays" / "dev"
MANAGED_REDIS_OVERLAY = DEPLOY / "k8s" / "overlays" / "managed-redis"
SENTINEL_OVERLAY = DEPLOY / "k8s" / "overlays" / "sentinel"
RULES_FILE = DEPLOY / "prometheus" / "fleetgate-rules.yml"
REDIS_CONF = BASE / "redis" / "redis.conf"

# The Kubernetes version the rendered objects are validated against (a schema set that
# kubernetes_validate ships; fields newer than this version are rejected).
KUBERNETES_VERSION = "1.30"

# Kinds whose schema is not part of Kubernetes itself (CRDs); none is rendered today, but an
# overlay adding e.g. a ServiceMonitor must not make the schema check meaningless: such objects
# are listed here explicitly rather than skipped silently.
CUSTOM_KINDS: frozenset[str] = frozenset()

KUBECTL_TIMEOUT_S = 120

Obj = dict[str, Any]


# --- rendering ---------------------------------------------------------------------------------


def _kustomize(directory: Path) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot render deploy/k8s with `kubectl kustomize`")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=KUBECTL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, (
        f"`kubectl kustomize {directory.relative_to(REPO)}` failed:\n{result.stderr}"
    )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def dev_objects() -> list[Obj]:
    return _kustomize(DEV_OVERLAY)


@pytest.fixture(scope="module")
def base_objects() -> list[Obj]:
    return _kustomize(BASE)


@pytest.fixture(scope="module")
def managed_redis_objects() -> list[Obj]:
    return _kustomize(MANAGED_REDIS_OVERLAY)


@pytest.fixture(scope="module")
def sentinel_objects() -> list[Obj]:
    return _kustomize(SENTINEL_OVERLAY)


TREES = {
    "base": "base_objects",
    "dev overlay": "dev_objects",
    "managed-redis overlay": "managed_redis_objects",
    "sentinel overlay": "sentinel_objects",
}


def _one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind}/{name}, found {len(found)}"
    return found[0]


def _named_prefix(objects: list[Obj], kind: str, prefix: str) -> Obj:
    """A generated object (ConfigMap/Secret) whose name carries a content-hash suffix."""
    found = [
        o
        for o in objects
        if o["kind"] == kind
        and (o["metadata"]["name"] == prefix or o["metadata"]["name"].startswith(prefix + "-"))
    ]
    assert len(found) == 1, f"expected exactly one {kind} named {prefix}[-hash], found {len(found)}"
    return found[0]


def _workloads(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}]


def _all_containers(workload: Obj) -> Iterator[Obj]:
    spec = workload["spec"]["template"]["spec"]
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def _container(workload: Obj, name: str) -> Obj:
    found = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name} in {workload['metadata']['name']}"
    return found[0]


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


def _selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _pod_labels(workload: Obj) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"]["labels"])


# --- kustomize + schema ------------------------------------------------------------------------


def test_the_dev_overlay_renders_every_part_of_the_deployment(dev_objects: list[Obj]) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in dev_objects}
    for expected in [
        ("Namespace", "fleetgate-dev"),
        ("StatefulSet", "fleetgate-redis"),
        ("Service", "fleetgate-redis"),
        ("Deployment", "fleetgate-replica"),
        ("PodDisruptionBudget", "fleetgate-replica"),
        ("Deployment", "fleetgate-coordinator"),
        ("Service", "fleetgate-coordinator"),
        ("NetworkPolicy", "fleetgate-redis"),
        ("Secret", "fleetgate-secrets"),
        ("ConfigMap", "fleetgate-prometheus-rules"),
    ]:
        assert expected in kinds, f"{expected} missing from the rendered dev overlay"
    namespaced = [o for o in dev_objects if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"fleetgate-dev"}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_rendered_object_validates_against_the_kubernetes_schema(
    tree: str, request: pytest.FixtureRequest
) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="the kubernetes-validate package is not installed"
    )
    objects: list[Obj] = request.getfixturevalue(TREES[tree])
    errors = []
    for obj in objects:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{where}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{where}: {exc.message}")
    assert not errors, "\n".join(errors)


# --- the replica Deployment --------------------------------------------------------------------


def test_the_replica_probes_point_at_readyz_and_healthz(dev_objects: list[Obj]) -> None:
    replica = _container(_one(dev_objects, "Deployment", "fleetgate-replica"), "replica")
    assert replica["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert replica["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert replica["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_the_coordinator_probes_point_at_healthz(dev_objects: list[Obj]) -> None:
    coordinator = _container(
        _one(dev_objects, "Deployment", "fleetgate-coordinator"), "coordinator"
    )
    assert coordinator["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert coordinator["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_probes_and_services_use_ports_the_containers_declare(dev_objects: list[Obj]) -> None:
    expected_ports = {"fleetgate-replica": 8000, "fleetgate-coordinator": 8080}
    for workload in _workloads(dev_objects):
        name = workload["metadata"]["name"]
        for container in _all_containers(workload):
            declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            if name in expected_ports:
                assert declared.get("http") == expected_ports[name], name
            for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = container.get(probe_name)
                if not probe:
                    continue
                action = probe.get("httpGet") or probe.get("tcpSocket")
                if action is None:
                    continue
                port = action["port"]
                assert port in declared or port in declared.values(), (
                    f"{name}/{container['name']} {probe_name} uses undeclared port {port!r}"
                )
    for service in (o for o in dev_objects if o["kind"] == "Service"):
        pods = [
            w
            for w in _workloads(dev_objects)
            if _selector_matches({"matchLabels": service["spec"]["selector"]}, _pod_labels(w))
        ]
        assert len(pods) == 1, (
            f"Service {service['metadata']['name']} selects {len(pods)} workloads"
        )
        declared = {
            p["name"]
            for c in pods[0]["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in declared, service["metadata"]["name"]


def test_the_replica_grace_period_outlasts_its_pause_timeout(dev_objects: list[Obj]) -> None:
    deployment = _one(dev_objects, "Deployment", "fleetgate-replica")
    env = _env(_container(deployment, "replica"))
    assert "FLEETGATE_PAUSE_TIMEOUT" in env, (
        "set FLEETGATE_PAUSE_TIMEOUT explicitly next to the grace"
    )
    pause_timeout = float(env["FLEETGATE_PAUSE_TIMEOUT"]["value"])
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # Some headroom beyond the drain itself for shutdown of the HTTP server and Redis clients.
    assert grace >= pause_timeout + 10, (grace, pause_timeout)


def test_the_replica_id_comes_from_the_pod_name(dev_objects: list[Obj]) -> None:
    env = _env(_container(_one(dev_objects, "Deployment", "fleetgate-replica"), "replica"))
    assert env["FLEETGATE_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_replica_reads_its_pods_labels_from_a_downward_api_file(
    dev_objects: list[Obj], tmp_path: Path
) -> None:
    deployment = _one(dev_objects, "Deployment", "fleetgate-replica")
    replica = _container(deployment, "replica")
    path = _env(replica)["FLEETGATE_LABELS_FILE"]["value"]
    mount = next(m for m in replica["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == mount["name"])
    items = {i["path"]: i["fieldRef"]["fieldPath"] for i in volume["downwardAPI"]["items"]}
    assert items[path[len(mount["mountPath"]) + 1:]] == "metadata.labels"
    # what the kubelet writes there (one key="value" a line, sorted) reads as the pod's labels
    from replica.service.labels import read_labels_file

    pod = deployment["spec"]["template"]["metadata"]["labels"]
    written = tmp_path / "labels"
    written.write_text("".join(f'{k}="{v}"\n' for k, v in sorted(pod.items())))
    assert read_labels_file(str(written)) == pod


def test_the_replica_runs_the_replica_command_and_the_coordinator_serves_on_8080(
    dev_objects: list[Obj],
) -> None:
    replica = _container(_one(dev_objects, "Deployment", "fleetgate-replica"), "replica")
    coordinator = _container(
        _one(dev_objects, "Deployment", "fleetgate-coordinator"), "coordinator"
    )
    assert replica["command"] == ["fleetgate-replica"]
    assert coordinator["command"][:2] == ["fleetgate", "serve"]
    args = coordinator["command"][2:]
    assert args[args.index("--port") + 1] == "8080"
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert _env(replica)["FLEETGATE_PORT"]["value"] == "8000"


@pytest.mark.parametrize(
    ("tree", "endpoint"),
    [
        ("dev overlay", "redis://{user}:$(REDIS_PASSWORD)@fleetgate-redis:6379/0"),
        (
            "managed-redis overlay",
            "rediss://{user}:$(REDIS_PASSWORD)@redis.example.internal:6380/0",
        ),
    ],
)
def test_each_component_connects_to_redis_as_its_own_acl_user(
    tree: str, endpoint: str, request: pytest.FixtureRequest
) -> None:
    """The coordinator as `coordinator`; the replicas as their fleet's own user,
    replica-<FLEET>, with that fleet's password."""
    objects: list[Obj] = request.getfixturevalue(TREES[tree])
    fleet = _named_prefix(objects, "ConfigMap", "fleetgate-config")["data"]["fleet"]
    for deployment, user, secret_key, expanded in [
        (
            "fleetgate-replica",
            "replica-$(FLEETGATE_FLEET)",
            f"redis-replica-password-{fleet}",
            ["FLEETGATE_FLEET", "REDIS_PASSWORD"],
        ),
        ("fleetgate-coordinator", "coordinator", "redis-coordinator-password", ["REDIS_PASSWORD"]),
    ]:
        workload = _one(objects, "Deployment", deployment)
        container = workload["spec"]["template"]["spec"]["containers"][0]
        names = [e["name"] for e in container["env"]]
        env = _env(container)
        assert env["FLEETGATE_REDIS_URL"]["value"] == endpoint.format(user=user)
        # Kubernetes expands $(VAR) only from variables defined EARLIER in the list.
        for variable in expanded:
            assert names.index(variable) < names.index("FLEETGATE_REDIS_URL"), variable
        ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("fleetgate-secrets", secret_key)
        fleet_ref = env["FLEETGATE_FLEET"]["valueFrom"]["configMapKeyRef"]
        assert (fleet_ref["name"].rsplit("-", 1)[0], fleet_ref["key"]) == (
            "fleetgate-config",
            "fleet",
        )


def test_the_managed_redis_overlay_runs_no_redis_and_ships_no_secret(
    managed_redis_objects: list[Obj],
) -> None:
    kinds = {(o["kind"], o["metadata"]["name"].rsplit("-", 1)[0]) for o in managed_redis_objects}
    names = {o["metadata"]["name"] for o in managed_redis_objects}
    assert not [n for n in names if n.startswith("fleetgate-redis")], names
    assert not [k for k in kinds if k[0] in {"Secret", "StatefulSet", "NetworkPolicy"}], kinds
    assert {o["metadata"]["name"] for o in managed_redis_objects if o["kind"] == "Deployment"} == {
        "fleetgate-replica",
        "fleetgate-coordinator",
    }


SENTINEL_SECRET_KEYS = {
    "admin-token", "view-token", "replica-admin-token", "redis-coordinator-password",
    "redis-replica-password-demo", "redis-sentinel-password",
}
"""What the sentinel overlay's Secret, created out of band, holds."""


def test_the_sentinel_overlay_runs_no_redis_and_ships_no_secret(
    sentinel_objects: list[Obj],
) -> None:
    names = {o["metadata"]["name"] for o in sentinel_objects}
    assert not [n for n in names if n.startswith("fleetgate-redis")], names
    assert not [o for o in sentinel_objects
                if o["kind"] in {"Secret", "StatefulSet", "NetworkPolicy"}]
    assert {o["metadata"]["name"] for o in sentinel_objects if o["kind"] == "Deployment"} == {
        "fleetgate-replica",
        "fleetgate-coordinator",
    }


@pytest.mark.parametrize(
    ("deployment", "user", "password_key"),
    [
        ("fleetgate-replica", "replica-$(FLEETGATE_FLEET)", "redis-replica-password-demo"),
        ("fleetgate-coordinator", "coordinator", "redis-coordinator-password"),
    ],
)
def test_the_sentinel_overlay_points_each_component_at_the_sentinels_as_its_own_users(
    sentinel_objects: list[Obj], deployment: str, user: str, password_key: str
) -> None:
    """Its ACL user and password on the Redis servers, the `fleetgate` user and the
    sentinels' password on the sentinels; every $(VAR) defined before the URL, from the
    Secret; and the URL, its variables filled in, is one the contract's parser takes."""
    from replica.contract.urls import parse_redis_url

    container = _one(sentinel_objects, "Deployment", deployment)["spec"]["template"]["spec"][
        "containers"][0]
    names = [e["name"] for e in container["env"]]
    env = _env(container)
    url = env["FLEETGATE_REDIS_URL"]["value"]
    parts = urlsplit(url)
    assert parts.scheme == "redis+sentinel"
    assert parts.netloc.startswith(f"{user}:$(REDIS_PASSWORD)@")
    hosts = parts.netloc.split("@", 1)[1].split(",")
    assert len(hosts) == 3 and all(h.endswith(":26379") for h in hosts), hosts
    assert parts.path == "/mymaster/0"
    assert parts.query == "sentinel_username=fleetgate&sentinel_password=$(REDIS_SENTINEL_PASSWORD)"
    for variable in re.findall(r"\$\((\w+)\)", url):
        assert names.index(variable) < names.index("FLEETGATE_REDIS_URL"), variable
    for variable, key in (("REDIS_PASSWORD", password_key),
                          ("REDIS_SENTINEL_PASSWORD", "redis-sentinel-password")):
        ref = env[variable]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("fleetgate-secrets", key)
    filled = (url.replace("$(FLEETGATE_FLEET)", "demo")
              .replace("$(REDIS_PASSWORD)", "a-redis-password-0001")
              .replace("$(REDIS_SENTINEL_PASSWORD)", "a-sentinel-password-01"))
    target = parse_redis_url(filled)
    assert target.topology == "sentinel"
    assert (target.service, target.db, target.sentinel_username) == ("mymaster", 0, "fleetgate")
    assert "a-redis-password-0001" not in str(target)


def test_the_sentinel_overlay_documents_the_secret_its_pods_read(
    sentinel_objects: list[Obj],
) -> None:
    """The `kubectl create secret` of the overlay's header names every key a pod reads from
    fleetgate-secrets, and no other."""
    read = {
        var["valueFrom"]["secretKeyRef"]["key"]
        for workload in _workloads(sentinel_objects)
        for container in _all_containers(workload)
        for var in container.get("env", [])
        if "secretKeyRef" in var.get("valueFrom", {})
    }
    header = (SENTINEL_OVERLAY / "kustomization.yaml").read_text(encoding="utf-8")
    documented = set(re.findall(r"--from-literal=([a-z0-9-]+)=", header))
    assert read == documented == SENTINEL_SECRET_KEYS


def test_tokens_and_passwords_come_from_secrets_never_from_literals(
    dev_objects: list[Obj],
) -> None:
    for workload in _workloads(dev_objects):
        for container in _all_containers(workload):
            for var in container.get("env", []):
                if re.search(r"TOKEN|PASSWORD|REDISCLI_AUTH", var["name"]):
                    assert "value" not in var, f"{var['name']} is a literal"
                    assert "secretKeyRef" in var["valueFrom"], var["name"]


def test_every_secret_and_configmap_reference_resolves(dev_objects: list[Obj]) -> None:
    data: dict[tuple[str, str], set[str]] = {}
    for obj in dev_objects:
        if obj["kind"] in {"Secret", "ConfigMap"}:
            keys = set(obj.get("data") or {}) | set(obj.get("stringData") or {})
            data[(obj["kind"], obj["metadata"]["name"])] = keys
    problems = []
    for workload in _workloads(dev_objects):
        pod = workload["spec"]["template"]["spec"]
        for container in _all_containers(workload):
            for var in container.get("env", []):
                source = var.get("valueFrom", {})
                for ref_kind, kind in (
                    ("secretKeyRef", "Secret"),
                    ("configMapKeyRef", "ConfigMap"),
                ):
                    if ref_kind in source:
                        ref = source[ref_kind]
                        if ref["key"] not in data.get((kind, ref["name"]), set()):
                            problems.append(f"{var['name']} -> {kind} {ref['name']}/{ref['key']}")
        for volume in pod.get("volumes", []):
            if "configMap" in volume and ("ConfigMap", volume["configMap"]["name"]) not in data:
                problems.append(
                    f"volume {volume['name']} -> ConfigMap {volume['configMap']['name']}"
                )
            if "secret" in volume and ("Secret", volume["secret"]["secretName"]) not in data:
                problems.append(
                    f"volume {volume['name']} -> Secret {volume['secret']['secretName']}"
                )
    assert not problems, problems


def test_the_dev_overlay_replaces_every_placeholder_secret(
    dev_objects: list[Obj], base_objects: list[Obj]
) -> None:
    base_secret = _one(base_objects, "Secret", "fleetgate-secrets")
    assert all("REPLACE_ME" in v for v in base_secret["stringData"].values()), (
        "the base Secret should only hold obvious placeholders"
    )
    dev_secret = _one(dev_objects, "Secret", "fleetgate-secrets")
    assert "stringData" not in dev_secret
    assert set(dev_secret["data"]) == set(base_secret["stringData"])
    for key, encoded in dev_secret["data"].items():
        value = base64.b64decode(encoded).decode()
        assert "REPLACE_ME" not in value, key
        assert value.startswith("dev-only-"), f"{key}: dev values must say they are dev-only"
        if key.startswith("redis-"):
            # render-acl.sh's rules: the Redis pod would not start otherwise.
            assert len(value) >= 16 and re.fullmatch(r"[A-Za-z0-9._~-]+", value), key


# --- security ----------------------------------------------------------------------------------


def test_every_container_runs_as_non_root_with_a_read_only_root_filesystem(
    dev_objects: list[Obj],
) -> None:
    workloads = _workloads(dev_objects)
    assert len(workloads) == 3
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        pod_sc = pod.get("securityContext", {})
        assert pod.get("automountServiceAccountToken") is False, workload["metadata"]["name"]
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault"
        for container in _all_containers(workload):
            where = f"{workload['metadata']['name']}/{container['name']}"
            sc = container.get("securityContext", {})
            run_as_non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
            run_as_user = sc.get("runAsUser", pod_sc.get("runAsUser"))
            assert run_as_non_root is True, where
            assert isinstance(run_as_user, int) and run_as_user > 0, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert "privileged" not in sc or sc["privileged"] is False, where


def test_every_container_declares_resource_requests_and_limits(dev_objects: list[Obj]) -> None:
    for workload in _workloads(dev_objects):
        for container in _all_containers(workload):
            resources = container.get("resources", {})
            where = f"{workload['metadata']['name']}/{container['name']}"
            assert {"cpu", "memory"} <= set(resources.get("requests", {})), where
            assert {"cpu", "memory"} <= set(resources.get("limits", {})), where


def test_a_pod_disruption_budget_selects_the_replica_pods_only(dev_objects: list[Obj]) -> None:
    pdbs = [o for o in dev_objects if o["kind"] == "PodDisruptionBudget"]
    selecting = {
        pdb["metadata"]["name"]: [
            w["metadata"]["name"]
            for w in _workloads(dev_objects)
            if _selector_matches(pdb["spec"]["selector"], _pod_labels(w))
        ]
        for pdb in pdbs
    }
    assert ["fleetgate-replica"] in selecting.values(), selecting
    replica = _one(dev_objects, "Deployment", "fleetgate-replica")
    pdb = next(p for p in pdbs if selecting[p["metadata"]["name"]] == ["fleetgate-replica"])
    # The budget must leave room for a drain: never all replicas.
    if "minAvailable" in pdb["spec"]:
        assert pdb["spec"]["minAvailable"] < replica["spec"]["replicas"]
    else:
        assert pdb["spec"]["maxUnavailable"] >= 1


def test_the_network_policy_admits_only_fleetgate_pods_to_redis(dev_objects: list[Obj]) -> None:
    policy = _one(dev_objects, "NetworkPolicy", "fleetgate-redis")
    redis = _one(dev_objects, "StatefulSet", "fleetgate-redis")
    replica = _one(dev_objects, "Deployment", "fleetgate-replica")
    coordinator = _one(dev_objects, "Deployment", "fleetgate-coordinator")
    spec = policy["spec"]
    assert _selector_matches(spec["podSelector"], _pod_labels(redis))
    assert not _selector_matches(spec["podSelector"], _pod_labels(replica))
    assert "Ingress" in spec["policyTypes"]
    assert len(spec["ingress"]) == 1
    rule = spec["ingress"][0]
    assert [(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]] == [(6379, "TCP")]
    peers = rule["from"]
    assert all(set(peer) == {"podSelector"} for peer in peers), "no namespace or IP block peers"

    def admitted(labels: dict[str, str]) -> bool:
        return any(_selector_matches(peer["podSelector"], labels) for peer in peers)

    assert admitted(_pod_labels(replica))
    assert admitted(_pod_labels(coordinator))
    assert not admitted({"app": "something-else"})
    assert not admitted({"app.kubernetes.io/name": "fleetgate", "app.kubernetes.io/component": "x"})
    assert not admitted({"app.kubernetes.io/component": "replica"})


# --- Redis -------------------------------------------------------------------------------------


def _redis_conf(text: str) -> dict[str, str]:
    conf = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf[key.lower()] = value.strip()
    return conf


def test_the_redis_statefulset_persists_an_append_only_file_on_a_volume_claim(
    dev_objects: list[Obj],
) -> None:
    redis = _one(dev_objects, "StatefulSet", "fleetgate-redis")
    config = _named_prefix(dev_objects, "ConfigMap", "fleetgate-redis-config")
    conf = _redis_conf(config["data"]["redis.conf"])
    assert conf["appendonly"] == "yes"
    assert conf["maxmemory-policy"] == "noeviction"
    assert "dir" not in conf, "`dir` chdirs while redis.conf is parsed; use workingDir"
    container = _container(redis, "redis")
    assert container["workingDir"] == "/data"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in redis["spec"]["volumeClaimTemplates"]}
    assert mounts["/data"] in claims
    assert redis["spec"]["serviceName"] in {
        o["metadata"]["name"]
        for o in dev_objects
        if o["kind"] == "Service" and o["spec"].get("clusterIP") == "None"
    }


def test_redis_loads_the_acl_file_that_the_init_container_renders(dev_objects: list[Obj]) -> None:
    redis = _one(dev_objects, "StatefulSet", "fleetgate-redis")
    config = _named_prefix(dev_objects, "ConfigMap", "fleetgate-redis-config")
    repo_acl = (BASE / "redis" / "users.acl").read_text(encoding="utf-8")
    assert config["data"]["users.acl"] == repo_acl
    aclfile = _redis_conf(config["data"]["redis.conf"])["aclfile"]
    init = redis["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["render-acl"]
    command = init[0]["command"]
    assert command[0] == "sh" and command[1].endswith("/render-acl.sh")
    template, output = command[2], command[3]
    assert output == aclfile
    main = _container(redis, "redis")

    def volume_at(container: Obj, path: str) -> str:
        hits = [
            m
            for m in container["volumeMounts"]
            if path.startswith(m["mountPath"].rstrip("/") + "/")
        ]
        assert len(hits) == 1, f"{path} is not on exactly one volume of {container['name']}"
        return str(hits[0]["name"])

    # The rendered file is written to and read from the same (emptyDir) volume, and the template
    # and the script come from the redis config ConfigMap.
    assert volume_at(init[0], output) == volume_at(main, aclfile)
    volumes = {v["name"]: v for v in redis["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[volume_at(main, aclfile)]
    config_volume = volumes[volume_at(init[0], template)]
    assert config_volume["configMap"]["name"] == config["metadata"]["name"]
    assert volume_at(init[0], command[1]) == volume_at(init[0], template)
    assert main["command"][-1].endswith("/redis.conf")
    env = _env(init[0])
    for user in ("ADMIN", "COORDINATOR"):
        assert env[f"REDIS_{user}_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == (
            "fleetgate-secrets"
        )
    # One replica user per fleet: the fleets come after the output file.
    fleets = [_expand(arg, _resolved_env(init[0], dev_objects)) for arg in command[4:]]
    fleet = _named_prefix(dev_objects, "ConfigMap", "fleetgate-config")["data"]["fleet"]
    assert fleets == [fleet]
    for name in fleets:
        ref = env[_replica_password_variable(name)]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("fleetgate-secrets", f"redis-replica-password-{name}")


def _replica_password_variable(fleet: str) -> str:
    """Where render-acl.sh reads the replica password of ``fleet`` from."""
    return "REDIS_REPLICA_PASSWORD_" + re.sub(r"[.-]", "_", fleet.upper())


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion (unknown names stay as they are)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), value)


def _resolved_env(container: Obj, objects: list[Obj]) -> dict[str, str]:
    """The container's environment as the kubelet builds it, from the rendered Secrets and
    ConfigMaps (fieldRefs become a stand-in pod name)."""
    data: dict[tuple[str, str], dict[str, str]] = {}
    for obj in objects:
        if obj["kind"] == "Secret":
            values = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
            values.update(obj.get("stringData") or {})
        elif obj["kind"] == "ConfigMap":
            values = dict(obj.get("data") or {})
        else:
            continue
        data[(obj["kind"], obj["metadata"]["name"])] = values
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = _expand(var["value"], env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[var["name"]] = "pod-0"
            continue
        kind, ref = (
            ("Secret", source["secretKeyRef"])
            if "secretKeyRef" in source
            else ("ConfigMap", source["configMapKeyRef"])
        )
        env[var["name"]] = data[(kind, ref["name"])][ref["key"]]
    return env


def test_the_acl_the_init_container_renders_lets_each_component_log_in(
    dev_objects: list[Obj], tmp_path: Path
) -> None:
    """Run render-acl.sh as the init container would (its command and environment, resolved
    from the dev overlay's Secret and ConfigMaps): the rendered file holds the user each
    Deployment logs in as, with the hash of the password that Deployment uses."""
    for tool in ("sh", "sha256sum", "awk", "sed", "tr", "sort", "uniq"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not on PATH: render-acl.sh needs it")
    redis = _one(dev_objects, "StatefulSet", "fleetgate-redis")
    init = redis["spec"]["template"]["spec"]["initContainers"][0]
    env = _resolved_env(init, dev_objects)
    config = _named_prefix(dev_objects, "ConfigMap", "fleetgate-redis-config")
    for name in ("users.acl", "render-acl.sh"):
        (tmp_path / name).write_text(config["data"][name], encoding="utf-8")
    command = [_expand(arg, env) for arg in init["command"]]
    command[1:4] = [
        str(tmp_path / "render-acl.sh"),
        str(tmp_path / "users.acl"),
        str(tmp_path / "out.acl"),
    ]
    result = subprocess.run(
        command,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    users = {
        line.split()[1]: line
        for line in (tmp_path / "out.acl").read_text(encoding="utf-8").splitlines()
    }
    for deployment in ("fleetgate-replica", "fleetgate-coordinator"):
        container = _container(
            _one(dev_objects, "Deployment", deployment), deployment.removeprefix("fleetgate-")
        )
        url = urlsplit(_resolved_env(container, dev_objects)["FLEETGATE_REDIS_URL"])
        assert url.username in users, f"{deployment} logs in as {url.username}, not rendered"
        digest = hashlib.sha256((url.password or "").encode()).hexdigest()
        assert f" #{digest} " in users[url.username], deployment
    fleet = _named_prefix(dev_objects, "ConfigMap", "fleetgate-config")["data"]["fleet"]
    assert f"~fleetgate:{{{fleet}}}:work" in users[f"replica-{fleet}"]


# --- Prometheus --------------------------------------------------------------------------------


def test_the_prometheus_rules_configmap_carries_the_rules_file_verbatim(
    dev_objects: list[Obj],
) -> None:
    config = _one(dev_objects, "ConfigMap", "fleetgate-prometheus-rules")
    assert config["data"] == {RULES_FILE.name: RULES_FILE.read_text(encoding="utf-8")}


def test_the_pods_carry_prometheus_scrape_annotations_for_their_http_port(
    dev_objects: list[Obj],
) -> None:
    for name, port in [("fleetgate-replica", "8000"), ("fleetgate-coordinator", "8080")]:
        annotations = _one(dev_objects, "Deployment", name)["spec"]["template"]["metadata"][
            "annotations"
        ]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == port
        assert annotations["prometheus.io/path"] == "/metrics"


# --- Dockerfile --------------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in (DEPLOY / "Dockerfile").read_text(encoding="utf-8").splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends in a line continuation"
    result = []
    for line in lines:
        instruction, _, args = line.partition(" ")
        result.append((instruction.upper(), args.strip()))
    return result


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction, args in _dockerfile_instructions():
        if instruction == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction, args))
    return stages


def _dockerfile_args() -> dict[str, str]:
    args = {}
    for instruction, value in _dockerfile_instructions():
        if instruction == "ARG" and "=" in value:
            key, _, default = value.partition("=")
            args[key] = default
        if instruction == "FROM":
            break
    return args


def test_the_dockerfile_builds_in_a_builder_stage_and_ships_python_slim() -> None:
    stages = _dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: a builder and a runtime stage"
    args = _dockerfile_args()

    def image_of(stage: list[tuple[str, str]]) -> str:
        words = stage[0][1].split()
        image = words[0]
        for key, value in args.items():
            image = image.replace("${" + key + "}", value).replace("$" + key, value)
        return image

    final = stages[-1]
    assert re.fullmatch(r"python:3\.11-slim(-[a-z]+)?", image_of(final)), image_of(final)
    builder_names = [s[0][1].split()[-1] for s in stages[:-1]]
    assert "builder" in builder_names
    copies_from = [a for i, a in final if i == "COPY" and a.startswith("--from=")]
    assert copies_from == ["--from=builder /opt/fleetgate /opt/fleetgate"], copies_from
    # Nothing is built or downloaded in the runtime stage.
    final_runs = " ".join(a for i, a in final if i == "RUN")
    assert "pip" not in final_runs and "apt-get" not in final_runs, final_runs
    assert not [a for i, a in final if i == "ADD"]
    builder_runs = " ".join(a for i, a in stages[0] if i == "RUN")
    assert "pip wheel" in builder_runs and "venv" in builder_runs


def test_the_image_runs_as_a_numeric_non_root_user_and_defaults_to_the_replica() -> None:
    final = _dockerfile_stages()[-1]
    users = [a for i, a in final if i == "USER"]
    assert users, "the runtime stage sets no USER"
    user = users[-1].split(":")
    assert all(part.isdigit() for part in user), f"USER {users[-1]} is not numeric"
    assert int(user[0]) > 0 and all(int(p) > 0 for p in user)
    # The same uid the Kubernetes Deployments run as.
    for deployment in ("replica", "coordinator"):
        manifest = yaml.safe_load((BASE / deployment / "deployment.yaml").read_text("utf-8"))
        assert manifest["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(user[0])
    instructions = [i for i, _ in final]
    assert "ENTRYPOINT" not in instructions
    cmd = [a for i, a in final if i == "CMD"]
    assert cmd and yaml.safe_load(cmd[-1]) == ["fleetgate-replica"]
    assert "ENV" in instructions and any("/opt/fleetgate/bin" in a for i, a in final if i == "ENV")


def test_the_docker_build_context_admits_what_the_dockerfile_copies() -> None:
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "allow-list: exclude everything, then re-include"
    included = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for instruction, args in _dockerfile_stages()[0]:
        if instruction == "COPY" and not args.startswith("--from="):
            *sources, _dest = shlex.split(args)
            for source in sources:
                assert source.rstrip("/").removeprefix("./") in included, source
                assert (REPO / source).exists(), f"the Dockerfile copies missing {source}"


def test_the_commands_the_deployment_runs_are_console_scripts_of_the_distribution() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = pyproject["project"]["scripts"]
    assert {"fleetgate", "fleetgate-replica"} <= set(scripts)
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    for name, service in compose["services"].items():
        if name != "redis":
            assert service["command"][0] in scripts, name


def test_the_handler_the_deployment_names_is_an_async_function_of_the_code(
    dev_objects: list[Obj],
) -> None:
    handler = _named_prefix(dev_objects, "ConfigMap", "fleetgate-config")["data"]["handler"]
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    for name, service in compose["services"].items():
        if service.get("command") == ["fleetgate-replica"]:
            assert service["environment"]["FLEETGATE_HANDLER"] == handler, name
    module, _, function = handler.partition(":")
    source = REPO.joinpath(*module.split(".")).with_suffix(".py")
    assert source.exists(), f"{handler}: no {source.relative_to(REPO)}"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.AsyncFunctionDef)}
    assert function in functions, f"{handler}: no `async def {function}` in {source.name}"


# --- compose -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> Obj:
    document = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def test_compose_runs_redis_with_append_only_persistence_on_a_named_volume(compose: Obj) -> None:
    redis = compose["services"]["redis"]
    volumes = {v.split(":")[1]: v.split(":")[0] for v in redis["volumes"]}
    assert volumes["/data"] in compose["volumes"], "Redis data must live on a named volume"
    assert redis["working_dir"] == "/data"
    # The same redis.conf (appendonly yes) and ACL template as Kubernetes.
    assert volumes["/etc/fleetgate-redis/redis.conf"] == "./k8s/base/redis/redis.conf"
    assert volumes["/etc/fleetgate-redis/users.acl"] == "./k8s/base/redis/users.acl"
    assert _redis_conf(REDIS_CONF.read_text(encoding="utf-8"))["appendonly"] == "yes"
    command = " ".join(redis["command"])
    assert "render-acl.sh" in command and "redis-server /etc/fleetgate-redis/redis.conf" in command
    assert "healthcheck" in redis


def test_compose_runs_the_coordinator_and_three_demo_replicas(compose: Obj) -> None:
    services = compose["services"]
    coordinator = services["coordinator"]
    assert coordinator["command"][:2] == ["fleetgate", "serve"]
    assert "8080" in coordinator["command"]
    replicas = {
        name: service
        for name, service in services.items()
        if service.get("command") == ["fleetgate-replica"]
    }
    assert len(replicas) == 3, sorted(replicas)
    redis = services["redis"]
    ids = set()
    for name, service in replicas.items():
        env = service["environment"]
        assert env["FLEETGATE_HANDLER"] == "replica.demo:sleep", name
        # The fleet's own ACL user, rendered by the redis service for that fleet, whose
        # password is the one in the URL.
        fleet = env["FLEETGATE_FLEET"]
        assert env["FLEETGATE_REDIS_URL"].startswith(f"redis://replica-{fleet}:"), name
        assert redis["command"][-1].split(" && ")[0].split()[4:] == [fleet]
        password = env["FLEETGATE_REDIS_URL"].split(":", 2)[2].rsplit("@", 1)[0]
        assert redis["environment"][_replica_password_variable(fleet)] == password, name
        assert env["FLEETGATE_REDIS_URL"].endswith("@redis:6379/0"), name
        assert int(service["stop_grace_period"].rstrip("s")) > int(env["FLEETGATE_PAUSE_TIMEOUT"])
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        ids.add(env["FLEETGATE_REPLICA_ID"])
    assert len(ids) == 3, "each replica needs its own FLEETGATE_REPLICA_ID"
    assert coordinator["environment"]["FLEETGATE_REDIS_URL"].startswith("redis://coordinator:")


def test_compose_takes_tokens_and_passwords_from_the_environment(compose: Obj) -> None:
    required = re.compile(r"\$\{([A-Z_]+):\?[^}]*\}")
    for name, service in compose["services"].items():
        for key, value in service.get("environment", {}).items():
            if re.search(r"TOKEN|PASSWORD|REDISCLI_AUTH", key):
                assert re.fullmatch(r"\$\{[A-Z_]+(:\?[^}]*)?\}", value), f"{name}: {key}={value}"
            if key == "FLEETGATE_REDIS_URL":
                assert required.search(value), f"{name}: the Redis password must be required"
    example = (DEPLOY / "compose.env.example").read_text(encoding="utf-8")
    text = (DEPLOY / "compose.yaml").read_text(encoding="utf-8")
    for variable in set(re.findall(r"\$\{([A-Z_]+)", text)):
        assert f"\n{variable}=" in "\n" + example, f"{variable} is missing from compose.env.example"
    assert ".env" in (DEPLOY / ".gitignore").read_text(encoding="utf-8").split()
