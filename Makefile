# The README's commands. Each does its own set-up on a fresh Debian 12 machine (as root).
.PHONY: setup test demo sync lint bench

setup:
	bash scripts/setup.sh

test: setup
	bash scripts/test.sh

demo: setup
	bash scripts/demo.sh

# Rewrite db/deploy|revert|verify for every db/functions file (after editing a function).
sync: setup
	.venv/bin/python scripts/sync_functions.py

lint: setup
	bash scripts/lint.sh

bench: setup
	.venv/bin/python -m bench.run
