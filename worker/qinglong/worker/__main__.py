"""`python -m qinglong.worker run|journal|status …` (the same as `qinglong-worker …`)."""

from __future__ import annotations

import sys

from qinglong.worker.run import main

sys.exit(main())
