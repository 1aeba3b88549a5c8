#!/bin/sh
# Renders the ACL template users.acl into a file redis-server can load (aclfile), with one replica
# user per fleet named on the command line:
#
#   REDIS_ADMIN_PASSWORD=... REDIS_COORDINATOR_PASSWORD=... \
#   REDIS_REPLICA_PASSWORD_ORDERS=... REDIS_REPLICA_PASSWORD_BILLING_EU_1=... \
#     sh render-acl.sh users.acl /run/redis/users.acl orders billing.eu-1
#
# and the sentinels' template sentinel-users.acl (no fleet: it has no per-fleet user):
#
#   REDIS_ADMIN_PASSWORD=... REDIS_SENTINEL_PASSWORD=... REDIS_SENTINEL_PEER_PASSWORD=... \
#     sh render-acl.sh sentinel-users.acl /run/sentinel/users.acl
#
# A password placeholder __<VARIABLE>_SHA256__ of the template is filled from the environment
# variable <VARIABLE>: REDIS_ADMIN_PASSWORD, REDIS_COORDINATOR_PASSWORD and
# REDIS_SENTINEL_PASSWORD (the `fleetgate` user of the sentinels) must be set when the template
# names them; REDIS_SENTINEL_PEER_PASSWORD (the `sentinel` user: sentinels logging in to the
# Redis servers and to each other) and REDIS_REPLICATION_PASSWORD (the `replication` user: a
# Redis replica logging in to its master) are for replicated topologies only: a user line that
# names an unset one is left out (said on stderr).
#
# Runs as the init container of the Redis StatefulSet, as the redis service's command in
# deploy/compose.yaml, and in tests/test_deploy_acl.py. POSIX sh + sha256sum/awk/sed/grep/cut/tr/
# sort/uniq, so it works with busybox (redis:*-alpine) and with coreutils.
#
# Fleet names: [a-z0-9][a-z0-9_.-]{0,62} (the contract's rule), each once. Anything else is
# refused: a name is put into ACL glob patterns (fleetgate:{NAME}:*), where '*', '?', '[' or '\'
# would widen the pattern to other fleets' keys.
#
# The replica password of fleet NAME comes from REDIS_REPLICA_PASSWORD_<ID>, ID being NAME in
# upper case with '.' and '-' turned into '_' (orders.eu-1 -> REDIS_REPLICA_PASSWORD_ORDERS_EU_1);
# two fleets whose IDs coincide are refused. The replica user of fleet NAME is `replica-NAME`.
#
# Each password is stored as '#<sha256 hex>', never in plaintext. Passwords are refused when they
# are shorter than 16 characters, still the base's REPLACE_ME placeholder, contain a character that
# is not safe inside a redis:// URL unescaped ([A-Za-z0-9._~-] only; `openssl rand -hex 32` is a
# good generator: the Deployments build FLEETGATE_REDIS_URL from the password), or equal to the
# password of another user (a replica of one fleet could then log in as another fleet's replica).
set -eu
# Bracket ranges ([a-z]) and tr mean ASCII only in the C locale.
LC_ALL=C
export LC_ALL

die() {
    echo "render-acl: $*" >&2
    exit 1
}

[ $# -ge 2 ] || die "usage: render-acl.sh TEMPLATE OUTPUT [FLEET...]"
src=$1
dst=$2
shift 2
[ -r "$src" ] || die "cannot read $src"
if grep -q '__FLEET__' "$src"; then
    [ $# -ge 1 ] || die "usage: render-acl.sh TEMPLATE OUTPUT FLEET [FLEET...] ($src has a user per fleet: name at least one)"
else
    [ $# -eq 0 ] || die "$src has no user per fleet: name no fleet"
fi

check_fleet() {
    name=$1
    case $name in
        '' | [!a-z0-9]* | *[!a-z0-9_.-]*)
            die "invalid fleet name '$name': it must match [a-z0-9][a-z0-9_.-]{0,62}" ;;
    esac
    [ "${#name}" -le 63 ] || die "invalid fleet name '$name': longer than 63 characters"
}

sha256_of() {
    name=$1
    value=$2
    hint=${3:-}
    [ -n "$value" ] || die "$name is empty or unset$hint"
    case $value in
        *REPLACE_ME*) die "$name is still the REPLACE_ME placeholder: set a real secret" ;;
        *[!A-Za-z0-9._~-]*) die "$name may only contain A-Z a-z 0-9 . _ ~ - (it goes into a redis:// URL)" ;;
    esac
    [ "${#value}" -ge 16 ] || die "$name is shorter than 16 characters"
    printf '%s' "$value" | sha256sum | cut -d ' ' -f 1
}

