#!/usr/bin/env bash
# Installs the system tools some tests use (promtool, chromium) where they are missing and apt
# can install them. Never fails the build: a test whose tool is absent skips with its reason.
#
# The prometheus package's postinst would start a server; we only want promtool. So daemons are
# kept from starting at all while we install (Debian's policy-rc.d, exit 101 = "action not
# allowed", honoured by invoke-rc.d and deb-systemd-invoke), and this script never ends a
# process: it cannot hit a prometheus (or anything else) that the user runs.
set -u
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-tools: installing ${need[*]} with apt-get (no service is started)"
    export DEBIAN_FRONTEND=noninteractive
    policy="${POLICY_RC_D:-/usr/sbin/policy-rc.d}"
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# written by fleetgate scripts/ensure-tools.sh for the time of one install\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
        trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
    fi
    # another apt or dpkg run (an unattended upgrade, the user's own install) holds apt's locks
    # for a while: wait for them (5 minutes at most) instead of failing and skipping tests.
    # install waits by itself (DPkg::Lock::Timeout); update does not, so it is tried again
    # while, and only while, what it says is that a lock is held.
    lock=(-o DPkg::Lock::Timeout=300)
    apt_update() {
        local tries=0 said
        until said=$(apt-get "${lock[@]}" update -qq 2>&1); do
            echo "$said"
            [[ $said == *"Could not get lock"* ]] && [ $((tries += 1)) -le 60 ] || return 1
            sleep 5
        done
        echo "$said"
    }
    : >/tmp/fleetgate-apt.log
    { apt_update && apt-get "${lock[@]}" install -y -qq --no-install-recommends "${need[@]}"; } >>/tmp/fleetgate-apt.log 2>&1 \
        || echo "ensure-tools: apt-get failed (see /tmp/fleetgate-apt.log); the tests that need ${need[*]} will skip"
else
    echo "ensure-tools: ${need[*]} missing and apt-get unavailable; the tests that need them will skip"
fi
exit 0
