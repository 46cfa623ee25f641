"""What every command shares: option callbacks, the one-line error wrapper, the progress log."""
from __future__ import annotations

import dataclasses
import math
import sys
from functools import wraps

import click

from ..export import DEFAULT_OPSET, OPSETS
from ..model.config import SIZES, parse_overrides
from ..runtime.messages import first_line, printable

USER_ERRORS = (ValueError, KeyError, OSError, RuntimeError, TypeError, ArithmeticError)
TRAINING = ("train", "pretrain", "finetune")  # commands that checkpoint every epoch


# A seed is 0 to 2^32 - 1: numpy's default_rng refuses a negative one, torch.manual_seed one past 2^64 (and the
# loader's per-epoch seed, seed * 1000003 + ..., must stay within it), both in the library's words and mid-run
SEED = click.IntRange(0, 2 ** 32 - 1)


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and infinity (`1e309` too): nan passes every range check, and
    both would only fail later, mid-run ("loss became nan"), after a run folder was made."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def thread_count() -> click.IntRange:
    """The type of a --threads option: 1 to 8 per core of this machine (`runtime.runners.max_threads`); past
    that the OpenMP runtime of torch or ONNX Runtime can fail to start them instead of refusing in one line."""
    from ..runtime.runners import max_threads

    return click.IntRange(min=1, max=max_threads())


def check_size(ctx: click.Context | None, param: click.Parameter | None, value: str | None) -> str | None:
    if value is not None and value.lower() not in SIZES:
        raise click.ClickException(f"unknown model size {value!r}; valid sizes: {', '.join(SIZES)}")
    return value.lower() if value is not None else None


def parse_set(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    try:
        return parse_overrides(values)
    except ValueError as e:
        raise click.ClickException(str(e)) from None


def int_list(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers, e.g. 1,8,64") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{value!r}: batch sizes must be at least 1")
    return out


def batch_triple(ctx: click.Context, param: click.Parameter, value: str | None):
    if value is None:
        return None
    try:
        lo, opt, hi = (int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected MIN,OPT,MAX, e.g. 1,8,64") from None
    return lo, opt, hi


def user_errors(fn):
    """Turn expected failures (bad paths, bad values, refused checkpoints) into one-line errors."""
    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise click.ClickException(printable(first_line(e))) from None
        except KeyboardInterrupt:
            click.echo("interrupted; the last completed epoch's checkpoint is intact (use --resume)"
                       if fn.__name__ in TRAINING else "interrupted", err=True)
            sys.exit(130)
    return wrapper


def default(cls, name: str):
    """The default of field `name` of the dataclass `cls` (a request): a CLI option shows the one default there is."""
    f = cls.__dataclass_fields__[name]
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def log(line: str) -> None:
    click.echo(line, err=True)


SIZE = click.option("--size", default="xxs", show_default=True, callback=check_size,
                    help=f"Model size, one of: {', '.join(SIZES)}.")
OPSET = click.option("--opset", default=DEFAULT_OPSET, show_default=True, type=click.IntRange(OPSETS[0], OPSETS[-1]),
                     help="ONNX opset of the portable graph (TensorRT's); ONNX Runtime's fused one is opset 23.")

