#!/bin/sh
# Renders the ACL template users.acl into a file redis-server can load (aclfile), with one replica
# user per fleet named on the command line:
#
#   REDIS_ADMIN_PASSWORD=... REDIS_COORDINATOR_PASSWORD=... \
#   REDIS_REPLICA_PASSWORD_ORDERS=... REDIS_REPLICA_PASSWORD_BILLING_EU_1=... \
#     sh render-acl.sh users.acl /run/redis/users.acl orders billing.eu-1
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

[ $# -ge 3 ] || die "usage: render-acl.sh TEMPLATE OUTPUT FLEET [FLEET...]"
src=$1
dst=$2
shift 2
[ -r "$src" ] || die "cannot read $src"

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

admin=$(sha256_of REDIS_ADMIN_PASSWORD "${REDIS_ADMIN_PASSWORD:-}")
coordinator=$(sha256_of REDIS_COORDINATOR_PASSWORD "${REDIS_COORDINATOR_PASSWORD:-}")

fleets=""
hashes=""
ids=""
all_hashes="$admin $coordinator"
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
' "$src" | awk -v fleets="$fleets" -v hashes="$hashes" '
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
' | sed \
    -e "s/__REDIS_ADMIN_PASSWORD_SHA256__/$admin/g" \
    -e "s/__REDIS_COORDINATOR_PASSWORD_SHA256__/$coordinator/g" >"$tmp"

if grep -q '__[A-Z_]*__' "$tmp"; then
    die "unknown placeholder left in $src: $(grep -o '__[A-Z_]*__' "$tmp" | head -n 1)"
fi
grep -q '^user ' "$tmp" || die "no user in $src"
mv "$tmp" "$dst"
trap - EXIT
echo "render-acl: wrote $(grep -c '^user ' "$dst") users to $dst (fleets:$fleets)"
