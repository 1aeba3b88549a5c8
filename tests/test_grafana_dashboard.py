"""deploy/grafana/fleetgate.json: a Grafana 10+ dashboard whose every PromQL expression parses
(promtool, Prometheus' own parser) and names only metrics the code exports.

The exported names are read from the real exporters, never listed here: a ``fleetgate serve``
app (with its webhook notifier running) and a real replica service are scraped, and the
recording rules and ``ALERTS`` of deploy/prometheus/fleetgate-rules.yml are added."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coordinator.demo.localredis import LocalRedis
from coordinator.fleet.fleet import Fleet
from coordinator.web.api import create_app
from replica.service.handlers import LoadedHandler
from replica.service.service import ReplicaService
from replica.service.settings import ReplicaSettings
from tests.apikit import client_for, make_settings
from tests.notifykit import Hook

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "fleetgate.json"
RULES = ROOT / "deploy" / "prometheus" / "fleetgate-rules.yml"
PANEL_TYPES = {"timeseries", "stat", "table", "state-timeline", "row"}
# Grafana's variables, replaced by valid stand-ins before promtool parses the expression.
STAND_INS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
             "${fleet}": "demo", "$fleet": "demo"}
# What issue 21 asks the dashboard to show (the spec, not the exporters' list).
REQUIRED = ("fleetgate_fleet_paused", "fleetgate_pool_paused", "fleetgate_fleet_pause_age_seconds",
            "fleetgate_fleet_pause_overdue", "ALERTS", "fleetgate_fleet_unacknowledged",
            "fleetgate_propagation_seconds_bucket", "fleetgate_control_connected",
            "fleetgate_control_fault", "fleetgate_fleet_backlog", "fleetgate_fleet_pending",
            "fleetgate_fleet_oldest_waiting_seconds", "fleetgate_fleet_dead_letters",
            "fleetgate:fleet_schedulable_backlog", "fleetgate_webhook_failures_total",
            "fleetgate_fleet_backlog_limit")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
             "group_right", "bool", "offset", "inf", "nan"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def expressions(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every query of every panel (rows' nested panels included)."""
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                out.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}",
                            target["expr"]))
            walk(panel.get("panels", []))

    walk(dash["panels"])
    return out


def substituted(expr: str) -> str:
    for var, stand_in in STAND_INS.items():
        expr = expr.replace(var, stand_in)
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside strings, label
    matchers, ranges and grouping clauses that are neither a function nor a keyword."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", "", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[m.end():].lstrip().startswith("(") or m.group().lower() in _KEYWORDS:
            continue
        names.add(m.group())
    return names


