"""Writes fleetgate-prometheusrule.yaml (a Prometheus Operator PrometheusRule) from the one copy
of the rules, fleetgate-rules.yml, next to this file.

    python deploy/prometheus/render_prometheusrule.py          # rewrite the PrometheusRule
    python deploy/prometheus/render_prometheusrule.py --check  # exit 1 if it is out of date

tests/test_deploy_alerts.py runs the --check form. Needs PyYAML.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE / "fleetgate-rules.yml"
TARGET = HERE / "fleetgate-prometheusrule.yaml"

HEADER = """\
# GENERATED from fleetgate-rules.yml by render_prometheusrule.py: do not edit by hand.
# For clusters running the Prometheus Operator (kind PrometheusRule, monitoring.coreos.com/v1):
#   kubectl apply -n <your-namespace> -f deploy/prometheus/fleetgate-prometheusrule.yaml
# Set the labels your Prometheus' ruleSelector expects (kube-prometheus-stack: release: <name>).
"""


def document() -> dict[str, object]:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "fleetgate",
            "labels": {
                "app.kubernetes.io/name": "fleetgate",
                "app.kubernetes.io/component": "alert-rules",
                "app.kubernetes.io/part-of": "fleetgate",
            },
        },
        "spec": {"groups": rules["groups"]},
    }


def render() -> str:
    return HEADER + yaml.safe_dump(document(), sort_keys=False, width=100, allow_unicode=True)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        # Compares the parsed documents, not the text, so another PyYAML version's layout passes.
        current = yaml.safe_load(TARGET.read_text(encoding="utf-8")) if TARGET.exists() else None
        if current != document():
            print(
                f"{TARGET.name} is out of date: run python {Path(__file__).name}", file=sys.stderr
            )
            return 1
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    TARGET.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
