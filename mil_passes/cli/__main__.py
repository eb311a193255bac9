"""``python -m mil_passes.cli``: the ``mil-passes`` command."""

import sys

from .main import main

sys.exit(main())
