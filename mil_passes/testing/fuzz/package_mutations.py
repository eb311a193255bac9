"""Hostile variants of a saved ``.mlpackage``, in four families, for :mod:`.packages`.

Each mutation takes a random generator, a copy of the package (edited in place) and a folder
outside it (for symlink targets), and returns what it did in a few words:

- ``bytes``: ``model.mlmodel`` or ``weight.bin`` with bytes flipped, truncated or zeroed;
- ``manifest``: ``Manifest.json`` with keys missing, values of the wrong type, paths that climb
  out or are absolute, deep nesting, control characters, NUL, lone surrogates, huge integers,
  long paths;
- ``structure``: folders where files belong, files where folders belong, symlinks out of the
  package, FIFOs;
- ``meaning``: a valid protobuf that means something wrong: a var nothing defines, an input gone,
  duplicate outputs, huge dims, an unknown dtype enum, a blob offset past the end, odd weight file
  names.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Callable

from coremltools import proto

MODEL = Path("Data/com.apple.CoreML/model.mlmodel")
WEIGHTS = Path("Data/com.apple.CoreML/weights/weight.bin")
MANIFEST = Path("Manifest.json")

Mutation = Callable[[random.Random, Path, Path], str]


# -- bytes ------------------------------------------------------------------------------------
def _bytes_of(rng: random.Random) -> Path:
    return rng.choice((MODEL, WEIGHTS))


def flip_bytes(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = _bytes_of(rng)
    data = bytearray((pkg / target).read_bytes())
    count = rng.choice((1, 1, 2, 8, 64))
    for _ in range(count):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    (pkg / target).write_bytes(bytes(data))
    return f"{count} bits of {target.name} flipped"


def truncate_bytes(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = _bytes_of(rng)
    data = (pkg / target).read_bytes()
    keep = rng.choice((0, 1, rng.randrange(len(data)), len(data) - 1))
    (pkg / target).write_bytes(data[:keep])
    return f"{target.name} truncated to {keep} of {len(data)} bytes"


def zero_bytes(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = _bytes_of(rng)
    data = bytearray((pkg / target).read_bytes())
    start = rng.randrange(len(data))
    end = min(len(data), start + rng.choice((1, 8, 64, 4096, len(data))))
    data[start:end] = bytes(end - start)
    (pkg / target).write_bytes(bytes(data))
    return f"{target.name} bytes {start}..{end} zeroed"


# -- Manifest.json ----------------------------------------------------------------------------
def _edit_manifest(pkg: Path, edit: Callable[[dict, dict], object]) -> None:
    manifest = json.loads((pkg / MANIFEST).read_text())
    edit(manifest, manifest["itemInfoEntries"][manifest["rootModelIdentifier"]])
    (pkg / MANIFEST).write_text(json.dumps(manifest))


HOSTILE_PATHS = (
    "../../outside/model.mlmodel",
    "com.apple.CoreML/../../../outside/model.mlmodel",
    "/etc/passwd",
    "C:\\model.mlmodel",
    "com.apple.CoreML/model.mlmodel\0.txt",
    "com.apple.CoreML/\n/model.mlmodel",
    "com.apple.CoreML/\x1b[2Jmodel.mlmodel",
    "com.apple.CoreML/mo\ud800del.mlmodel",
    "",
    ".",
    "com.apple.CoreML",
    "com.apple.CoreML/weights",
    "a/" * 3000 + "model.mlmodel",
    "x" * 70_000,
    "é" * 200,
)
WRONG_VALUES: tuple[object, ...] = (
    None,
    0,
    -1,
    10**30,
    1.5,
    True,
    [],
    {},
    ["com.apple.CoreML/model.mlmodel"],
    {"path": "x"},
)


def manifest_path(rng: random.Random, pkg: Path, outside: Path) -> str:
    value = rng.choice(HOSTILE_PATHS)
    _edit_manifest(pkg, lambda manifest, entry: entry.update(path=value))
    return f"root entry path {ascii(value[:40])}{'…' if len(value) > 40 else ''}"


def manifest_missing_key(rng: random.Random, pkg: Path, outside: Path) -> str:
    key = rng.choice(("itemInfoEntries", "rootModelIdentifier", "path", "fileFormatVersion"))

    def edit(manifest: dict, entry: dict) -> None:
        (entry if key == "path" else manifest).pop(key, None)

    _edit_manifest(pkg, edit)
    return f"key {key} removed"


def manifest_wrong_type(rng: random.Random, pkg: Path, outside: Path) -> str:
    key = rng.choice(("itemInfoEntries", "rootModelIdentifier", "path", "entry"))
    value = rng.choice(WRONG_VALUES)

    def edit(manifest: dict, entry: dict) -> None:
        if key == "path":
            entry["path"] = value
        elif key == "entry":
            manifest["itemInfoEntries"][manifest["rootModelIdentifier"]] = value
        else:
            manifest[key] = value

    _edit_manifest(pkg, edit)
    return f"{key} set to {ascii(value)[:40]}"


def manifest_text(rng: random.Random, pkg: Path, outside: Path) -> str:
    """Manifest.json replaced by text no manifest holds: deep nesting, huge integers, odd bytes."""
    depth = rng.choice((40, 1000, 100_000))
    texts = {
        "deep arrays": b"[" * depth + b"]" * depth,
        "deep objects": b'{"a":' * depth + b"0" + b"}" * depth,
        "deep value": b'{"rootModelIdentifier": "m", "itemInfoEntries": {"m": {"path": '
        + b"[" * depth
        + b"]" * depth
        + b"}}}",
        "huge integer": b'{"fileFormatVersion": ' + b"7" * rng.choice((30, 5000, 100_000)) + b"}",
        "not UTF-8": b'{"rootModelIdentifier": "\xff\xfe", "itemInfoEntries": {}}',
        "NUL bytes": b"\0" * 64,
        "empty": b"",
        "lone surrogate key": b'{"rootModelIdentifier": "\\udc80", "itemInfoEntries": {"\\udc80": {"path": "x"}}}',
        "control characters": b'{"rootModelIdentifier": "\\u001b[31m\\n", "itemInfoEntries": {}}',
        "a long identifier": b'{"rootModelIdentifier": "' + b"i" * 100_000 + b'", "itemInfoEntries": {}}',
    }
    name = rng.choice(sorted(texts))
    (pkg / MANIFEST).write_bytes(texts[name])
    return f"Manifest.json: {name}" + (f" ({depth})" if name.startswith("deep") else "")


# -- structure --------------------------------------------------------------------------------
def folder_for_file(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = rng.choice((MODEL, WEIGHTS, MANIFEST))
    (pkg / target).unlink()
    (pkg / target).mkdir()
    if rng.random() < 0.5:
        (pkg / target / "inner").write_bytes(b"x")
    return f"{target.name} is a folder"


def file_for_folder(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = rng.choice((WEIGHTS.parent, MODEL.parent, Path("Data")))
    shutil.rmtree(pkg / target)
    (pkg / target).write_bytes(b"not a folder")
    return f"{target} is a file"


def symlink_out(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = rng.choice((MODEL, WEIGHTS, MANIFEST, WEIGHTS.parent, Path("Data")))
    moved = outside / f"moved-{target.name}"
    shutil.move(pkg / target, moved)
    form = rng.choice(("absolute", "relative", "dangling", "loop"))
    link = pkg / target
    if form == "absolute":
        link.symlink_to(moved)
    elif form == "relative":
        link.symlink_to(os.path.relpath(moved, link.parent))
    elif form == "dangling":
        link.symlink_to(outside / "nothing-here")
    else:
        link.symlink_to(link.name)
    return f"{target} is a {form} symlink"


def fifo(rng: random.Random, pkg: Path, outside: Path) -> str:
    target = rng.choice((MODEL, WEIGHTS, MANIFEST, WEIGHTS.parent / "extra.bin"))
    if (pkg / target).exists():
        (pkg / target).unlink()
    os.mkfifo(pkg / target)
    return f"{target.name} is a FIFO"


# -- a valid protobuf that means something wrong ----------------------------------------------
def _edit_spec(pkg: Path, edit: Callable[[object, object], str]) -> str:
    spec = proto.Model_pb2.Model()
    spec.ParseFromString((pkg / MODEL).read_bytes())
    function = spec.mlProgram.functions["main"]
    said = edit(spec, function.block_specializations[function.opset])
    (pkg / MODEL).write_bytes(spec.SerializeToString())
    return said


def _blob_values(block) -> list:
    return [
        op.attributes["val"]
        for op in block.operations
        if "val" in op.attributes and op.attributes["val"].HasField("blobFileValue")
    ]


def undefined_var(rng: random.Random, pkg: Path, outside: Path) -> str:
    def edit(spec, block) -> str:
        readers = [op for op in block.operations if any(a.arguments for a in op.inputs.values())]
        op = rng.choice(readers)
        argument = rng.choice([a for a in op.inputs.values() if a.arguments]).arguments[0]
        argument.name = rng.choice(("nowhere", "", "x" * 5000, "a\0b"))
        return f"{op.type} reads a var nothing defines"

    return _edit_spec(pkg, edit)


def input_gone(rng: random.Random, pkg: Path, outside: Path) -> str:
    def edit(spec, block) -> str:
        inputs = spec.mlProgram.functions["main"].inputs
        del inputs[rng.randrange(len(inputs))]
        return "a function input removed"

    return _edit_spec(pkg, edit)


def duplicate_outputs(rng: random.Random, pkg: Path, outside: Path) -> str:
    def edit(spec, block) -> str:
        block.outputs.append(block.outputs[0])
        if rng.random() < 0.5:
            spec.description.output.add().CopyFrom(spec.description.output[0])
        return "an output listed twice"

    return _edit_spec(pkg, edit)


def huge_dims(rng: random.Random, pkg: Path, outside: Path) -> str:
    size = rng.choice((2**31, 2**40, 2**62, 10**18))

    def edit(spec, block) -> str:
        values = _blob_values(block)
        if values and rng.random() < 0.5:
            values[0].type.tensorType.dimensions[0].constant.size = size
            return f"a weight's dim set to {size}"
        tensor = spec.mlProgram.functions["main"].inputs[0].type.tensorType
        tensor.dimensions[0].constant.size = size
        shape = spec.description.input[0].type.multiArrayType.shape
        if shape:
            shape[0] = size
        return f"an input's dim set to {size}"

    return _edit_spec(pkg, edit)


def unknown_dtype(rng: random.Random, pkg: Path, outside: Path) -> str:
    code = rng.choice((99, 4095, 2**31 - 1))

    def edit(spec, block) -> str:
        where = rng.choice(("input", "weight", "output"))
        if where == "input":
            spec.mlProgram.functions["main"].inputs[0].type.tensorType.dataType = code
        elif where == "weight" and _blob_values(block):
            _blob_values(block)[0].type.tensorType.dataType = code
        else:
            op = block.operations[-1]
            op.outputs[0].type.tensorType.dataType = code
        return f"dtype enum {code} on an {where}"

    return _edit_spec(pkg, edit)


def blob_offset(rng: random.Random, pkg: Path, outside: Path) -> str:
    size = (pkg / WEIGHTS).stat().st_size
    offset = rng.choice((size, size + 64, 2**63 - 64, 0, 1, 64 * 3))

    def edit(spec, block) -> str:
        rng.choice(_blob_values(block)).blobFileValue.offset = offset
        return f"a blob offset set to {offset} ({size} bytes)"

    return _edit_spec(pkg, edit)


ODD_FILE_NAMES = (
    "@model_path/weights/",
    "@model_path/weights/./weight.bin",
    "@model_path/weights/../weights/weight.bin",
    "@model_path/weights/weight.bin ",
    "@model_path/weights/wéight.bin",
    "@model_path/weights/weight.bin\0",
    "@model_path/weights/\n",
    "@model_path/weights/" + "w" * 300,
    "@model_path/weights/weight.bin/x",
    "@model_path/weight.bin",
    "weight.bin",
    "/etc/passwd",
)


def odd_file_name(rng: random.Random, pkg: Path, outside: Path) -> str:
    name = rng.choice(ODD_FILE_NAMES)

    def edit(spec, block) -> str:
        rng.choice(_blob_values(block)).blobFileValue.fileName = name
        return f"a weight file name {ascii(name[:40])}"

    return _edit_spec(pkg, edit)


FAMILIES: dict[str, tuple[Mutation, ...]] = {
    "bytes": (flip_bytes, truncate_bytes, zero_bytes),
    "manifest": (manifest_path, manifest_missing_key, manifest_wrong_type, manifest_text),
    "structure": (folder_for_file, file_for_folder, symlink_out, fifo),
    "meaning": (undefined_var, input_gone, duplicate_outputs, huge_dims, unknown_dtype, blob_offset, odd_file_name),
}
