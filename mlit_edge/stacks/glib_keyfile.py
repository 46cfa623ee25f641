"""GLib's key file, as DeepStream reads its configs, replayed for the subset `export-deepstream` writes.

nvinfer (gst_nvinfer_parse_config_file) and deepstream-app (parse_config_file) load their files with
g_key_file_load_from_file(..., G_KEY_FILE_NONE) and read each key with g_key_file_get_integer, _double,
_boolean, _string, _string_list and the list forms, with the default ';' list separator. This module does what
GLib's gkeyfile.c does for those calls (the functions are named beside each rule), so `nvinfer_rules` can
check a file without PyGObject, on a device or a workstation alike; tests/runtime/test_nvinfer_rules.py holds
it against GLib itself. Locale keys (key[xx]) and NUL bytes are outside the subset: refused.

Writing is the other half (`keyfile_text`): every line `export-deepstream` writes goes through one checker, so a
value taken from a file name, a sidecar or an argument can never be read back by GLib as anything but itself.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence

_WS = " \t\n\v\f\r"  # g_ascii_isspace
_ESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}  # g_key_file_parse_value_as_string
_INT = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")  # strtol(value, &end, 10)
_DOUBLE = re.compile(r"[ \t\n\v\f\r]*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|"
                     r"nan(?:\([0-9A-Za-z_]*\))?|0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?)", re.I)


class KeyFileError(ValueError):
    """What GLib's key file refuses (or this subset of it does not model), one line."""


def parse_keyfile(text: str) -> Dict[str, Dict[str, str]]:
    """{group: {key: raw value}} as gkeyfile.c's g_key_file_parse_line keeps them: lines split on '\\n' less one
    '\\r'; leading whitespace skipped; '#' or nothing is a comment; '[name]' opens a group (spaces or tabs may
    follow ']'; a group seen again is continued); 'key = value' is a pair whose key loses its trailing and value
    its leading whitespace (the value's trailing whitespace stays); a key given twice keeps its last value."""
    if "\0" in text:
        raise KeyFileError("a NUL byte: outside the subset modelled here")
    groups: Dict[str, Dict[str, str]] = {}
    current: Optional[Dict[str, str]] = None
    for line in text.split("\n"):
        line = line[:-1] if line.endswith("\r") else line
        start = line.lstrip(_WS)
        if not start or start[0] == "#":  # g_key_file_line_is_comment
            continue
        close = start.find("]")
        if start[0] == "[" and close > 0 and not start[close + 1:].strip(" \t"):  # g_key_file_line_is_group
            name = start[1:close]
            if not name or any(c == "[" or ord(c) < 32 or ord(c) == 127 for c in name):  # g_key_file_is_group_name
                raise KeyFileError(f"invalid group name: {name}")
            current = groups.setdefault(name, {})
            continue
        eq = start.find("=")
        if eq <= 0:  # g_key_file_line_is_key_value_pair: an '=', not first
            raise KeyFileError(f"line {start!r} is not a key-value pair, group, or comment")
        if current is None:
            raise KeyFileError("the file does not start with a group")
        key = start[:eq].rstrip(_WS)
        if "[" in key or "]" in key:  # a locale key (g_key_file_is_key_name): not written here
            raise KeyFileError(f"key {key!r}: locale keys are outside the subset modelled here")
        current.pop(key, None)
        current[key] = start[eq + 1:].lstrip(_WS)
    return groups


