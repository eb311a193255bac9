"""Patterns planted into random programs so that a pass has work: the package's passes
(``passes``), coremltools' DEFAULT pipeline (``default``: its index; ``default_base``: helpers;
``default_<family>``: plants), and stateful programs (``states``)."""
