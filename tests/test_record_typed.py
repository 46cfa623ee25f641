"""The artifact record is typed end to end: functions take `ArtifactRecord` and read attributes; the sidecar's
JSON is looked into only by the module pair that reads and writes it (`BOUNDARY`).

AST-based, so a comment or a string never counts and a renamed import still does: a parameter or field named
`record` annotated as a dict or a mapping, `record[...]` / `record.get(...)` on a name or attribute called
`record`, `.raw` (the JSON an `ArtifactRecord` keeps) and lookups into `.to_json()`, outside the boundary; and
an `ArtifactRecord(...)` built from positional arguments anywhere.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from mlit_edge.artifacts.schema import ArtifactRecord, Preprocess

PACKAGE = Path(__file__).resolve().parents[1] / "mlit_edge"
# sidecar.py reads and writes the file (its envelope: format, sha256); schema.py maps its JSON to ArtifactRecord
BOUNDARY = {"artifacts/sidecar.py", "artifacts/schema.py"}
UNTYPED = {"dict", "Dict", "Mapping", "MutableMapping", "Any", "object"}


def _is_record(node: ast.AST) -> bool:
    """`record`, or `x.record` (an attribute that holds one)."""
    return (isinstance(node, ast.Name) and node.id == "record") or \
        (isinstance(node, ast.Attribute) and node.attr == "record")


def _annotation(node: ast.AST) -> ast.AST:
    """The annotation itself, a string one parsed ("Mapping[str, Any]" as written under a TYPE_CHECKING import)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return ast.parse(node.value, mode="eval").body
    return node


def _untyped(annotation: ast.AST | None) -> bool:
    """Whether a dict, a mapping or no type at all appears anywhere in it (`Optional[dict]`, `X | Mapping`)."""
    if annotation is None:
        return False
    return any((isinstance(n, ast.Name) and n.id in UNTYPED) or (isinstance(n, ast.Attribute) and n.attr in UNTYPED)
               for n in ast.walk(_annotation(annotation)))


def problems(package: Path, boundary: set[str]) -> list[str]:
    """Every place in `package` where a record is untyped, or its JSON is read outside `boundary`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        inside = rel in boundary
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{rel}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if a.arg == "record" and _untyped(a.annotation):
                        out.append(f"{where}: {node.name}(record: {ast.unparse(_annotation(a.annotation))})")
            elif isinstance(node, ast.AnnAssign) and _is_record(node.target) and _untyped(node.annotation):
                out.append(f"{where}: {ast.unparse(node.target)}: {ast.unparse(node.annotation)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ArtifactRecord" \
                    and node.args:
                out.append(f"{where}: ArtifactRecord(...) from positional arguments")
            if inside:
                continue
            if isinstance(node, ast.Subscript) and (_is_record(node.value) or _to_json(node.value)):
                out.append(f"{where}: {ast.unparse(node)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and (_is_record(node.func.value) or _to_json(node.func.value)):
                out.append(f"{where}: {ast.unparse(node)}")
            elif isinstance(node, ast.Attribute) and node.attr == "raw":
                out.append(f"{where}: {ast.unparse(node)} (the record's JSON)")
    return out


def _to_json(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to_json"


def test_the_record_is_typed_and_its_json_read_only_at_the_boundary():
    for rel in BOUNDARY:
        assert (PACKAGE / rel).is_file(), f"the boundary module {rel} moved: update BOUNDARY"
    assert problems(PACKAGE, BOUNDARY) == []


def test_the_check_bites(tmp_path):
    """Each kind of slip, planted in a throwaway package, is found; the same lookups in its boundary are not."""
    pkg = tmp_path / "pkg"
    (pkg / "artifacts").mkdir(parents=True)
    (pkg / "artifacts" / "schema.py").write_text("def f(data):\n    return data['classes'], data.get('x')\n")
    (pkg / "stage.py").write_text(textwrap.dedent("""\
        from typing import Any, Dict, Mapping

        def a(record: dict) -> None: ...
        def b(x, *, record: "Mapping[str, Any]") -> None: ...
        def c(record: Dict[str, Any] | None = None) -> None: ...
        def c2(record: "Optional[ArtifactRecord | dict]") -> None: ...
        def d(record) -> str:
            return record["classes"]
        def e(self) -> str:
            return self.record.get("precision", "fp32")
        def f(rec) -> str:
            return rec.raw["sha256"]
        def g(rec) -> str:
            return rec.to_json()["precision"]
        def h(raw):
            return ArtifactRecord(raw, "fp16")

        class Model:
            record: dict
        """))
    found = problems(pkg, {"artifacts/schema.py"})
    for needle in ("a(record: dict)", "b(record: Mapping[str, Any])", "c(record: Dict[str, Any] | None)", "c2(record: Optional[ArtifactRecord | dict])",
                   "record['classes']", "self.record.get('precision', 'fp32')", "rec.raw", "rec.to_json()['precision']",
                   "positional", ": record: dict"):
        assert any(needle in p for p in found), (needle, found)
    assert not any(p.startswith("artifacts/schema.py") for p in found)
    (pkg / "stage.py").write_text("def ok(record: 'ArtifactRecord') -> str:\n    return record.precision\n")
    assert problems(pkg, {"artifacts/schema.py"}) == []


def test_from_json_reads_every_field_by_keyword_and_never_raises_on_junk():
    data = {"precision": "fp16", "classes": ["a", "b"], "target": "tensorrt", "kind": "tensorrt-engine",
            "preprocess": {"size": 36, "mean": [0.1] * 3, "std": [0.2] * 3, "dataset": "mnist5k"},
            "input": {"convention": "pixels", "dtype": "uint8"}, "output": {"kind": "probabilities"},
            "engine": {"flags": {"profile": {"min": 1, "opt": 8, "max": 64}}, "io": {"inputs": []}, "dla_core": 1},
            "profile": {"name": "jetpack-6.0"}, "source_onnx": "m.onnx", "bytes": 10, "mlit_edge_version": "9"}
    rec = ArtifactRecord.from_json(data)
    assert (rec.precision, rec.classes, rec.target, rec.kind, rec.dataset) == \
        ("fp16", ("a", "b"), "tensorrt", "tensorrt-engine", "mnist5k")
    assert rec.preprocess == Preprocess(size=36, mean=(0.1,) * 3, std=(0.2,) * 3, dataset="mnist5k")
    assert (rec.input_convention, rec.input_dtype, rec.output_kind) == ("pixels", "uint8", "probabilities")
    assert (rec.min_batch, rec.max_batch, rec.dla_core, rec.profile, rec.nbytes) == (1, 64, 1, "jetpack-6.0", 10)
    assert rec.to_json() == data and rec.to_json() is not rec.to_json()  # the JSON as read, a fresh copy each time
    assert rec.derive(sha256="ab").sha256 == "ab" and rec.sha256 is None
    assert ArtifactRecord().empty and not rec.empty
    junk = ArtifactRecord.from_json({"classes": "ab", "preprocess": {"size": 3, "mean": 5}, "engine": [],
                                     "fp32_layers": 7, "input": 3, "profile": 5, "attention": 1})
    assert (junk.classes, junk.preprocess.mean, junk.fp32_layers, junk.input_convention, junk.profile) == \
        (None, (), (), "normalised", None)
    assert junk.profile_field == 5  # kept as recorded, for devices.profiles.recorded_profile to refuse by value
