#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian 12 as root: the Debian packages of docs/architecture.md §10
# and the virtualenv at .venv: every distribution of the repository installed editable (pip install -e,
# one per top-level folder), the development tools of pyproject.toml's `dev` group, and the commands
# `qinglong`, `qinglong-worker` and `qinglong-devdb` in .venv/bin. A second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  postgresql-15 postgresql-15-pgtap postgresql-15-cron postgresql-15-plpgsql-check
  sqitch libdbd-pg-perl libtap-parser-sourcehandler-pgtap-perl
  python3 python3-venv util-linux curl openssl jq systemd pgbouncer
  chromium chromium-driver fonts-dejavu-core
  patroni python3-etcd etcd-server
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
stamp=.venv/.qinglong-setup
want=$(cat pyproject.toml scripts/setup.sh */pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: preparing .venv"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The control distribution pulls in every sibling and every third-party pin; then each sibling is
# reinstalled editable (pip cannot mix an editable project with a sibling's path reference to it in
# one resolution), so edits in the checkout are live.
.venv/bin/python -m pip install -q ./cli --group dev
editable=()
for project in */pyproject.toml; do editable+=(-e "./${project%/pyproject.toml}"); done
.venv/bin/python -m pip install -q --no-deps "${editable[@]}"
rmdir .venv/lib/python3*/site-packages/qinglong 2>/dev/null || true  # left empty by the first step
echo "$want" > "$stamp"
