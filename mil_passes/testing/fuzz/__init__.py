"""The fuzzer (``python -m mil_passes.testing.fuzz``): targets run over random programs
(``fuzzer``), failures classed (``failure_class``), shrunk (``minimize``) and written as
standalone scripts (``reproducer``); lint's contract with the passes (``lint_contract``)."""
