#!/usr/bin/env bash
# `make test-debian13`: the README's two commands on Debian 13 (trixie, PostgreSQL 17), on this machine.
# debootstrap makes a Debian 13 root from Debian's package registry (kept in $ROOT for the next run),
# a clone of this checkout's HEAD goes into it, and `make demo` then `make test` run inside it as root
# (chroot, with /proc, /sys and /dev of this machine). Pass other make targets to run those instead.
# Touches: $ROOT (default /var/tmp/qinglong-debian13) and its mounts, unmounted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${ROOT:-/var/tmp/qinglong-debian13}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(demo test)

started=$(date +%s)
say() { echo "debian13: $* ($(($(date +%s) - started)) s)"; }

if ! command -v debootstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
if [ ! -x "$ROOT/usr/bin/make" ]; then
  say "debootstrap trixie into $ROOT"
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include=ca-certificates,make,git,python3,python3-venv \
    trixie "$ROOT" "$MIRROR" >/dev/null
fi
say "Debian $(cat "$ROOT/etc/debian_version") root ready"

mounted=()
cleanup() {
  # Whatever the run left (a cluster, a shell, a browser) ends before the mounts go.
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT" ] && kill -KILL "$pid" 2>/dev/null || true
  done
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
for m in proc sys dev; do
  if [ "$m" = proc ]; then mount -t proc proc "$ROOT/proc"; else mount --rbind "/$m" "$ROOT/$m" && mount --make-rslave "$ROOT/$m"; fi
  mounted+=("$ROOT/$m")
done
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The certificate authorities this machine added (a TLS-inspecting egress proxy, say) are trusted inside too.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
fi

rm -rf "$ROOT/work/main"
mkdir -p "$ROOT/work"
git clone -q . "$ROOT/work/main"
say "running make ${targets[*]} in $ROOT/work/main"
for target in "${targets[@]}"; do
  t0=$(date +%s)
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 CI="${CI:-}" bash -c "cd /work/main && make $target" </dev/null
  say "make $target passed in $(($(date +%s) - t0)) s"
done
say "all passed"
