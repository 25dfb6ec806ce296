#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian 12 or 13 as root: the Debian packages of docs/architecture.md §10
# and the virtualenv at .venv: every distribution of the repository installed editable (pip install -e,
# one per top-level folder), the development tools of pyproject.toml's `dev` group, and the commands
# `qinglong`, `qinglong-worker` and `qinglong-devdb` in .venv/bin. A second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The distribution's own PostgreSQL major (Debian 12: 15, Debian 13: 17), or PG_MAJOR if set.
if [ -z "${PG_MAJOR:-}" ]; then
  case "$(. /etc/os-release && echo "${VERSION_ID:-}")" in
    12) PG_MAJOR=15 ;;
    13) PG_MAJOR=17 ;;
    *) echo "setup: Debian 12 or 13 expected (or set PG_MAJOR)" >&2; exit 2 ;;
  esac
fi
APT_PACKAGES=(
  "postgresql-$PG_MAJOR" "postgresql-$PG_MAJOR-pgtap" "postgresql-$PG_MAJOR-cron" "postgresql-$PG_MAJOR-plpgsql-check"
  sqitch libdbd-pg-perl libtap-parser-sourcehandler-pgtap-perl
  python3 python3-venv util-linux curl openssl jq systemd pgbouncer
  chromium chromium-driver fonts-dejavu-core
  patroni python3-etcd etcd-server libfaketime
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
# Every distribution editable in one resolution: siblings require each other by name and version, which
# the editable folders given here satisfy, so pip never asks an index for a qinglong-* name.
editable=()
for project in */pyproject.toml; do editable+=(-e "./${project%/pyproject.toml}"); done
.venv/bin/python -m pip install -q --group dev "${editable[@]}"
echo "$want" > "$stamp"
