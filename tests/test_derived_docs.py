"""The README's pass table, docs/passes.md's schedule and docs/rules.md's table are what the declarations
and the catalogue say (regenerate with ``python -m mil_passes.derived_docs``)."""

import shutil

import pytest

from mil_passes import derived_docs


@pytest.mark.parametrize("file, name, generate", derived_docs.SECTIONS, ids=[s[0] for s in derived_docs.SECTIONS])
def test_each_derived_section_is_current(file, name, generate):
    text = (derived_docs.ROOT / file).read_text()
    found = derived_docs.pattern(name).search(text)
    assert found is not None and found.group(0) == derived_docs.render(name, generate())


def test_update_rewrites_a_stale_section_and_refuses_a_file_without_markers(tmp_path):
    for file in [file for file, _ in derived_docs.PAGES] + [file for file, _, _ in derived_docs.SECTIONS]:
        (tmp_path / file).parent.mkdir(exist_ok=True)
        shutil.copy(derived_docs.ROOT / file, tmp_path / file)
    assert derived_docs.update(tmp_path) == []
    (tmp_path / "docs" / "guards.md").write_text("stale")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("`webnn::fold_shape_ops` |", "`webnn::stale` |"))
    assert derived_docs.update(tmp_path) == ["docs/guards.md", "README.md"]
    assert derived_docs.update(tmp_path) == []
    readme.write_text("no markers")
    with pytest.raises(ValueError, match="README.md has no <!-- passes:begin -->"):
        derived_docs.update(tmp_path)
