#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian 12 as root: the Debian packages of docs/architecture.md §10
# and the virtualenv at .venv with the project's pinned dependencies. A second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  postgresql-15 postgresql-15-pgtap postgresql-15-cron postgresql-15-plpgsql-check
  sqitch libdbd-pg-perl libtap-parser-sourcehandler-pgtap-perl
  python3 python3-venv util-linux curl openssl jq
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
want=$(cat pyproject.toml scripts/setup.sh scripts/link_import_root.py | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: preparing .venv"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# Dependencies from pyproject (single source of truth), then the import root as live links.
.venv/bin/python - <<'PY' > .venv/requirements.txt
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = list(p["dependencies"])
for extra in ("control", "dev"):
    deps += p["optional-dependencies"][extra]
print("\n".join(deps))
PY
.venv/bin/python -m pip install -q -r .venv/requirements.txt
.venv/bin/python scripts/link_import_root.py
echo "$want" > "$stamp"
