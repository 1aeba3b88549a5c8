#!/usr/bin/env bash
# Installs the system tools some tests use (promtool, chromium) where they are missing and apt
# can install them. Never fails the build: a test whose tool is absent skips with its reason.
set -u
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-tools: installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/tmp/fleetgate-apt.log 2>&1 \
        || echo "ensure-tools: apt-get failed (see /tmp/fleetgate-apt.log); the tests that need ${need[*]} will skip"
    # The prometheus package starts a server through its postinst where it can; we only want promtool.
    pkill -x prometheus >/dev/null 2>&1 || true
else
    echo "ensure-tools: ${need[*]} missing and apt-get unavailable; the tests that need them will skip"
fi
exit 0
