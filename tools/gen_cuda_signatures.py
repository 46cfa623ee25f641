#!/usr/bin/env python3
"""Write tests/standins/data/cuda_python.json: cudart's real Python signatures per JetPack's cuda-python.

Each NVIDIA JetPack pins one cuda-python release, and the test stand-ins must call the CUDA runtime with
that release's signatures (CUDA 11's ``cudaGraphInstantiate(graph, pLogBuffer, bufferSize)`` is
``cudaGraphInstantiate(graph, flags)`` in every 12.x/13.x; ``cudaStreamGetCaptureInfo`` returns 3 values
in 11.8, 6 in 12.x and 7 in 13.0). The releases (``VERSIONS`` below, pinned exactly so that ``--check``
is reproducible):

    JetPack 5.1      -> cuda-python 11.8.2
    JetPack 6.0      -> cuda-python 12.2.1
    JetPack 6.1, 6.2 -> cuda-python 12.6.2.post1  (the newest 12.6.x: 12.6.1 and 12.6.2 are yanked on
                                                  PyPI, NVIDIA/cuda-python#215 and #226)
    JetPack 7        -> cuda-python 13.0.3        (the newest 13.0.x; a metapackage, see below)

To move a pin, look at ``python -m pip index versions cuda-python`` and ``... cuda-bindings`` (they list
only what has a wheel for the running Python and leave yanked releases out; 11.8.2 has no wheel newer
than cp310, so ask with ``--python-version 3.10``), edit ``VERSIONS`` and rerun this script.

How the data is read
--------------------
1. ``python -m pip download --no-deps --only-binary=:all: --python-version 3.10 --platform
   manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64`` fetches
   ``cuda-python==V`` into ``--wheel-dir`` (default ``.cache/cuda-python-wheels/``, which .gitignore
   keeps out of git; pip reuses a file that is already there). When that wheel's METADATA
   ``Requires-Dist`` names ``cuda-bindings`` (13.x: cuda-python is then a metapackage that ships no
   module at all), ``cuda-bindings==V`` is fetched the same way. Each wheel's file name and sha256 are
   recorded. (12.6.2.post1 is NOT a metapackage: it still ships everything, ``cuda.bindings`` included.)
   The runtime module's source is byte-identical in the x86_64 and the aarch64 (Jetson) wheels of all
   four releases (checked once by hand when this script was written), so x86_64 wheels are used.
2. Nothing is imported or installed: the wheel is read as a zip. Every one of the four releases ships
   the Cython source of its runtime module, which is what is parsed:
       11.8.2, 12.2.1  -> ``cuda/cudart.pyx`` (12.2.1 also ships the ``.pyx.in`` template; the
                          preprocessed ``.pyx`` is what was compiled and is what is read)
       12.6.2.post1    -> ``cuda/bindings/runtime.pyx`` (``cuda/cudart.pyx`` is a 511-byte shim:
                          ``from cuda.bindings.runtime import *`` plus a DeprecationWarning)
       13.0.3          -> ``cuda/bindings/runtime.pyx`` in the cuda-bindings wheel
   No release ships a ``.pyi`` stub for the runtime module, and the ``.pxd`` files declare only the
   cdef classes/C API, not the Python functions, so neither is used. Should a future wheel ship no
   ``.pyx``, this script stops and says so rather than guessing; the honest fallback then is to
   ``pip install --no-deps --target TMP`` the wheel (for a Python that runs here) and, in a subprocess,
   read each function's signature from its docstring's first line: the functions are compiled with
   ``@cython.embedsignature(True)``, so ``fn.__doc__`` starts with ``cudaXxx(graph, ...)``.
   From the ``.pyx``:
   * functions: every module-level ``def`` (all ``def cudaXxx`` plus the few helpers such as
     ``make_cudaExtent``, ``sizeof``, ``getLocalRuntimeVersion``). For each parameter: its Python name
     (the last identifier before any ``not None``, ``: annotation`` or ``= default``; Cython C types
     such as ``size_t``/``char*``/``unsigned long long`` are dropped) and the default's source text
     (``null`` when there is none). ``returns`` is the length of the tuple the function returns
     (cudaError_t included), read from the ``return (...)`` statements of its body (docstring left
     out); every return of a function has the same length in all four releases, and the count
     agrees with the docstring's numpydoc ``Returns`` section (checked, the script stops if not).
     ``null`` if it cannot be read, and for the helpers that return one object rather than a tuple
     (``make_cudaExtent``/``make_cudaPitchedPtr``/``make_cudaPos``/``sizeof``; the docstrings of the
     first three wrongly list two values).
   * enums: every ``class X(IntEnum)`` and its members, in declaration order (names only: the
     values come from the C headers via ``cyruntime``/``ccudart``, which the .pyx does not spell out).
   * modules: the import paths for the runtime API, from the compiled extensions in the wheels,
     canonical one first; ``module_status`` says ``native``, ``deprecated-alias`` (a shim that
     re-exports ``cuda.bindings.runtime`` and warns DeprecationWarning on import) or ``missing``.
   * version_attributes: where ``cuda.__version__`` and ``cuda.bindings.__version__`` come from:
       11.8.2, 12.2.1 -> ``cuda.__version__`` = versioneer JSON in ``cuda/_version.py``; no cuda.bindings
       12.6.2.post1   -> ``cuda.bindings.__version__`` = versioneer JSON in ``cuda/bindings/_version.py``;
                         ``cuda.__version__`` still works but through a module ``__getattr__`` that
                         warns DeprecationWarning and returns ``cuda.bindings.__version__``
       13.0.3         -> ``cuda.bindings.__version__`` = the literal in ``cuda/bindings/_version.py``;
                         no ``cuda/__init__.py`` at all (``cuda`` is a namespace package), so
                         ``cuda.__version__`` raises AttributeError
     ``importlib.metadata.version("cuda-python")`` works in all four (and ``"cuda-bindings"`` in 13.x).
3. The JSON (keys sorted, one function/enum/wheel per line so diffs stay readable) is shaped::

       {"generated_by": "python tools/gen_cuda_signatures.py",
        "versions": {"11.8.2": {"jetpack": [...], "wheels": [{"file", "sha256"}], "source": "<path in wheel>",
                                "modules": [...], "module_status": {...}, "version_attributes": {...},
                                "functions": {"cudaGraphInstantiate": {"params": [{"name", "default"}],
                                                                       "returns": 3}, ...},
                                "enums": {"cudaMemcpyKind": ["cudaMemcpyHostToHost", ...], ...}}, ...}}

Usage::

    python tools/gen_cuda_signatures.py            # (re)write the JSON
    python tools/gen_cuda_signatures.py --check    # exit 1 if the committed JSON differs from the wheels
"""
from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "standins" / "data" / "cuda_python.json"
DEFAULT_WHEEL_DIR = ROOT / ".cache" / "cuda-python-wheels"
GENERATED_BY = "python tools/gen_cuda_signatures.py"