def promtool_check(exprs: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``promtool check rules`` on a rules file with each expression as a recording rule."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/ensure-tools.sh installs it)")
    rules = {"groups": [{"name": "grafana", "rules": [
        {"record": f"grafana:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)


def exposed_names(text: str) -> set[str]:
    """Every series name an exposition can carry: its samples' names, and for each family
    (samples or not) the names its type gives it."""
    names: set[str] = set()
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("_sum", "_count"), "gauge": ("",), "untyped": ("",)}
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


def rule_names() -> set[str]:
    """The recording rules of deploy/prometheus, and ALERTS when it has alerting rules."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    names = {rule["record"] for rule in rules if "record" in rule}
    if any("alert" in rule for rule in rules):
        names |= {"ALERTS", "ALERTS_FOR_STATE"}
    return names


async def idle_handler(item: Any) -> None:
    """A replica's handler: this test sends it nothing."""


async def scrape_coordinator(redis_url: str, fleet: str) -> str:
    """/metrics of a ``fleetgate serve`` app with its webhook notifier running."""
    async with Hook() as hook:
        app = create_app(make_settings(redis_url, fleet, webhook_urls=hook.url,
                                       webhook_secret="grafana-test-secret-0123456789"))
        async with client_for(app) as client:
            response = await client.get("/metrics")
    assert response.status_code == 200
    return response.text


async def scrape_replica(redis_url: str, fleet: str) -> str:
    """/metrics of a real replica service, over HTTP."""
    settings = ReplicaSettings(redis_url=redis_url, fleet=fleet, replica_id="grafana-1", port=0,
                               admin_token="grafana-replica-token", poll_interval=0.1,
                               heartbeat_interval=0.3)
    service = ReplicaService(settings, LoadedHandler(ref="tests:idle", func=idle_handler))
    await service.start()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(f"http://127.0.0.1:{service.port}/metrics")
    finally:
        await service.stop()
    assert response.status_code == 200
    return response.text


# ---------------------------------------------------------------------------- the file


def test_the_dashboard_is_a_grafana_10_dashboard_of_known_panel_types() -> None:
    dash = dashboard()
    assert dash["schemaVersion"] >= 38
    assert dash["uid"] == "fleetgate"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert {p["type"] for p in dash["panels"]} <= PANEL_TYPES
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_the_dashboard_has_a_prometheus_datasource_and_a_multi_fleet_variable() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    fleet = variables["fleet"]
    assert fleet["query"]["query"] == "label_values(fleetgate_fleet_paused, fleet)"
    assert fleet["multi"] is True and fleet["includeAll"] is True


def test_the_dashboard_shows_every_signal_the_issue_asks_for() -> None:
    used = set().union(*(metric_names(expr) for _, expr in expressions(dashboard())))
    assert [name for name in REQUIRED if name not in used] == []


def test_the_backlog_panel_draws_the_limit_beside_the_work_it_bounds() -> None:
    """Issue 21: "backlog and its limit" in one panel: the limit (no series without one) and
    the work it bounds (waiting plus pending), the limit drawn apart (dashed)."""
    panels = [p for p in _all_panels(dashboard()["panels"]) if p["title"] == "Backlog"
              and p["type"] == "timeseries"]
    assert len(panels) == 1
    panel = panels[0]
    named = {ref: metric_names(expr) for ref, expr in
             ((t["refId"], t["expr"]) for t in panel["targets"])}
    limit = [ref for ref, names in named.items() if names == {"fleetgate_fleet_backlog_limit"}]
    bounded = [ref for ref, names in named.items()
               if names == {"fleetgate_fleet_backlog", "fleetgate_fleet_pending"}]
    assert len(limit) == 1 and len(bounded) == 1, named
    legend = next(t["legendFormat"] for t in panel["targets"] if t["refId"] == limit[0])
    override = panel["fieldConfig"]["overrides"][0]
    assert re.fullmatch(override["matcher"]["options"], legend.replace("{{fleet}}", "orders"))
    assert any(p["id"] == "custom.lineStyle" for p in override["properties"])


def _all_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for p in panels for q in [p, *_all_panels(p.get("panels", []))]]


def test_every_expression_of_the_dashboard_parses_with_promtool(tmp_path: Path) -> None:
    exprs = [substituted(expr) for _, expr in expressions(dashboard())]
    assert [e for e in exprs if "$" in e] == []  # every variable has a stand-in
    result = promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_refuses_an_expression_that_does_not_parse(tmp_path: Path) -> None:
    """The check above can fail: a broken expression is refused."""
    result = promtool_check(['sum(rate(fleetgate_fleet_backlog{fleet="a"}[5m])'], tmp_path)
    assert result.returncode != 0


def test_metric_names_are_read_from_an_expression_and_nothing_else() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(fleetgate_x_bucket{fleet=~"a|b", '
            'reason="fleet:y"}[5m]))) / on (fleet) group_left max by (fleet) '
            '(fleetgate:rule) > bool 1e3 or vector(0) unless ALERTS offset 5m')
    assert metric_names(expr) == {"fleetgate_x_bucket", "fleetgate:rule", "ALERTS"}


# ---------------------------------------------------------------------------- the exporters


@pytest.fixture
async def own_redis(private_redis: LocalRedis) -> str:
    """A Redis of this test's own: the notifier follows every fleet of the registry."""
    return private_redis.url


async def test_every_metric_the_dashboard_names_is_exported_by_the_code(
    own_redis: str, fleet_name: str
) -> None:
    client = aioredis.Redis.from_url(own_redis, decode_responses=True)
    try:  # a paused fleet, so its labelled series have samples too
        fleet = Fleet(client, fleet_name, min_replicas_ack=0)
        await fleet.pause("grafana", by="test")
        await fleet.set_limit(1000, by="test")  # the limit's series has a sample too
    finally:
        await client.aclose()
    exported = (exposed_names(await scrape_coordinator(own_redis, fleet_name))
                | exposed_names(await scrape_replica(own_redis, fleet_name))
                | rule_names())
    # the exporters really were read: one name of each side and of the rules
    assert {"fleetgate_fleet_paused", "fleetgate_webhook_failures_total",
            "fleetgate_propagation_seconds_bucket", "fleetgate:fleet_schedulable_backlog"} <= exported
    unknown = {f"{where}: {name}" for where, expr in expressions(dashboard())
               for name in metric_names(expr) if name not in exported}
    assert sorted(unknown) == []
