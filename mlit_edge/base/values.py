"""One validator for the values a user gives, whichever way they come in: a command-line option (the CLI wraps
each rule as its click type, `cli.common.checked`) or a keyword of the Python API (the request dataclasses check
their fields with the same rules in `__post_init__`, `validate`). A value is refused in the same words either
way, and before any work starts: nan passes every `<` check, a str number fails one with Python's own words,
and a thread count past what the OpenMP runtime starts ends the process instead of raising.

The words follow click's own (`is not in the range 1<=x<=16`, `is not a valid integer`), so that an option
keeps the message its users and the hostile corpus already know. Stdlib only and Python 3.8 syntax (the
device's runtime imports it).
"""
from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional, Sequence, Tuple, Union

Bound = Optional[Union[int, float, Callable[[], int]]]  # a callable bound is read when checked (threads per core)


def _kind(value: Any) -> str:
    """What `value` is, after "is not ... (": "a str", "an int", "None"."""
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def describe_range(lo: Any, hi: Any) -> str:
    """The range as click writes it (`click.types._NumberRangeBase._describe_range`)."""
    if lo is None:
        return f"x<={hi}"
    return f"x>={lo}" if hi is None else f"{lo}<=x<={hi}"


def in_range(value: Any, lo: Any, hi: Any) -> Any:
    """`value` when it is from `lo` to `hi` (None: unbounded); else ValueError in click's words."""
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{value} is not in the range {describe_range(lo, hi)}")
    return value


@dataclass(frozen=True)
class Int:
    """An integer (not a bool, not a str that holds one) from `min` to `max`; None too where `optional`."""

    min: Bound = None
    max: Bound = None
    optional: bool = False
    name: str = "integer"

    def bounds(self) -> Tuple[Any, Any]:
        return tuple(b() if callable(b) else b for b in (self.min, self.max))  # type: ignore[return-value]

    def check(self, value: Any) -> Optional[int]:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{value!r} is not an integer ({_kind(value)})")
        return in_range(int(value), *self.bounds())

    def parse(self, text: str) -> Optional[int]:
        """An option's text as click's INT reads it (ASCII digits: int() would also take '²' or '1_0')."""
        text = str(text).strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(f"{text!r} is not a valid integer")
        return self.check(int(text))


@dataclass(frozen=True)
class Float:
    """A finite number (an int is one; a bool or a str is not) from `min` to `max`; None too where `optional`."""

    min: Bound = None
    max: Bound = None
    optional: bool = False
    name: str = "float"

    def bounds(self) -> Tuple[Any, Any]:
        return self.min, self.max

    def check(self, value: Any) -> Optional[float]:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{value!r} is not a number ({_kind(value)})")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return in_range(value, *self.bounds())

    def parse(self, text: str) -> Optional[float]:
        try:
            value = float(str(text).strip())  # `1e309` reads as inf, refused by check
        except ValueError:
            raise ValueError(f"{text!r} is not a valid float") from None
        return self.check(value)


@dataclass(frozen=True)
class Ints:
    """A sequence of integers, each an `Int(min)`, of `length` where given; an option writes it `1,8,64`."""

    min: Bound = 1
    length: Optional[int] = None
    optional: bool = False
    example: str = "1,8,64"
    name: str = "integers"

    def check(self, value: Any) -> Optional[Tuple[int, ...]]:
        if value is None and self.optional:
            return None
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and self.length in (None, 1):
            value = (value,)  # batches=8 is (8,)
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{value!r} is not a list of integers ({_kind(value)})")
        items = tuple(Int(self.min).check(v) for v in value)
        if not items or (self.length is not None and len(items) != self.length):
            count = f"{self.length} integers" if self.length else "at least one integer"
            raise ValueError(f"{list(items)}: expected {count}, e.g. {self.example}")
        return items  # type: ignore[return-value]

    def parse(self, text: str) -> Optional[Tuple[int, ...]]:
        return self.check([Int().parse(v) for v in str(text).split(",") if v.strip()])


