# The README's commands. Each does its own set-up on a fresh Debian 12 or 13 machine (as root).
.PHONY: setup test demo sandbox sync lint bench dist test-debian13

setup:
	bash scripts/setup.sh

test: setup
	bash scripts/test.sh

demo: setup
	bash scripts/demo.sh

# The demo's system left running around a shell of yours (README.md, "A five-minute tour", step 2).
sandbox: setup
	.venv/bin/python -m qinglong.cli.demo --sandbox

# Rewrite the deploy/revert/verify scripts (db/deploy, db/revert, db/verify) of every db/functions and db/schema file (after editing one).
sync: setup
	.venv/bin/python scripts/sync_functions.py

lint: setup
	bash scripts/lint.sh

bench: setup
	.venv/bin/python -m bench.run

# Every distribution's wheel in dist/ (what a Worker host or a control host installs).
dist: setup
	bash scripts/dist.sh

# The README's two commands in a Debian 13 root made by debootstrap (PostgreSQL 17): scripts/debian13.sh.
test-debian13:
	bash scripts/debian13.sh
