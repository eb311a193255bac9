"""The values the command's options and configuration keys take, kept apart so the parser imports
nothing else (the command starts fast: ``tests/test_cli_startup.py``)."""

#: coremltools' ``ComputeUnit`` names, in lower case: where the user deploys.
COMPUTE_UNITS = ("cpu_and_ne", "all", "cpu_only", "cpu_and_gpu")
#: The compute units that hold the Neural Engine: only there do its placement rules apply.
WITH_NEURAL_ENGINE = frozenset({"cpu_and_ne", "all"})
OUTPUT_FORMATS = ("text", "json", "github", "sarif")
