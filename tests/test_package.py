"""The package surface: registration, PASS_NAMES, pipeline placement, CLI basics."""

import importlib
import subprocess
import sys

import pytest

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

import mil_passes
from mil_passes.cli import main
from mil_passes.placement import GUARD_NAMES, REPLACEMENTS
from mil_passes.testing import check_pass, op_counts

#: The passes that run a second time, after the streaming rewrite, then fold_shape_ops a third
#: time right after common::add_fp16_cast (see PLACEMENT).
AGAIN = ("webnn::fold_shape_ops", "webnn::canonicalize_uint8_select", "webnn::fold_shape_ops")
EXPECTED = (
    "webnn::rename_duplicate_temporaries",
    "webnn::canonicalize_uint8_select",
    "webnn::fold_shape_ops",
    "webnn::concat_slice_to_slice_concat",
    "webnn::band_part_difference_to_select",
    "webnn::gather_to_slice",
    "webnn::topk_to_argmax",
    "webnn::tiled_gather_to_gather",
    "webnn::matmul_rank5_to_rank4",
    "webnn::finite_mask_sentinels",
    "webnn::cast_before_data_movement",
    "webnn::gather_index_guard_in_fp16",
)
#: Every run of the package's passes in a pipeline, in order (see PLACEMENT): the streaming rewrite
#: again after gather_to_slice's concats, then the passes that run after common::add_fp16_cast.
RUNS = (
    *EXPECTED[:4],
    "webnn::fold_shape_ops",
    *EXPECTED[4:9],
    "webnn::concat_slice_to_slice_concat",
    *AGAIN[1:],
    *EXPECTED[9:],
)


def test_every_pass_is_registered_in_pipeline_order():
    assert mil_passes.PASS_NAMES == EXPECTED
    for name in mil_passes.PASS_NAMES:
        instance = PASS_REGISTRY[name]  # a fresh instance of the class the package registered
        assert type(instance).__module__ == f"mil_passes.passes.{name.split('::')[1]}"


def test_importing_twice_is_safe():
    importlib.reload(importlib.import_module("mil_passes.passes"))
    importlib.reload(mil_passes)
    assert mil_passes.PASS_NAMES == EXPECTED


def test_pipeline_places_passes_after_const_elimination_and_leaves_base_alone():
    base = ct.PassPipeline.DEFAULT
    before = list(base.passes)
    # guards and replacements: tests/test_pipeline_guards.py, tests/test_fuse_layernorm_or_instancenorm.py
    original = {new: old for old, new in REPLACEMENTS}  # coremltools' passes pipeline() runs fixed
    names = [original.get(n, n) for n in mil_passes.pipeline(base).passes if n not in GUARD_NAMES]
    assert list(base.passes) == before
    assert [n for n in names if n.startswith("webnn::")] == list(RUNS)
    assert names.index("webnn::rename_duplicate_temporaries") == 0
    assert names.index("webnn::canonicalize_uint8_select") < names.index("common::select_optimization")
    first_const_elimination = names.index("common::const_elimination")
    for name in ("webnn::fold_shape_ops", "webnn::concat_slice_to_slice_concat"):
        assert first_const_elimination < names.index(name) < names.index("common::remove_symbolic_reshape")
    # fold_shape_ops runs again after the streaming rewrite (see PLACEMENT).
    folds = [i for i, n in enumerate(names) if n == "webnn::fold_shape_ops"]
    assert (
        names.index("webnn::concat_slice_to_slice_concat") < folds[1] < names.index("common::remove_symbolic_reshape")
    )
    # So does canonicalize_uint8_select, after the second fold.
    last_canonicalize = len(names) - 1 - names[::-1].index("webnn::canonicalize_uint8_select")
    assert folds[1] < last_canonicalize < names.index("common::remove_symbolic_reshape")
    # The triu/tril rewrite: after the folds, before the last canonicalize and far before add_fp16_cast.
    band = names.index("webnn::band_part_difference_to_select")
    assert folds[1] < band < last_canonicalize < names.index("common::add_fp16_cast")
    # And fold_shape_ops a third time, right after add_fp16_cast re-creates the reshapes.
    assert folds[2] == names.index("common::add_fp16_cast") + 1
    assert [n for n in names if not n.startswith("webnn::")] == before


def test_pipeline_on_empty_base_is_the_package_passes_in_order():
    assert tuple(mil_passes.pipeline(ct.PassPipeline.EMPTY).passes) == RUNS


def test_pipeline_is_idempotent_where_a_removed_window_joins_two_logical_nots():
    """Found by ``make fuzz``: the streaming rewrite removes the window between two logical_nots,
    which only a canonicalization after it cancels."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1,), dtype=types.bool)], opset_version=ct.target.iOS17)
        def prog(x0):
            inner = mb.logical_not(x=x0, name="inner")
            joined = mb.concat(values=[inner, np.array([False])], axis=0, name="joined")
            window = mb.slice_by_index(x=joined, begin=[0], end=[1], name="window")
            flag = mb.cast(x=mb.cast(x=window, dtype="uint8", name="out"), dtype="bool", name="out_bool")
            return mb.logical_not(x=flag, name="result")

        return prog

    after = check_pass(build, mil_passes.pipeline(ct.PassPipeline.EMPTY), inputs={"x0": np.array([False])})
    assert op_counts(after) == {"identity": 1}


def test_pipeline_rejects_a_non_pipeline():
    with pytest.raises(TypeError, match="PassPipeline, got list"):
        mil_passes.pipeline(["common::dead_code_elimination"])


def test_cli_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mil-passes {mil_passes.__version__}"


def test_the_version_is_defined_once_and_installed_as_such():
    from importlib.metadata import version

    assert version("mil-passes") == mil_passes.__version__


def test_the_old_module_paths_of_0x_are_gone():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mil_passes.mlpackage")


def test_importing_the_placement_module_leaves_the_pipeline_function_in_place():
    importlib.import_module("mil_passes.placement")
    assert callable(mil_passes.pipeline)
    assert mil_passes.PASS_NAMES[0] in mil_passes.pipeline().passes


def test_the_product_never_imports_the_test_kit():
    code = (
        "import sys, mil_passes, mil_passes.cli.main, mil_passes.package.optimize, mil_passes.cli.demo, "
        "mil_passes.lint, mil_passes.runner; "
        "print(sorted(m for m in sys.modules if m.startswith('mil_passes.testing')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_cli_list_names_every_pass(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED:
        assert name in out


def test_console_script_runs_the_demo_on_a_small_example(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mil_passes.cli", "demo", "--out", str(tmp_path), "--layers", "3", "--channels", "16"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "windows the Neural Engine refuses: 3 before, 0 after" in result.stdout
    assert "bit-identical" in result.stdout
    assert (tmp_path / "streaming_cache.mlpackage").is_dir()
    assert (tmp_path / "streaming_cache_fixed.mlpackage").is_dir()