# The fixed users' passwords: VARIABLE:required (1) or for replicated topologies only (0).
subst=""
dropped=""
all_hashes=""
for spec in REDIS_ADMIN_PASSWORD:1 REDIS_COORDINATOR_PASSWORD:1 REDIS_SENTINEL_PASSWORD:1 \
    REDIS_SENTINEL_PEER_PASSWORD:0 REDIS_REPLICATION_PASSWORD:0; do
    var=${spec%:*}
    grep -q "__${var}_SHA256__" "$src" || continue
    # $var is one of the names above, so this eval reads one variable and nothing else.
    eval "value=\${$var:-}"
    if [ -z "$value" ] && [ "${spec#*:}" = 0 ]; then
        echo "render-acl: $var is unset: leaving out the user that needs it" >&2
        dropped="$dropped __${var}_SHA256__"
        continue
    fi
    hash=$(sha256_of "$var" "$value")
    subst="$subst -e s/__${var}_SHA256__/$hash/g"
    all_hashes="$all_hashes $hash"
done

fleets=""
hashes=""
ids=""
for fleet in "$@"; do
    check_fleet "$fleet"
    case " $fleets " in
        *" $fleet "*) die "fleet '$fleet' is named twice" ;;
    esac
    id=$(printf '%s' "$fleet" | tr 'a-z.-' 'A-Z__')
    case " $ids " in
        *" $id "*) die "fleet '$fleet' shares the password variable REDIS_REPLICA_PASSWORD_$id with another fleet: rename one" ;;
    esac
    var="REDIS_REPLICA_PASSWORD_$id"
    # $var is [A-Z0-9_] only (checked above), so this eval reads one variable and nothing else.
    eval "value=\${$var:-}"
    hash=$(sha256_of "$var" "$value" " (the replica password of fleet '$fleet')")
    fleets="$fleets $fleet"
    ids="$ids $id"
    hashes="$hashes $hash"
    all_hashes="$all_hashes $hash"
done
# shellcheck disable=SC2086  # split on purpose: one hash a line
if [ -n "$(printf '%s\n' $all_hashes | sort | uniq -d)" ]; then
    die "two users have the same password: give every user (admin, coordinator, each fleet's replicas) its own"
fi

tmp="$dst.tmp.$$"
trap 'rm -f "$tmp"' EXIT
umask 077
awk '
    /^#/ || /^[ \t]*$/ { next }
    /^[ \t]/ { sub(/^[ \t]+/, ""); line = line " " $0; next }
    { if (line != "") print line; line = $0 }
    END { if (line != "") print line }
' "$src" | awk -v dropped="$dropped" '
    BEGIN { n = split(dropped, gone, " ") }
    { for (i = 1; i <= n; i++) if (index($0, gone[i])) next; print }
' | awk -v fleets="$fleets" -v hashes="$hashes" '
    BEGIN { n = split(fleets, name, " "); split(hashes, hash, " ") }
    /__FLEET__/ {
        for (i = 1; i <= n; i++) {
            out = $0
            gsub(/__FLEET__/, name[i], out)
            gsub(/__REDIS_REPLICA_PASSWORD_SHA256__/, hash[i], out)
            print out
        }
        next
    }
    { print }
' | {
    # shellcheck disable=SC2086  # $subst is sed's -e options, split on purpose (hex, no spaces)
    if [ -n "$subst" ]; then sed $subst; else cat; fi
} >"$tmp"

if grep -q '__[A-Z_]*__' "$tmp"; then
    die "unknown placeholder left in $src: $(grep -o '__[A-Z_]*__' "$tmp" | head -n 1)"
fi
grep -q '^user ' "$tmp" || die "no user in $src"
mv "$tmp" "$dst"
trap - EXIT
echo "render-acl: wrote $(grep -c '^user ' "$dst") users to $dst (fleets:${fleets:- none})"
