#!/bin/sh
# Renders the ACL template users.acl into a file redis-server can load (aclfile).
#
#   REDIS_ADMIN_PASSWORD=... REDIS_COORDINATOR_PASSWORD=... REDIS_REPLICA_PASSWORD=... \
#     sh render-acl.sh users.acl /run/redis/users.acl
#
# Runs as the init container of the Redis StatefulSet, as the redis service's command in
# deploy/compose.yaml, and in tests/test_deploy_acl.py. POSIX sh + sha256sum/awk/sed/grep, so it
# works with busybox (redis:*-alpine) and with coreutils.
#
# Each password is stored as '#<sha256 hex>', never in plaintext. Passwords are refused when they
# are shorter than 16 characters, still the base's REPLACE_ME placeholder, or contain a character
# that is not safe inside a redis:// URL unescaped ([A-Za-z0-9._~-] only; `openssl rand -hex 32`
# is a good generator): the Deployments build FLEETGATE_REDIS_URL from the password.
set -eu

die() {
    echo "render-acl: $*" >&2
    exit 1
}

[ $# -eq 2 ] || die "usage: render-acl.sh TEMPLATE OUTPUT"
src=$1
dst=$2
[ -r "$src" ] || die "cannot read $src"

sha256_of() {
    name=$1
    value=$2
    [ -n "$value" ] || die "$name is empty or unset"
    case $value in
        *REPLACE_ME*) die "$name is still the REPLACE_ME placeholder: set a real secret" ;;
        *[!A-Za-z0-9._~-]*) die "$name may only contain A-Z a-z 0-9 . _ ~ - (it goes into a redis:// URL)" ;;
    esac
    [ "${#value}" -ge 16 ] || die "$name is shorter than 16 characters"
    printf '%s' "$value" | sha256sum | cut -d ' ' -f 1
}

admin=$(sha256_of REDIS_ADMIN_PASSWORD "${REDIS_ADMIN_PASSWORD:-}")
coordinator=$(sha256_of REDIS_COORDINATOR_PASSWORD "${REDIS_COORDINATOR_PASSWORD:-}")
replica=$(sha256_of REDIS_REPLICA_PASSWORD "${REDIS_REPLICA_PASSWORD:-}")

tmp="$dst.tmp.$$"
trap 'rm -f "$tmp"' EXIT
umask 077
awk '
    /^#/ || /^[ \t]*$/ { next }
    /^[ \t]/ { sub(/^[ \t]+/, ""); line = line " " $0; next }
    { if (line != "") print line; line = $0 }
    END { if (line != "") print line }
' "$src" | sed \
    -e "s/__REDIS_ADMIN_PASSWORD_SHA256__/$admin/g" \
    -e "s/__REDIS_COORDINATOR_PASSWORD_SHA256__/$coordinator/g" \
    -e "s/__REDIS_REPLICA_PASSWORD_SHA256__/$replica/g" >"$tmp"

if grep -q '__[A-Z_]*__' "$tmp"; then
    die "unknown placeholder left in $src: $(grep -o '__[A-Z_]*__' "$tmp" | head -n 1)"
fi
grep -q '^user ' "$tmp" || die "no user in $src"
mv "$tmp" "$dst"
trap - EXIT
echo "render-acl: wrote $(grep -c '^user ' "$dst") users to $dst"
