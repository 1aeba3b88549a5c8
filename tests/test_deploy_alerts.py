"""The Prometheus alert rules in deploy/prometheus: promtool checks them and runs their unit
tests (skipped, with the reason, where promtool is missing; `make test` installs it), and the
rules stay consistent with the metrics fleetgate exports, their unit tests and the
PrometheusRule copy.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS = REPO / "deploy" / "prometheus"
RULES_FILE = PROMETHEUS / "fleetgate-rules.yml"
RULES_TEST_FILE = PROMETHEUS / "fleetgate-rules.test.yml"
PROMETHEUSRULE_FILE = PROMETHEUS / "fleetgate-prometheusrule.yaml"

PROMTOOL_TIMEOUT_S = 120

# The alerts the deployment promises (deploy/README.md's runbook has a section for each).
EXPECTED_ALERTS = {
    "FleetgateForgottenPause",
    "FleetgateReplicasNotAcknowledging",
    "FleetgateQueueNearBoundWhilePaused",
    "FleetgateControlPlaneDisconnected",
    "FleetgateBacklogNearLimitWhilePaused",
}

# The metrics fleetgate exports (replica and coordinator). A rule that names anything else is
# a typo that would never fire.
EXPORTED_METRICS = {
    # replica
    "fleetgate_pool_paused",
    "fleetgate_pool_pause_seconds",
    "fleetgate_pool_queued",
    "fleetgate_pool_queue_capacity",
    "fleetgate_pool_in_flight",
    "fleetgate_items_total",
    "fleetgate_control_connected",
    "fleetgate_fleet_version",
    "fleetgate_propagation_seconds_bucket",
    "fleetgate_propagation_seconds_sum",
    "fleetgate_propagation_seconds_count",
    # coordinator
    "fleetgate_fleet_paused",
    "fleetgate_fleet_pause_age_seconds",
    "fleetgate_fleet_pause_overdue",
    "fleetgate_fleet_replicas",
    "fleetgate_fleet_unacknowledged",
    "fleetgate_fleet_backlog",
    "fleetgate_fleet_pending",
    "fleetgate_fleet_backlog_limit",
}

# The recording rules the deployment promises (autoscalers read them: deploy/README.md).
EXPECTED_RECORDS = {"fleetgate:fleet_schedulable_backlog"}

Rule = dict[str, Any]


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not on PATH (apt-get install prometheus, or `make test`, which runs "
            "scripts/ensure-tools.sh): cannot check the alert rules"
        )
    return promtool


def _run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )


def _alert_rules() -> list[Rule]:
    document = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def _recording_rules() -> list[Rule]:
    document = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"] if "record" in rule]


def test_promtool_accepts_the_rules_file() -> None:
    result = _run_promtool("check", "rules", RULES_FILE.name)
    assert result.returncode == 0, result.stdout + result.stderr
    total = len(_alert_rules()) + len(_recording_rules())
    assert f"SUCCESS: {total} rules found" in result.stdout + result.stderr


def test_the_rules_unit_tests_pass_under_promtool() -> None:
    result = _run_promtool("test", "rules", RULES_TEST_FILE.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_rejects_a_unit_test_that_expects_the_wrong_alert(tmp_path: Path) -> None:
    """The unit tests are not vacuous: the same rules with a wrong expectation fail."""
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))
    firing = next(
        case
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    )
    firing["exp_alerts"] = []
    tests["rule_files"] = [str(RULES_FILE)]
    broken = tmp_path / "broken.test.yml"
    broken.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = _run_promtool("test", "rules", str(broken))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "FAILED" in result.stdout + result.stderr


def test_the_rules_file_defines_exactly_the_promised_alerts() -> None:
    names = [rule["alert"] for rule in _alert_rules()]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    for rule in _alert_rules():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"].strip(), rule["alert"]
        assert len(annotations["description"].split()) >= 10, rule["alert"]
        assert rule.get("for"), f"{rule['alert']} would fire on a single scrape"


def test_the_alerts_wait_for_the_promised_durations() -> None:
    durations = {rule["alert"]: rule["for"] for rule in _alert_rules()}
    assert durations["FleetgateReplicasNotAcknowledging"] == "2m"
    assert durations["FleetgateControlPlaneDisconnected"] == "1m"
    # "for some minutes"
    assert re.fullmatch(r"([2-9]|[1-5][0-9])m", durations["FleetgateForgottenPause"])


def test_the_rules_only_use_metrics_that_fleetgate_exports() -> None:
    for rule in _alert_rules():
        used = set(re.findall(r"\bfleetgate_[a-z_]+\b", rule["expr"]))
        assert used, rule["alert"]
        assert used <= EXPORTED_METRICS, f"{rule['alert']}: unknown {used - EXPORTED_METRICS}"


def test_the_metrics_the_rules_use_are_defined_by_the_code() -> None:
    """Ties the rules to the code's metric definitions (names as string literals), per package:
    fleetgate_fleet_* come from coordinator/, the others from replica/."""
    used = {
        m for rule in _alert_rules() for m in re.findall(r"\bfleetgate_[a-z_]+\b", rule["expr"])
    }
    missing = []
    not_yet = []
    for package, family in [
        ("coordinator", {m for m in used if m.startswith("fleetgate_fleet_")}),
        ("replica", {m for m in used if not m.startswith("fleetgate_fleet_")}),
    ]:
        source = "\n".join(
            path.read_text(encoding="utf-8") for path in sorted((REPO / package).glob("**/*.py"))
        )
        defined = set(re.findall(r"[\"'](fleetgate_[a-z_]+)[\"']", source))
        if not defined & EXPORTED_METRICS:
            not_yet.append(package)
            continue
        missing += [f"{package}: {name}" for name in sorted(family - defined)]
    assert not missing, f"the rules use metrics the code does not define: {missing}"
    if not_yet:
        pytest.skip(f"{' and '.join(not_yet)} define(s) no fleetgate metric yet: not checked")


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [RULES_FILE.name]
    fires: set[str] = set()
    silent: set[str] = set()
    for test in tests["tests"]:
        for case in test.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert fires == EXPECTED_ALERTS, f"no firing case for {EXPECTED_ALERTS - fires}"
    assert silent == EXPECTED_ALERTS, f"no quiet case for {EXPECTED_ALERTS - silent}"


def test_the_runbook_has_a_section_for_every_alert() -> None:
    readme = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    for rule in _alert_rules():
        assert f"### {rule['alert']}" in readme, rule["alert"]
        assert rule["annotations"]["runbook"] == f"deploy/README.md#{rule['alert'].lower()}"


def test_the_prometheusrule_carries_the_same_groups_as_the_rules_file() -> None:
    result = subprocess.run(
        [sys.executable, str(PROMETHEUS / "render_prometheusrule.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(PROMETHEUSRULE_FILE.read_text(encoding="utf-8"))
    assert document["apiVersion"] == "monitoring.coreos.com/v1"
    assert document["kind"] == "PrometheusRule"
    assert document["spec"] == yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------- many fleets

AGGREGATION = re.compile(r"\b(sum|max|min|avg|count)\s*(?:by\s*\(([^)]*)\))?\s*(?:without\s*\([^)]*\))?\s*\(")


def _fleet_alerts() -> list[Rule]:
    """The alerts on the coordinator's series, which carry one ``fleet`` label per fleet."""
    return [rule for rule in _alert_rules() if "fleetgate_fleet_" in rule["expr"]]


