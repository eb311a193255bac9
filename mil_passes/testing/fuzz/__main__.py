"""``python -m mil_passes.testing.fuzz``: :func:`mil_passes.testing.fuzz.fuzzer.main`."""

import sys

from .fuzzer import main

sys.exit(main())