# cuda-python release -> the JetPacks that pin it
VERSIONS = {
    "11.8.2": ["5.1"],
    "12.2.1": ["6.0"],
    "12.6.2.post1": ["6.1", "6.2"],
    "13.0.3": ["7"],
}
PYTHON_VERSION = "3.10"  # the one CPython every pinned release has a wheel for (11.8.2 stops at cp310)
PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]

# where the runtime module's Cython source lies, most specific first
PYX_CANDIDATES = ["cuda/bindings/runtime.pyx", "cuda/cudart.pyx"]
SHIM_LIMIT = 10_000  # a .pyx smaller than this is a re-export shim, not the implementation


# ---------------------------------------------------------------------------------------------- wheels
def download(dist: str, version: str, wheel_dir: Path) -> Path:
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", PYTHON_VERSION, "-d", str(wheel_dir), f"{dist}=={version}"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stdout}")
    prefix = f"{dist.replace('-', '_')}-{version}-"
    found = sorted(p for p in wheel_dir.glob(prefix + "*.whl")
                   if p.name.endswith("-none-any.whl") or "x86_64" in p.name)
    if len(found) != 1:
        raise SystemExit(f"expected exactly one {prefix}*.whl in {wheel_dir}, found {[p.name for p in found]}"
                         " (remove the stale ones)")
    return found[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requires_dist(zf: zipfile.ZipFile) -> list[str]:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


# ----------------------------------------------------------------------------------------- pyx parsing
def split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside brackets/quotes (``==``, ``<=`` and ``>=`` are not ``=``)."""
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, None
    for i, ch in enumerate(text):
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0 and not (
                sep == "=" and (text[i + 1:i + 2] == "=" or text[i - 1:i] in "=<>!")):
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_param(text: str) -> dict:
    default = None
    pieces = split_top(text, "=")
    if len(pieces) > 1:
        text, default = pieces[0], "=".join(pieces[1:]).strip()
    text = split_top(text, ":")[0]  # drop a ": annotation"
    text = re.sub(r"\s+(not|or)\s+None\s*$", "", text.strip())
    m = re.search(r"(\*{0,2})([A-Za-z_]\w*)\s*$", text)
    if not m:
        raise ValueError(f"cannot read a parameter name from {text!r}")
    return {"name": m.group(1) + m.group(2), "default": default}


def strip_docstring(body: list[str]) -> tuple[str | None, list[str]]:
    i = 0
    while i < len(body) and not body[i].strip():
        i += 1
    if i == len(body) or not body[i].lstrip().startswith(('"""', "'''")):
        return None, body
    q = body[i].lstrip()[:3]
    first = body[i].lstrip()[3:]
    if q in first:
        return first.split(q)[0], body[i + 1:]
    doc = [first]
    for j in range(i + 1, len(body)):
        if q in body[j]:
            doc.append(body[j].split(q)[0])
            return "\n".join(doc), body[j + 1:]
        doc.append(body[j])
    raise ValueError("unterminated docstring")


def code_returns(code: list[str]) -> tuple[bool, int | None]:
    """(whether the body has a return statement, the length of the tuple every one of them returns:
    None when one returns something other than a tuple literal, or they disagree)."""
    lengths: set[int | None] = set()
    i = 0
    while i < len(code):
        m = re.match(r"\s+return\b(.*)$", code[i])
        i += 1
        if not m:
            continue
        expr = m.group(1)
        while expr.count("(") + expr.count("[") > expr.count(")") + expr.count("]") and i < len(code):
            expr += " " + code[i].strip()  # a return spread over lines
            i += 1
        expr = expr.strip()
        if not expr:
            lengths.add(0)
            continue
        try:
            node = ast.parse(expr, mode="eval").body
        except SyntaxError:  # a Cython cast such as <int>x: not a tuple
            lengths.add(None)
            continue
        lengths.add(len(node.elts) if isinstance(node, ast.Tuple) else None)
    return bool(lengths), (lengths.pop() if len(lengths) == 1 else None)


def doc_returns(doc: str | None) -> int | None:
    """Count the entries of a numpydoc ``Returns`` section (one per returned value)."""
    if not doc:
        return None
    lines = doc.splitlines()
    for k in range(len(lines) - 1):
        if lines[k].strip() == "Returns" and set(lines[k + 1].strip()) == {"-"}:
            indent = len(lines[k]) - len(lines[k].lstrip())
            n = 0
            for line in lines[k + 2:]:
                if not line.strip():
                    continue
                ind = len(line) - len(line.lstrip())
                if ind < indent:
                    break
                if ind == indent:
                    if set(line.strip()) == {"-"}:  # the underline of the next section
                        n -= 1
                        break
                    n += 1
            return n
    return None


def parse_pyx(text: str) -> tuple[dict, dict]:
    lines = text.splitlines()
    functions, enums = {}, {}
    i = 0
    while i < len(lines):
        line = lines[i]
        m_def = re.match(r"def ([A-Za-z]\w*)\(", line)
        m_cls = re.match(r"class (\w+)\((?:\w+\.)?IntEnum\):", line)
        if not (m_def or m_cls):
            i += 1
            continue
        header = line
        while m_def and not re.search(r"\)\s*(->[^:]*)?:\s*(#.*)?$", header):  # a signature over lines
            i += 1
            header += " " + lines[i].strip()
        i += 1
        start = i
        while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace() or lines[i].startswith("#")):
            i += 1
        body = lines[start:i]
        if m_cls or m_def is None:
            assert m_cls is not None
            enums[m_cls.group(1)] = [m.group(1) for m in (re.match(r"    ([A-Za-z_]\w*)\s*=[^=]", b) for b in body) if m]
            continue
        name = m_def.group(1)
        args = header[header.index("(") + 1:header.rindex(")")]
        params = [parse_param(p) for p in split_top(args, ",") if p.strip()]
        doc, code = strip_docstring(body)
        has_return, n_code = code_returns(code)
        n_doc = doc_returns(doc)
        if n_doc is not None and n_code is not None and n_code != n_doc:
            raise SystemExit(f"{name}: the code returns {n_code} values, its docstring lists {n_doc}")
        # no return statement to read: trust the docstring; a non-tuple return (make_cudaExtent returns
        # the struct itself although its docstring lists two values): null
        functions[name] = {"params": params, "returns": n_code if has_return else n_doc}
    return functions, enums