@dataclass(frozen=True)
class Flag:
    """True or False: a str ('no') or a number would be read as true."""

    name: str = "boolean"

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{value!r} is not True or False ({_kind(value)})")
        return value


@dataclass(frozen=True)
class Text:
    """A non-empty str (one of `choices` where given): '' would read as "not given" where None means a default."""

    choices: Tuple[str, ...] = ()
    optional: bool = False
    name: str = "text"

    def check(self, value: Any) -> Optional[str]:
        if value is None and self.optional:
            return None
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a str ({_kind(value)})")
        if self.choices and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, self.choices))}.")
        if not value.strip() or "\0" in value:
            raise ValueError(f"{value!r} is empty" if not value.strip() else f"{value!r} holds a NUL character")
        return value


@dataclass(frozen=True)
class PathArg:
    """A path: a str or anything `os.PathLike` (the API's own artifacts), kept as its str; not '' (which
    would mean the current folder, or "not given"), not bytes, not a NUL character (the OS cannot take one)."""

    optional: bool = False
    name: str = "path"

    def check(self, value: Any) -> Optional[str]:
        if value is None and self.optional:
            return None
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a path ({_kind(value)})")
        if not value:
            raise ValueError("'' is not a path (an empty name)")
        if "\0" in value:
            raise ValueError(f"{value!r} is not a path (it holds a NUL character)")
        return value

    def parse(self, text: str) -> Optional[str]:
        return self.check(text)


Rule = Union[Int, Float, Ints, Flag, Text, PathArg]


def arg(default: Any, rule: Rule, option: Optional[str] = None) -> Any:
    """A request dataclass's field checked by `rule`; `option` is its command-line name where that is not
    `--` + the field's name with dashes."""
    return field(default=default, metadata={"rule": rule, "option": option})


def option_name(obj_or_cls: Any, name: str) -> str:
    """The command-line option of field `name`, the name every refusal of it starts with."""
    meta = obj_or_cls.__dataclass_fields__[name].metadata
    return meta.get("option") or "--" + name.replace("_", "-")


def rule_of(cls: Any, name: str) -> Rule:
    """The rule of field `name` of the dataclass `cls` (what the CLI's option of it checks with)."""
    return cls.__dataclass_fields__[name].metadata["rule"]


def check_value(rule: Rule, value: Any, option: str) -> Any:
    """`value` as `rule` takes it (a path as a str, an int as an int), or a TypeError/ValueError in one line that
    starts with `option`."""
    try:
        return rule.check(value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{option}: {e}") from None


def validate(obj: Any) -> None:
    """Check every field of the (frozen) dataclass `obj` that has a rule, and keep each value as its rule
    gives it back (a `Path` as a str, numpy's int64 as an int)."""
    for f in fields(obj):
        rule = f.metadata.get("rule")
        if rule is not None:
            object.__setattr__(obj, f.name, check_value(rule, getattr(obj, f.name), option_name(obj, f.name)))


THREADS_PER_CORE = 8  # [ours] past this, threads only contend; far past it the runtime crashes starting them


def max_threads() -> int:
    """The most threads a runtime is asked to start here: 8 per core."""
    return THREADS_PER_CORE * (os.cpu_count() or 1)


def default_threads() -> int | None:
    """The thread count a runtime starts when none is given: `OMP_NUM_THREADS` when it holds a whole number
    from 1 to `max_threads()`, else None (the runtime's own default, one per physical core). PyTorch reads
    the variable itself; ONNX Runtime and OpenVINO do not, so a process limited to one core by it (a
    container, a test worker) would otherwise start a spinning pool per session that fights its neighbours."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if re.fullmatch(r"[0-9]{1,4}", value) and 1 <= int(value) <= max_threads() else None


def check_threads(threads, where: str) -> None:
    """ValueError naming `where` unless `threads` is None or an integer from 1 to `max_threads()`."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                or not 1 <= threads <= max_threads()):
        raise ValueError(f"{where} is {threads!r}, expected an integer from 1 to {max_threads()} (8 per core here)")