def test_the_fleet_alerts_aggregate_by_fleet_so_each_fleet_alerts_on_its_own() -> None:
    """A coordinator exports every fleet of its Redis: an aggregation that drops ``fleet``
    would fold them all into one alert."""
    assert _fleet_alerts()
    for rule in _fleet_alerts():
        for _op, by in AGGREGATION.findall(rule["expr"]):
            labels = {label.strip() for label in by.split(",")}
            assert "fleet" in labels, f"{rule['alert']} aggregates without keeping fleet"
        assert "{{ $labels.fleet }}" in rule["annotations"]["summary"], rule["alert"]


def test_every_fleet_alert_has_a_unit_test_where_two_fleets_fire_at_once() -> None:
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))
    together: set[str] = set()
    for test in tests["tests"]:
        for case in test.get("alert_rule_test", []):
            fleets = {alert["exp_labels"].get("fleet") for alert in case.get("exp_alerts") or []}
            if len(fleets - {None}) >= 2:
                together.add(case["alertname"])
    assert together == {rule["alert"] for rule in _fleet_alerts()}


def test_promtool_fails_rules_that_fold_every_fleet_into_one_alert(tmp_path: Path) -> None:
    """The two-fleet unit tests are not vacuous: the rules aggregated by namespace alone (one
    alert for every fleet) fail them."""
    folded = RULES_FILE.read_text(encoding="utf-8").replace("by (namespace, fleet)", "by (namespace)")
    assert folded != RULES_FILE.read_text(encoding="utf-8")
    rules = tmp_path / "folded-rules.yml"
    rules.write_text(folded, encoding="utf-8")
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))
    tests["rule_files"] = [str(rules)]
    tests["tests"] = [
        test for test in tests["tests"] if test["name"].startswith("two fleets")
        and any(case.get("exp_alerts") for case in test["alert_rule_test"])
    ]
    assert len(tests["tests"]) == 3
    broken = tmp_path / "folded.test.yml"
    broken.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = _run_promtool("test", "rules", str(broken))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "FAILED" in result.stdout + result.stderr


# --- recording rules ---------------------------------------------------------------------------


def test_the_rules_file_records_the_schedulable_backlog_from_exported_metrics() -> None:
    records = _recording_rules()
    assert {rule["record"] for rule in records} == EXPECTED_RECORDS
    source = "\n".join(p.read_text(encoding="utf-8")
                       for p in sorted((REPO / "coordinator").glob("**/*.py")))
    defined = set(re.findall(r"[\"'](fleetgate_[a-z_]+)[\"']", source))
    for rule in records:
        used = set(re.findall(r"\bfleetgate_[a-z_]+\b", rule["expr"]))
        assert used == {"fleetgate_fleet_backlog", "fleetgate_fleet_paused"}, rule["record"]
        assert used <= EXPORTED_METRICS and used <= defined, rule["record"]


def test_the_schedulable_backlog_unit_test_is_not_vacuous(tmp_path: Path) -> None:
    """The raw backlog recorded as the schedulable one (a paused fleet scaled on its backlog:
    the trap) fails the rule's unit test."""
    document = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("record") == "fleetgate:fleet_schedulable_backlog":
                rule["expr"] = "max by (namespace, fleet) (fleetgate_fleet_backlog)"
    rules = tmp_path / "trap-rules.yml"
    rules.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    tests = yaml.safe_load(RULES_TEST_FILE.read_text(encoding="utf-8"))
    tests["rule_files"] = [str(rules)]
    tests["tests"] = [t for t in tests["tests"] if "promql_expr_test" in t]
    assert tests["tests"]
    broken = tmp_path / "trap.test.yml"
    broken.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = _run_promtool("test", "rules", str(broken))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "FAILED" in result.stdout + result.stderr
