"""`python -m qinglong.worker run --config FILE` (the same as `qinglong-worker run`)."""

from __future__ import annotations

import sys

from qinglong.worker.run import main

sys.exit(main())
