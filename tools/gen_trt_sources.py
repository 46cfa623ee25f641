"""Regenerate mlit_edge/engine/data/{onnx_trt_ops,trt_python_api}.json from NVIDIA's own sources.

    python tools/gen_trt_sources.py --tensorrt GITDIR --onnx-tensorrt GITDIR

GITDIR is a git directory (bare is fine) of github.com/NVIDIA/TensorRT and of github.com/onnx/onnx-tensorrt.
Nothing of theirs is copied: the script reads, per release branch,

  * onnx-tensorrt docs/operators.md: the opset range the page states and, per operator, the Supported (Y/N),
    Supported Types and Restrictions columns (onnx_trt_ops.json);
  * TensorRT python/src/**/*.cpp (and python/src, python/include headers): the Python names the pybind11
    bindings define: classes (py::class_, py::bind_vector) with their .def*/.value members and C++ bases,
    enums (py::enum_) with their .value members, module functions (m.def) and module attributes (m.attr),
    and per method/constructor/function the argument names its annotations give ("x"_a, "x"_a = v,
    py::arg("x"), py::arg("x") = v) and per property whether it is settable (trt_python_api.json),

and records each branch's full commit sha. It fails (exit status 1, the reason printed) when a table parses
into fewer than MIN_OPS operators, when a branch is missing, or when a binding name in a source is not
accounted for by the parser (the cross-check in `check_coverage`).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "mlit_edge" / "engine" / "data"
OPS_DOC = "docs/operators.md"
MIN_OPS = 100
# onnx-tensorrt: the GA branches of the TensorRT versions JetPack ships (8.5: JetPack 5.1, 8.6: JetPack 6.0)
# and every 10.x-GA branch present (10.x: JetPack 6.1+, 7). Later 10.x-GA branches are picked up by pattern.
OPS_FIXED = ["8.5-GA", "8.6-GA"]
OPS_10 = re.compile(r"^10\.\d+-GA$")
# TensorRT: the release branches of those versions and the newest release/10.x (found at run time);
# release/10.13 is JetPack 7.0's TensorRT (docs/trt-sources.md)
API_FIXED = ["release/8.5", "release/8.6", "release/10.3", "release/10.13"]
API_10 = re.compile(r"^release/10\.(\d+)$")


class SourceError(RuntimeError):
    """A source did not parse the way this script expects: regenerate nothing, say why."""


# --------------------------------------------------------------------------------------------------- git

def git(gitdir: str | Path, *args: str) -> str:
    out = subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SourceError(f"git {' '.join(args)} in {gitdir}: {out.stderr.strip()}")
    return out.stdout


def branches(gitdir: str | Path) -> list[str]:
    """Local branch names (a fetched mirror keeps every branch as refs/heads/*)."""
    return git(gitdir, "for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def sha(gitdir: str | Path, branch: str) -> str:
    return git(gitdir, "rev-parse", f"refs/heads/{branch}^{{commit}}").strip()


# ------------------------------------------------------------------------------------ onnx-tensorrt table

OPSET_UP_TO = re.compile(r"up to\s+opset\s+(\d+)", re.I)
OPSET_RANGE = re.compile(r"range of\s+opset\s+(\d+)\s+to\s+opset\s+(\d+)", re.I)
DOC_VERSION = re.compile(r"TensorRT\s+(\d+\.\d+)\s+supports", re.I)


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row; the trailing pipe is optional in these docs, and an escaped
    pipe (\\|) stays inside its cell."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def parse_operators_md(text: str) -> dict:
    """operators.md -> {"max_opset", "min_opset", "opset_statement", "doc_tensorrt_version", "ops"}.

    The opset line reads "supports operators up to Opset 17" (8.x) or "in the inclusive range of opset 9 to
    opset 20" (10.x); the table is the one whose header starts with `Operator | Supported`. Rows may lack the
    trailing pipe and the Restrictions (even the Types) cell; those read as empty."""
    m_range, m_up = OPSET_RANGE.search(text), OPSET_UP_TO.search(text)
    if m_range:
        min_opset, max_opset = int(m_range.group(1)), int(m_range.group(2))
        statement_at = m_range.start()
    elif m_up:
        min_opset, max_opset = None, int(m_up.group(1))
        statement_at = m_up.start()
    else:
        raise SourceError("operators.md states no opset ('up to Opset N' / 'range of opset A to opset B')")
    line_start = text.rfind("\n", 0, statement_at) + 1
    line_end = text.find("\n", statement_at)
    statement = text[line_start:line_end if line_end >= 0 else None].strip()
    m_ver = DOC_VERSION.search(statement)

    lines = text.splitlines()
    header_at = None
    for i, line in enumerate(lines):
        cells = split_row(line) if line.lstrip().startswith("|") else []
        if len(cells) >= 2 and cells[0].lower() == "operator" and cells[1].lower() == "supported":
            header_at = i
            break
    if header_at is None:
        raise SourceError("operators.md has no table with an 'Operator | Supported' header")
    header = [c.lower() for c in split_row(lines[header_at])]
    col = {name: header.index(name) for name in ("operator", "supported", "supported types", "restrictions")
           if name in header}
    if "supported types" not in col:
        raise SourceError(f"operators.md table header has no 'Supported Types' column: {header}")
    ops: dict[str, dict] = {}
    for line in lines[header_at + 1:]:
        if not line.lstrip().startswith("|"):
            if ops:
                break  # the table ended
            continue
        cells = split_row(line)
        if set("".join(cells)) <= set("-: "):
            continue  # the |---|---| separator
        cells += [""] * (len(header) - len(cells))

        def cell(name: str) -> str:
            return cells[col[name]] if name in col else ""

        name, supported = cell("operator"), cell("supported").upper()
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name) or supported not in ("Y", "N"):
            raise SourceError(f"operators.md row does not parse (operator, Y/N): {line!r}")
        if name in ops:
            raise SourceError(f"operators.md lists {name} twice")
        types = [t.strip() for t in cell("supported types").split(",") if t.strip()]
        ops[name] = {"supported": supported == "Y", "dtypes": types, "restrictions": cell("restrictions")}
    return {"max_opset": max_opset, "min_opset": min_opset, "opset_statement": statement,
            "doc_tensorrt_version": m_ver.group(1) if m_ver else None, "ops": ops}


def ops_branches(gitdir: str | Path) -> list[str]:
    present = branches(gitdir)
    missing = [b for b in OPS_FIXED if b not in present]
    tens = sorted((b for b in present if OPS_10.match(b)), key=lambda b: int(b.split(".")[1].split("-")[0]))
    if missing or not tens:
        raise SourceError(f"onnx-tensorrt lacks {missing or 'any 10.x-GA branch'} (has {sorted(present)})")
    return OPS_FIXED + tens


def gen_ops(gitdir: str | Path, pins: dict[str, str] | None = None) -> dict:
    """{branch: parsed table + provenance}. `pins` maps onnx-tensorrt branch -> the commit NVIDIA/TensorRT's
    parsers/onnx submodule pins for the same release, recorded beside it (and whether its page is the same)."""
    out = {}
    for branch in ops_branches(gitdir):
        commit = sha(gitdir, branch)
        try:
            table = parse_operators_md(git(gitdir, "show", f"{commit}:{OPS_DOC}"))
        except SourceError as e:
            raise SourceError(f"onnx-tensorrt {branch} ({commit}) {OPS_DOC}: {e}") from None
        if len(table["ops"]) < MIN_OPS:
            raise SourceError(f"onnx-tensorrt {branch} ({commit}) {OPS_DOC}: only {len(table['ops'])} operators "
                              f"parsed (expected at least {MIN_OPS}); has the table format changed?")
        entry = {"repo": "onnx/onnx-tensorrt", "branch": branch, "commit": commit, "path": OPS_DOC, **table}
        pin = (pins or {}).get(branch)
        if pin:
            try:
                same = git(gitdir, "show", f"{pin}:{OPS_DOC}") == git(gitdir, "show", f"{commit}:{OPS_DOC}")
            except SourceError:
                same = None  # the pinned commit is not in this snapshot
            entry["tensorrt_submodule_pin"] = {"commit": pin, "same_operators_md": same}
        out[branch] = entry
    return out


def submodule_pins(trt_gitdir: str | Path, ops: list[str]) -> dict[str, str]:
    """onnx-tensorrt branch "X.Y-GA" -> the parsers/onnx commit NVIDIA/TensorRT release/X.Y pins."""
    pins = {}
    for branch in ops:
        rel = "release/" + branch.split("-")[0]
        try:
            line = git(trt_gitdir, "ls-tree", f"refs/heads/{rel}", "parsers/onnx").split()
        except SourceError:
            continue
        if len(line) >= 3 and line[1] == "commit":
            pins[branch] = line[2]
    return pins


# ------------------------------------------------------------------------------------ pybind11 bindings

# Macros the python/ build defines for the full `tensorrt` module (python/CMakeLists.txt and
# python/include/ForwardDeclarations.h): tensorrt_EXPORTS is CMake's <target>_EXPORTS for the `tensorrt` target,
# so EXPORT_ALL_BINDINGS is 1 (tensorrt_lean / tensorrt_dispatch bind less); ENABLE_INETWORK_SERIALIZE is an
# option that is off unless asked for; pybind11 is >= 2.6 in every build of these branches; Jetson is Linux.
DEFINES = {"tensorrt_EXPORTS": 1, "EXPORT_ALL_BINDINGS": 1, "ENABLE_INETWORK_SERIALIZE": 0,
           "PYBIND11_VERSION_MAJOR": 2, "PYBIND11_VERSION_MINOR": 10}
UNDEFINED = {"_WIN32", "_MSC_VER", "WIN32_LEAN_AND_MEAN", "NOMINMAX"}


def strip_comments(src: str) -> str:
    """C++ source with comments blanked (newlines kept); string, raw-string and char literals untouched."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "R" and i + 1 < n and src[i + 1] == '"' and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', src[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = src.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append(src[i:end])
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _pp_eval(expr: str, defines: dict) -> bool:
    """A #if expression over known macros; an unknown name is an error (not C's silent 0), so a new build
    switch in NVIDIA's sources stops the script instead of quietly picking a side."""
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)",
                  lambda m: "1" if (m.group(1) or m.group(2)) in defines else "0", expr)
    names = set(re.findall(r"[A-Za-z_]\w*", expr))
    unknown = names - set(defines) - UNDEFINED
    if unknown:
        raise SourceError(f"#if {expr!r}: unknown macro(s) {sorted(unknown)}; add them to DEFINES/UNDEFINED")
    py = re.sub(r"[A-Za-z_]\w*", lambda m: str(defines.get(m.group(0), 0)), expr)
    py = re.sub(r"!(?!=)", " not ", py.replace("&&", " and ").replace("||", " or "))
    if not re.fullmatch(r"(?:\s|\d|[()<>=!]|and|or|not)*", py):
        raise SourceError(f"#if {expr!r}: not a plain comparison of macros")
    return bool(eval(py, {"__builtins__": {}}))  # only digits, comparisons and and/or/not (checked above)


def preprocess(src: str, defines: dict | None = None) -> str:
    """Blank the lines of inactive #if/#ifdef/#ifndef/#elif/#else branches (line numbers kept)."""
    defines = dict(DEFINES if defines is None else defines)
    out, stack = [], []  # stack of [this_branch_active, some_branch_taken, parent_active]
    continued = False  # inside a directive's backslash-continued lines (a multi-line #define)
    for line in src.split("\n"):
        s = line.strip()
        if continued:
            continued = s.endswith("\\")
            out.append("")
            continue
        continued = s.startswith("#") and s.endswith("\\")
        m = re.match(r"#\s*(ifdef|ifndef|if|elif|else|endif|define|undef)\b\s*(.*)", s)
        active = all(f[0] for f in stack)
        if not m:
            out.append(line if active else "")
            continue
        kind, rest = m.group(1), m.group(2).strip()
        if kind in ("ifdef", "ifndef", "if"):
            if not active:
                cond = False
            elif kind == "if":
                cond = _pp_eval(rest, defines)
            else:
                cond = (rest.split()[0] in defines) == (kind == "ifdef")
            stack.append([cond, cond, active])
        elif kind == "elif":
            top = stack[-1]
            cond = top[2] and not top[1] and _pp_eval(rest, defines)
            top[0], top[1] = cond, top[1] or cond
        elif kind == "else":
            top = stack[-1]
            top[0], top[1] = top[2] and not top[1], True
        elif kind == "endif":
            stack.pop()
        elif kind == "define" and active:
            d = re.match(r"(\w+)(?!\()\s*(\S*)", rest)
            if d and "(" not in rest.split()[0]:
                val = d.group(2)
                defines[d.group(1)] = int(val) if val.isdigit() else 1
        elif kind == "undef" and active:
            defines.pop(rest.split()[0], None)
        out.append("")
    if stack:
        raise SourceError("unbalanced #if/#endif")
    return "\n".join(out)


_CLOSE = {"(": ")", "{": "}", "[": "]"}


def skip_balanced(text: str, i: int) -> int:
    """Index just past the bracket group opening at text[i] ((, {, [ or <), literals skipped."""
    opener = text[i]
    if opener == "<":
        depth, j = 0, i
        while j < len(text):
            c = text[j]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
                if depth == 0:
                    return j + 1
            elif c in "({[":
                j = skip_balanced(text, j) - 1
            j += 1
        raise SourceError(f"unbalanced template arguments at {text[i:i + 80]!r}")
    stack, j = [], i
    while j < len(text):
        c = text[j]
        if c in "\"'":
            j = _skip_literal(text, j)
            continue
        if c == "R" and text.startswith('R"', j) and not (text[j - 1].isalnum() or text[j - 1] == "_"):
            m = re.match(r'R"([^(\s]{0,16})\(', text[j:])
            if m:
                j = text.index(")" + m.group(1) + '"', j) + len(m.group(1)) + 2
                continue
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in ")}]":
            if not stack or stack.pop() != c:
                raise SourceError(f"unbalanced brackets at {text[i:i + 80]!r}")
            if not stack:
                return j + 1
        j += 1
    raise SourceError(f"unclosed bracket at {text[i:i + 80]!r}")


def _skip_literal(text: str, j: int) -> int:
    q, j = text[j], j + 1
    while j < len(text) and text[j] != q:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def split_args(inner: str) -> list[str]:
    """Top-level comma-separated arguments of a call's inside (template <...> commas kept together)."""
    args, cur, j = [], [], 0
    while j < len(inner):
        c = inner[j]
        if c in "\"'":
            k = _skip_literal(inner, j)
            cur.append(inner[j:k])
            j = k
            continue
        if c in "({[":
            k = skip_balanced(inner, j)
            cur.append(inner[j:k])
            j = k
            continue
        if c == "<" and re.search(r"[\w:]$", "".join(cur).rstrip()) and re.match(r"<[\w:\s,<>*&]*>", inner[j:]):
            k = skip_balanced(inner, j)
            cur.append(inner[j:k])
            j = k
            continue
        if c == ",":
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        j += 1
    if "".join(cur).strip():
        args.append("".join(cur).strip())
    return args


def string_literal(arg: str) -> str | None:
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', arg.strip())
    return m.group(1) if m else None


MEMBER_DEFS = {"def", "def_static", "def_property", "def_property_readonly", "def_readwrite", "def_readonly",
               "def_property_static", "def_property_readonly_static", "def_readwrite_static", "def_readonly_static"}
# the member kinds that bind a property, and whether Python may set it ("rw") or only read it ("ro"); a
# def_property whose getter is nullptr is write-only ("wo": reading it raises AttributeError), one whose
# setter is nullptr read-only
PROPERTY_DEFS = {"def_property": "rw", "def_readwrite": "rw", "def_property_static": "rw", "def_readwrite_static": "rw",
                 "def_property_readonly": "ro", "def_readonly": "ro", "def_property_readonly_static": "ro",
                 "def_readonly_static": "ro"}
# .def(py::self OP ...) binds a dunder; only these appear in (or are plausible for) these sources
SELF_OPS = {"==": "__eq__", "!=": "__ne__", "<": "__lt__", "+": "__add__", "-": "__sub__", "*": "__mul__"}


# pybind11 argument annotations: "x"_a [= v], py::arg("x")[.noconvert()/.none(b)] [= v], py::arg_v("x", v[, doc])
ARG_A = re.compile(r'"(\w+)"\s*_a(?:\s*\.\s*\w+\s*\([^()]*\))*(\s*=\s*\S.*)?', re.S)
ARG_PY = re.compile(r'py::arg\s*\(\s*"(\w+)"\s*\)(?:\s*\.\s*\w+\s*\([^()]*\))*(\s*=\s*\S.*)?', re.S)
ARG_V = re.compile(r'py::arg_v\s*\(\s*"(\w+)"\s*,.*\)', re.S)
ARG_LIKE = re.compile(r'\s*(?:"\w*"\s*_a\b|py::arg(?:_v)?\b)')


def arg_list(extras: list[str], where: str = "") -> list[dict] | None:
    """The Python arguments a .def / py::init / m.def names, in order, from the annotations among its extra
    arguments: [{"name": "x", "default": bool}], or None when it names none (pybind11 then calls them arg0,
    arg1, ... and the arity is not read here). An annotation this does not recognise stops the script."""
    out = []
    for arg in extras:
        arg = arg.strip()
        if not ARG_LIKE.match(arg):
            continue
        m = ARG_A.fullmatch(arg) or ARG_PY.fullmatch(arg)
        if m:
            out.append({"name": m.group(1), "default": m.group(2) is not None})
            continue
        m = ARG_V.fullmatch(arg)
        if m:
            out.append({"name": m.group(1), "default": True})
            continue
        raise SourceError(f"{where}: unrecognised argument annotation {arg[:80]!r}")
    return out or None


def parse_chain(text: str, i: int) -> tuple[list[tuple[str, list[str]]], int]:
    """The `.name(args)` calls chained from text[i]; returns [(name, args)] and the index after the chain."""
    calls = []
    while True:
        m = re.compile(r"\s*\.\s*(\w+)\s*(?=\()").match(text, i)
        if not m:
            return calls, i
        open_at = m.end()
        close = skip_balanced(text, open_at)
        calls.append((m.group(1), split_args(text[open_at + 1:close - 1])))
        i = close


BIND_START = re.compile(r"py::(class_|enum_|bind_vector|bind_map|register_exception)\s*<")


def parse_bindings(text: str, where: str = "") -> dict:
    """Bindings in one preprocessed, comment-free translation unit.

    Returns {"classes": {py_name: {"cpp", "template", "members", "signatures", "properties"}}, "enums": {py_name:
    {"cpp", "members", "export_values"}}, "functions": [...], "function_signatures": {name: [overload, ...]},
    "attributes": [...], "vars": {var: py_name}}. Nested scopes (py::enum_<X>(someBinding, "Name")) are named
    "Outer.Name"; an overload is arg_list's answer for one .def of that name."""
    classes: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    functions: set[str] = set()
    function_signatures: dict[str, list] = {}
    attributes: set[str] = set()
    var_of: dict[str, str] = {}  # C++ variable holding a class binding -> its Python name

    def scope_name(arg: str) -> str:
        arg = arg.strip()
        if arg in ("m", "mod", "module"):
            return ""
        if arg in var_of:
            return var_of[arg] + "."
        raise SourceError(f"{where}: binding scope {arg!r} is neither the module nor a known class binding")

    def absorb(target: dict, kind: str, calls: list) -> None:
        for name, args in calls:
            if kind == "enum":
                if name == "value":
                    lit = string_literal(args[0]) if args else None
                    if lit is None:
                        raise SourceError(f"{where}: .value() without a literal name: {args[:1]}")
                    target["members"].add(lit)
                elif name == "export_values":
                    target["export_values"] = True
                elif name in MEMBER_DEFS:  # enums can carry methods too
                    _add_member(target, args, where, name)
            elif name in MEMBER_DEFS:
                _add_member(target, args, where, name)

    pos = 0
    while True:
        m = BIND_START.search(text, pos)
        # the module-level m.def / m.attr between here and the next binding
        seg_end = m.start() if m else len(text)
        for f in re.finditer(r"\bm\s*\.\s*def\s*(\()\s*\"([^\"]+)\"", text[pos:seg_end]):
            functions.add(f.group(2))
            open_at = pos + f.start(1)
            fargs = split_args(text[open_at + 1:skip_balanced(text, open_at) - 1])
            function_signatures.setdefault(f.group(2), []).append(arg_list(fargs[1:], where))
        for a in re.finditer(r"\bm\s*\.\s*attr\s*\(\s*\"([^\"]+)\"\s*\)\s*=(?!=)", text[pos:seg_end]):
            attributes.add(a.group(1))
        for v in re.finditer(r"\b(\w+)\s*\.\s*def\w*\s*\(", text[pos:seg_end]):
            if v.group(1) in var_of:
                calls, _ = parse_chain(text, pos + v.start(1) + len(v.group(1)))
                absorb(classes[var_of[v.group(1)]], "class", calls)
        if not m:
            break
        kind = m.group(1)
        t_end = skip_balanced(text, m.end() - 1)
        targs = split_args(text[m.end():t_end - 1])
        rest = re.compile(r"\s*(\w+)?\s*([({])").match(text, t_end)
        if not rest:
            raise SourceError(f"{where}: py::{kind}<...> not followed by a call: {text[m.start():m.start() + 120]!r}")
        var = rest.group(1)
        open_at = rest.end() - 1
        close = skip_balanced(text, open_at)
        args = split_args(text[open_at + 1:close - 1])
        lit = string_literal(args[1]) if len(args) > 1 else None
        if lit is None:
            raise SourceError(f"{where}: py::{kind} without a literal Python name: {text[m.start():close][:160]!r}")
        py_name = scope_name(args[0]) + lit
        calls, after = parse_chain(text, close)
        if kind == "enum_":
            entry = enums.setdefault(py_name, {"cpp": targs[0], "members": set(), "export_values": False})
            absorb(entry, "enum", calls)
        elif kind == "register_exception":
            classes.setdefault(py_name, {"cpp": targs[0], "template": targs, "members": set()})
        else:
            entry = classes.setdefault(py_name, {"cpp": targs[0], "template": targs, "members": set()})
            absorb(entry, "class", calls)
        if var:
            var_of[var] = py_name
        # `auto X = py::class_<..>(..)` names the binding after the `=`
        back = re.search(r"(?:auto|py::class_<.*>)\s+(\w+)\s*=\s*$", text[max(0, m.start() - 200):m.start()])
        if back:
            var_of[back.group(1)] = py_name
        pos = after
    return {"classes": classes, "enums": enums, "functions": functions, "function_signatures": function_signatures,
            "attributes": attributes, "vars": var_of}


def _add_member(target: dict, args: list[str], where: str, kind: str = "def") -> None:
    """One .def* call's member into `target`: its name into "members", and for a property (PROPERTY_DEFS)
    its access into "properties", for anything else (.def, .def_static, py::init) one more overload (arg_list)
    into "signatures"."""
    if not args:
        raise SourceError(f"{where}: .def() without arguments")
    first = args[0].strip()
    lit = string_literal(first)
    signatures = target.setdefault("signatures", {})
    if kind in PROPERTY_DEFS:
        if lit is None:
            raise SourceError(f"{where}: .{kind}() whose name is not a literal: {first[:80]!r}")
        access = PROPERTY_DEFS[kind]
        if kind in ("def_property", "def_property_static") and len(args) > 2:
            if args[1].strip() == "nullptr":
                access = "wo"
            elif args[2].strip() == "nullptr":
                access = "ro"
        target["members"].add(lit)
        target.setdefault("properties", {})[lit] = access
        note = deprecation(args[1:])
        if note is not None:
            target.setdefault("deprecated", {})[lit] = note
    elif lit is not None:
        target["members"].add(lit)
        signatures.setdefault(lit, []).append(arg_list(args[1:], where))
        note = deprecation(args[1:])
        if note is not None:
            target.setdefault("deprecated", {})[lit] = note
    elif first.startswith("py::init"):
        target["members"].add("__init__")
        sig = arg_list(args[1:], where)
        if sig is None and re.fullmatch(r"py::init(?:_alias)?\s*<\s*>\s*\(\s*\)", first):
            sig = []  # py::init<>(): a constructor of no arguments, known without names
        signatures.setdefault("__init__", []).append(sig)
    elif first.startswith("py::self"):
        op = re.match(r"py::self\s*(==|!=|<|\+|-|\*)", first)
        if not op:
            raise SourceError(f"{where}: unrecognised operator binding {first!r}")
        target["members"].add(SELF_OPS[op.group(1)])
        signatures.setdefault(SELF_OPS[op.group(1)], []).append(None)
    elif first.startswith("py::pickle"):
        target["members"].update({"__getstate__", "__setstate__"})
        signatures.setdefault("__getstate__", []).append(None)
        signatures.setdefault("__setstate__", []).append(None)
    else:
        raise SourceError(f"{where}: .def() whose name is not a literal: {first[:80]!r}")


def deprecation(args: list[str]) -> str | None:
    """The message of a utils::deprecate(fn, "msg") / utils::deprecateMember(&C::fn, "msg") wrapper among a
    .def's arguments (python/include/utils.h: calling it issues a DeprecationWarning with that text)."""
    for arg in args:
        m = re.search(r"utils::deprecate(?:Member)?\s*\(", arg)
        if m:
            inner = split_args(arg[m.end():skip_balanced(arg, m.end() - 1) - 1])
            lits = re.findall(r'"((?:[^"\\]|\\.)*)"', inner[-1]) if len(inner) > 1 else []
            return "".join(lits) or "deprecated"
    return None


def literal_names(text: str) -> tuple[set[str], set[str]]:
    """Every `.def*("name"` and `.value("NAME"` literal in a text: what the parsed bindings must account for."""
    defs = set(re.findall(r"\.\s*def\w*\s*\(\s*\"([^\"]+)\"", text))
    values = set(re.findall(r"\.\s*value\s*\(\s*\"([^\"]+)\"", text))
    return defs, values


def merge_units(units: list[dict]) -> dict:
    classes: dict[str, dict] = {}
    enums: dict[str, dict] = {}
    functions, attributes = set(), set()
    function_signatures: dict[str, list] = {}
    for u in units:
        for k, v in u["classes"].items():
            c = classes.setdefault(k, {"cpp": v["cpp"], "template": v["template"], "members": set()})
            c["members"] |= v["members"]
            c.setdefault("deprecated", {}).update(v.get("deprecated", {}))
            for name, overloads in v.get("signatures", {}).items():
                c.setdefault("signatures", {}).setdefault(name, []).extend(overloads)
            c.setdefault("properties", {}).update(v.get("properties", {}))
        for k, v in u["enums"].items():
            e = enums.setdefault(k, {"cpp": v["cpp"], "members": set(), "export_values": False})
            e["members"] |= v["members"]
            e["export_values"] = e["export_values"] or v["export_values"]
        functions |= u["functions"]
        for name, overloads in u.get("function_signatures", {}).items():
            function_signatures.setdefault(name, []).extend(overloads)
        attributes |= u["attributes"]
    return {"classes": classes, "enums": enums, "functions": functions, "function_signatures": function_signatures,
            "attributes": attributes}


def _cpp_key(t: str) -> str:
    return re.sub(r"^(::)?(nvinfer1|nvonnxparser|nvuffparser|nvcaffeparser1|tensorrt)::", "", t.strip())


def finish_api(merged: dict) -> dict:
    """JSON-ready: classes -> {"bases": [python names], "members": sorted, "signatures": {method: [overload,
    ...]}, "properties": {name: "rw"/"ro"/"wo"}}, enums -> sorted members, "function_signatures" likewise for
    the module's functions; an enum bound with .export_values() also puts its members on its scope
    (ILogger.WARNING, trt.ILogger.ERROR). An overload is a list of {"name", "default"} in call order, or None
    where the binding names no arguments; overloads keep their source order."""
    cpp_to_py = {}
    for py_name, c in merged["classes"].items():
        cpp_to_py.setdefault(_cpp_key(c["cpp"]), py_name)
    classes = {}
    for py_name, c in merged["classes"].items():
        bases = [cpp_to_py[_cpp_key(t)] for t in c["template"][1:] if _cpp_key(t) in cpp_to_py]
        classes[py_name] = {"bases": [b for b in bases if b != py_name], "members": set(c["members"]),
                            "deprecated": dict(sorted(c.get("deprecated", {}).items())),
                            "signatures": dict(sorted(c.get("signatures", {}).items())),
                            "properties": dict(sorted(c.get("properties", {}).items()))}
    attributes = set(merged["attributes"])
    for py_name, e in merged["enums"].items():
        if e["export_values"]:
            scope = py_name.rpartition(".")[0]
            if scope:
                classes[scope]["members"] |= e["members"]
            else:
                attributes |= e["members"]
    def entry(v: dict) -> dict:
        e = {"bases": v["bases"], "members": sorted(v["members"])}
        if v["deprecated"]:
            e["deprecated"] = v["deprecated"]  # member -> the DeprecationWarning text the binding issues
        e["signatures"] = v["signatures"]  # method (constructor: "__init__") -> its overloads' argument lists
        e["properties"] = v["properties"]  # property -> "rw" / "ro" / "wo"
        return e

    return {"classes": {k: entry(v) for k, v in sorted(classes.items())},
            "enums": {k: sorted(v["members"]) for k, v in sorted(merged["enums"].items())},
            "functions": sorted(merged["functions"]),
            "function_signatures": dict(sorted(merged.get("function_signatures", {}).items())),
            "attributes": sorted(attributes)}


def check_coverage(texts: dict[str, str], api: dict) -> None:
    """Every .def*("x") and .value("X") literal in the active source must be a parsed member somewhere."""
    members = set(api["functions"])
    for c in api["classes"].values():
        members |= set(c["members"])
    values = set()
    for e in api["enums"].values():
        values |= set(e)
    for path, text in texts.items():
        defs, vals = literal_names(text)
        missed = sorted((defs - members) | (vals - values))
        if missed:
            raise SourceError(f"{path}: names the parser did not attach to a binding: {missed[:20]}")


def binding_files(gitdir: str | Path, branch: str) -> list[str]:
    files = git(gitdir, "ls-tree", "-r", "--name-only", f"refs/heads/{branch}", "python/src", "python/include").split()
    return sorted(f for f in files if f.endswith((".cpp", ".h", ".hpp")))


def parse_api_sources(sources: dict[str, str]) -> dict:
    """{path: C++ source} of one branch -> finished API (see finish_api), cross-checked."""
    units, texts = [], {}
    for path, src in sources.items():
        try:
            text = preprocess(strip_comments(src))
        except SourceError as e:
            raise SourceError(f"{path}: {e}") from None
        if not re.search(r"py::(class_|enum_)|\.def\s*\(|\bm\s*\.\s*(def|attr)\b", text):
            continue
        texts[path] = text
        units.append(parse_bindings(text, path))
    api = finish_api(merge_units(units))
    check_coverage(texts, api)
    api["files"] = sorted(texts)
    return api


def api_branches(gitdir: str | Path) -> tuple[list[str], str]:
    present = branches(gitdir)
    tens = sorted((b for b in present if API_10.match(b)), key=lambda b: int(API_10.match(b).group(1)))
    missing = [b for b in API_FIXED if b not in present]
    if missing or not tens:
        raise SourceError(f"NVIDIA/TensorRT lacks {missing or 'any release/10.x branch'}")
    newest = tens[-1]
    return API_FIXED + ([newest] if newest not in API_FIXED else []), newest


def gen_api(gitdir: str | Path, onnx_gitdir: str | Path | None = None) -> dict:
    """{branch: finished API + provenance}; with `onnx_gitdir`, also the onnx-tensorrt commit the branch's
    parsers/onnx submodule pins and whether that commit is in the onnx-tensorrt snapshot (a 10.x release
    after 10.1 pins a commit no onnx-tensorrt GA branch carries, so its op table is the nearest GA branch)."""
    picked, newest = api_branches(gitdir)
    out = {}
    for branch in picked:
        commit = sha(gitdir, branch)
        pin = None
        line = git(gitdir, "ls-tree", commit, "parsers/onnx").split()
        if len(line) >= 3 and line[1] == "commit":
            present = None
            if onnx_gitdir is not None:
                present = subprocess.run(["git", f"--git-dir={onnx_gitdir}", "cat-file", "-e", f"{line[2]}^{{commit}}"],
                                         capture_output=True).returncode == 0
            pin = {"path": "parsers/onnx", "commit": line[2], "in_onnx_tensorrt_snapshot": present}
        sources = {f: git(gitdir, "show", f"{commit}:{f}") for f in binding_files(gitdir, branch)}
        try:
            api = parse_api_sources(sources)
        except SourceError as e:
            raise SourceError(f"NVIDIA/TensorRT {branch} ({commit}): {e}") from None
        if len(api["classes"]) < 50 or len(api["enums"]) < 20:
            raise SourceError(f"NVIDIA/TensorRT {branch}: only {len(api['classes'])} classes / {len(api['enums'])} "
                              "enums parsed; has the binding style changed?")
        out[branch] = {"repo": "NVIDIA/TensorRT", "branch": branch, "commit": commit, "newest_10x": branch == newest,
                       "path": "python/src (pybind11)", "onnx_parser_pin": pin, **api}
    return out


# ------------------------------------------------------------------------------------------------- main

def dumps(obj, depth: int = 0, flat_at: int = 4) -> str:
    """JSON with sorted keys, nested objects indented down to `flat_at` levels and everything deeper on one
    line: one operator row or one class per line, so a diff names what changed and the files stay small."""
    if isinstance(obj, dict) and obj and depth < flat_at:
        pad = " " * (depth + 1)
        items = [f"{pad}{json.dumps(k)}: {dumps(obj[k], depth + 1, flat_at)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    return json.dumps(obj, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)


def write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(doc) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensorrt", required=True, help="git dir of github.com/NVIDIA/TensorRT")
    ap.add_argument("--onnx-tensorrt", required=True, help="git dir of github.com/onnx/onnx-tensorrt")
    ap.add_argument("--out", default=str(DATA), help="output folder (default: the package's engine/data)")
    a = ap.parse_args(argv)
    try:
        ops = gen_ops(a.onnx_tensorrt, submodule_pins(a.tensorrt, ops_branches(a.onnx_tensorrt)))
        api = gen_api(a.tensorrt, a.onnx_tensorrt)
    except SourceError as e:
        print(f"gen_trt_sources: {e}", file=sys.stderr)
        return 1
    out = Path(a.out)
    note = "generated by tools/gen_trt_sources.py from the commits named here; do not edit by hand"
    write(out / "onnx_trt_ops.json", {"generated_by": note, "branches": ops})
    write(out / "trt_python_api.json", {"generated_by": note, "branches": api})
    for b, e in ops.items():
        print(f"  onnx-tensorrt {b} {e['commit'][:12]}: {len(e['ops'])} ops, opset {e['min_opset']}..{e['max_opset']}")
    for b, e in api.items():
        print(f"  TensorRT {b} {e['commit'][:12]}: {len(e['classes'])} classes, {len(e['enums'])} enums, "
              f"{len(e['functions'])} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