# ---------------------------------------------------------------------------------- modules & versions
def grab(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    if m is None:
        raise SystemExit(f"{pattern!r} not found: teach version_attributes() about this wheel")
    return m.group(1)


def read_versioneer(text: str) -> str:
    return grab(r'"version":\s*"([^"]+)"', text)


def version_attributes(files: dict[str, bytes]) -> dict:
    out: dict[str, dict[str, str | None]] = {}
    init = files.get("cuda/__init__.py")
    if init is None:
        out["cuda.__version__"] = {"status": "missing", "how": "no cuda/__init__.py: cuda is a namespace "
                                   "package, cuda.__version__ raises AttributeError"}
    else:
        t = init.decode()
        if "_version.get_versions()['version']" in t:
            out["cuda.__version__"] = {"status": "ok", "source": "cuda/_version.py",
                                       "how": "versioneer JSON in cuda/_version.py",
                                       "value": read_versioneer(files["cuda/_version.py"].decode())}
        elif "def __getattr__" in t and "DeprecationWarning" in t and "bindings.__version__" in t:
            out["cuda.__version__"] = {"status": "deprecated", "source": "cuda/__init__.py",
                                       "how": "module __getattr__ warns DeprecationWarning and returns "
                                              "cuda.bindings.__version__"}
        else:
            raise SystemExit("unrecognised cuda/__init__.py: teach version_attributes() about it")
    binit = files.get("cuda/bindings/__init__.py")
    if binit is None:
        out["cuda.bindings.__version__"] = {"status": "missing", "how": "no cuda.bindings package"}
    else:
        t = binit.decode()
        src = files["cuda/bindings/_version.py"].decode()
        if "_version.get_versions()['version']" in t:
            out["cuda.bindings.__version__"] = {"status": "ok", "source": "cuda/bindings/_version.py",
                                                "how": "versioneer JSON in cuda/bindings/_version.py",
                                                "value": read_versioneer(src)}
        elif re.search(r"from (?:cuda\.bindings\.|\.)_version import __version__", t):
            out["cuda.bindings.__version__"] = {
                "status": "ok", "source": "cuda/bindings/_version.py",
                "how": "string literal __version__ in cuda/bindings/_version.py",
                "value": grab(r'__version__\s*=\s*"([^"]+)"', src)}
        else:
            raise SystemExit("unrecognised cuda/bindings/__init__.py: teach version_attributes() about it")
    if out["cuda.__version__"]["status"] == "deprecated":
        out["cuda.__version__"]["value"] = out["cuda.bindings.__version__"].get("value")
    return out


def modules(names: set[str], files: dict[str, bytes]) -> tuple[list[str], dict]:
    def has_ext(stem: str) -> bool:
        return any(re.fullmatch(re.escape(stem) + r"(\.cpython-[^/]+\.so|\.[^/]*pyd|\.so)", n) for n in names)

    status = {}
    status["cuda.bindings.runtime"] = "native" if has_ext("cuda/bindings/runtime") else "missing"
    if not has_ext("cuda/cudart"):
        status["cuda.cudart"] = "missing"
    else:
        shim = files.get("cuda/cudart.pyx", b"").decode()
        if "from cuda.bindings.runtime import *" in shim:
            status["cuda.cudart"] = "deprecated-alias" if "DeprecationWarning" in shim else "alias"
        else:
            status["cuda.cudart"] = "native"
    order = sorted((m for m, s in status.items() if s != "missing"),
                   key=lambda m: (status[m] != "native", m))
    return order, status


def read_version(version: str, wheel_dir: Path) -> dict:
    wheels = [download("cuda-python", version, wheel_dir)]
    with zipfile.ZipFile(wheels[0]) as zf:
        reqs = requires_dist(zf)
    if any(re.match(r"cuda-bindings\b", r) for r in reqs if "extra ==" not in r):
        wheels.append(download("cuda-bindings", version, wheel_dir))

    names: set[str] = set()
    files: dict[str, bytes] = {}
    wanted = set(PYX_CANDIDATES) | {"cuda/__init__.py", "cuda/_version.py", "cuda/bindings/__init__.py",
                                    "cuda/bindings/_version.py"}
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            for n in zf.namelist():
                names.add(n)
                if n in wanted:
                    files[n] = zf.read(n)
    source = next((p for p in PYX_CANDIDATES if len(files.get(p, b"")) > SHIM_LIMIT), None)
    if source is None:
        raise SystemExit(f"cuda-python {version}: no runtime .pyx in {[w.name for w in wheels]}; see the "
                         "docstring's fallback (install into a --target dir, read fn.__doc__'s first line)")
    functions, enums = parse_pyx(files[source].decode())
    mods, status = modules(names, files)
    vattrs = version_attributes(files)
    for attr in vattrs.values():
        if attr.get("value") not in (None, version):
            raise SystemExit(f"cuda-python {version}: a version attribute says {attr['value']}")
    return {
        "jetpack": VERSIONS[version],
        "wheels": [{"file": w.name, "sha256": sha256(w)} for w in wheels],
        "source": source,
        "modules": mods,
        "module_status": status,
        "version_attributes": vattrs,
        "functions": functions,
        "enums": enums,
    }


# ------------------------------------------------------------------------------------------ the output
def dump(obj, depth: int = 0) -> str:
    """Stable JSON: sorted keys, nested dicts one level per line down to depth 4 (one function, enum or
    wheel per line), everything deeper inline."""
    if depth >= 4 or not isinstance(obj, dict) or not obj:
        if depth >= 3 and isinstance(obj, list) and obj and isinstance(obj[0], dict):  # the wheels
            pad = " " * (depth + 1)
            return "[\n" + ",\n".join(pad + json.dumps(x, sort_keys=True) for x in obj) + "\n" + " " * depth + "]"
        return json.dumps(obj, sort_keys=True)
    pad = " " * (depth + 1)
    items = [f"{pad}{json.dumps(k)}: {dump(obj[k], depth + 1)}" for k in sorted(obj)]
    return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"


def generate(wheel_dir: Path) -> str:
    data = {"generated_by": GENERATED_BY,
            "versions": {v: read_version(v, wheel_dir) for v in VERSIONS}}
    return dump(data) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed JSON differs from the wheels")
    ap.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR,
                    help=f"where the wheels are downloaded (default {DEFAULT_WHEEL_DIR.relative_to(ROOT)})")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    text = generate(args.wheel_dir)
    if args.check:
        old = args.out.read_text() if args.out.exists() else ""
        if old != text:
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(args.out), "from the wheels",
                                        lineterm="", n=0)
            print("\n".join(list(diff)[:60]), file=sys.stderr)
            print(f"{args.out} is stale: run {GENERATED_BY}", file=sys.stderr)
            return 1
        print(f"{args.out} matches the wheels")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