def _unescape(raw: str, split: bool) -> List[str]:
    """g_key_file_parse_value_as_string: \\s \\n \\t \\r \\\\ (and \\; in a list) unescaped; in a list the
    value is cut at each unescaped ';', an empty last piece dropped."""
    pieces, piece, i = [], [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            i += 1
            if i == len(raw):
                raise KeyFileError("escape character at end of line")
            if raw[i] in _ESCAPES or (split and raw[i] == ";"):
                piece.append(_ESCAPES.get(raw[i], raw[i]))
            else:
                raise KeyFileError(f"invalid escape sequence \\{raw[i]}")
        elif split and c == ";":
            pieces.append("".join(piece))
            piece = []
        else:
            piece.append(c)
        i += 1
    if piece or not split:
        pieces.append("".join(piece))
    return pieces


def glib_string(raw: str) -> str:
    """g_key_file_get_string."""
    return _unescape(raw, False)[0]


def glib_list(raw: str) -> List[str]:
    """g_key_file_get_string_list (also the pieces of the integer and double lists)."""
    return _unescape(raw, True)


def glib_int(raw: str) -> int:
    """g_key_file_parse_value_as_integer: strtol base 10, then nothing or whitespace, within a gint."""
    m = _INT.match(raw)
    if not raw or not m or (m.end() < len(raw) and raw[m.end()] not in _WS):
        raise KeyFileError(f"value {raw!r} cannot be interpreted as a number")
    if not -2 ** 31 <= int(m.group(1)) < 2 ** 31:
        raise KeyFileError(f"integer value {raw!r} out of range")
    return int(m.group(1))


def glib_double(raw: str) -> float:
    """g_key_file_parse_value_as_double: g_ascii_strtod must read the whole value (no trailing whitespace)."""
    if not _DOUBLE.fullmatch(raw):
        raise KeyFileError(f"value {raw!r} cannot be interpreted as a float number")
    text = raw.lstrip(_WS)
    body = text.lstrip("+-").lower()
    if body.startswith("0x"):
        return float.fromhex(text)
    return float("nan") if body.startswith("nan") else float(text)


def glib_bool(raw: str) -> bool:
    """g_key_file_parse_value_as_boolean: true, false, 1 or 0, trailing whitespace allowed."""
    word = raw.rstrip(_WS)
    if word not in ("true", "false", "1", "0"):
        raise KeyFileError(f"value {raw!r} cannot be interpreted as a boolean")
    return word in ("true", "1")


def _glib_uint64(raw: str) -> int:
    """g_key_file_get_uint64: g_ascii_strtoull over the whole value (a '-' negates modulo 2**64, as strtoull does;
    an overflow saturates)."""
    m = re.fullmatch(r"[ \t\n\v\f\r]*([+-]?)([0-9]+)", raw)
    if not m:
        raise KeyFileError(f"value {raw!r} cannot be interpreted as a number")
    value = min(int(m.group(2)), 2 ** 64 - 1)
    return (-value) % 2 ** 64 if m.group(1) == "-" and value < 2 ** 64 - 1 else value


_KEY = re.compile(r"[A-Za-z0-9-]+")  # [ours] the keys DeepStream reads; g_key_file_is_key_name allows more


def value_problem(value: str) -> Optional[str]:
    """Why GLib would not read `value`, written after `key=`, back as exactly `value` (None: it would). gkeyfile.c:
    g_key_file_parse_data ends a line at every '\\n' (a value holding one would add lines, even groups, to the
    file) and drops a '\\r' before it; g_key_file_parse_key_value_pair skips the value's leading whitespace
    (g_ascii_isspace); g_key_file_parse_value_as_string reads '\\' as an escape (an unknown one is an error);
    g_key_file_parse_line refuses a line that is not UTF-8. [ours] trailing whitespace, which GLib keeps, is
    refused as well: it is invisible in the file, and so are the other unprintable characters (NBSP, U+2028)."""
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        return (f"holds the unprintable character U+{ord(bad):04X}, which GLib's key file would read as "
                + ("the end of the line (g_key_file_parse_data)" if bad in "\r\n" else "something else"))
    if value != value.strip(_WS):
        return "starts or ends with a space, which GLib drops or which no reader of the file sees " \
               "(g_key_file_parse_key_value_pair)"
    if "\\" in value:
        return "holds a backslash, which GLib reads as an escape (g_key_file_parse_value_as_string)"
    return None


def keyfile_text(lines: Sequence[str], where: str, items: Optional[Dict[str, int]] = None) -> str:
    """The key file of `lines` (each a blank, a '#' comment, a '[group]' or a 'key=value'), every line checked as
    GLib will read it: one line each (no line break in a comment either), a group name GLib takes, a value
    `value_problem` passes, and for the keys in `items` a list of exactly that many items (';' is GLib's list
    separator, g_key_file_get_string_list). KeyFileError (one line naming `where` and the key) otherwise."""
    items = items or {}
    for line in lines:
        if not line or line.startswith(("#", "[")):
            if any(not c.isprintable() for c in line):
                raise KeyFileError(f"{where}: the line {line[:60]!r} holds an unprintable character (a line break "
                                   "would start another line of the file: g_key_file_parse_data)")
            if not line.startswith("["):
                continue
            if not (line.endswith("]") and line.count("]") == 1 and len(line) > 2 and "[" not in line[1:]):
                raise KeyFileError(f"{where}: {line!r} is not a group name GLib reads (g_key_file_is_group_name)")
            continue
        key, eq, value = line.partition("=")
        if not eq or not _KEY.fullmatch(key):
            raise KeyFileError(f"{where}: {line!r} is not a key=value line")
        problem = value_problem(value)
        if problem is None and key in items and len(glib_list(value)) != items[key]:
            problem = f"is {len(glib_list(value))} items for GLib (';' separates them), expected {items[key]}"
        if problem:
            raise KeyFileError(f"{where}: {key}={value[:80]!r} {problem}")
    return "\n".join(lines) + "\n"


READERS: Dict[str, Callable] = {
    "int": glib_int, "double": glib_double, "bool": glib_bool, "string": glib_string, "strings": glib_list,
    "ints": lambda raw: [glib_int(p) for p in glib_list(raw)], "uint64": _glib_uint64,
    "doubles": lambda raw: [glib_double(p) for p in glib_list(raw)]}



__all__ = ["KeyFileError", "parse_keyfile", "glib_string", "glib_list", "glib_int", "glib_double", "glib_bool",
           "READERS", "value_problem", "keyfile_text"]
