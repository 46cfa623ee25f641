"""What every command shares: option callbacks, the one-line error wrapper, the progress log."""
from __future__ import annotations

import dataclasses
import math
import sys
from functools import wraps

import click

from ..export import DEFAULT_OPSET, OPSETS
from ..model.config import SIZES, parse_overrides
from ..base.messages import first_line, printable
from ..base.values import Float, Int, describe_range, rule_of
from ..bench.options import BenchConfig
from ..export.requests import SEED_MAX, BuildRequest, ExportOptions

USER_ERRORS = (ValueError, KeyError, OSError, RuntimeError, TypeError, ArithmeticError)
TRAINING = ("train", "pretrain", "finetune")  # commands that checkpoint every epoch


class Checked(click.ParamType):
    """An option read and checked by the rule its request field is checked by (`base.values`): the CLI and
    the Python API refuse a value at the same bounds, in the same words, and the rule lives in one place."""

    def __init__(self, rule) -> None:
        self.rule = rule
        self.name = rule.name

    def get_metavar(self, param, ctx=None) -> str:
        """The type and, for a bounded number, its range as click's IntRange shows it (`INTEGER 1<=x<=16`)."""
        bounds = self.rule.bounds() if isinstance(self.rule, (Int, Float)) else (None, None)
        return " ".join([self.name.upper(), *([describe_range(*bounds)] if bounds != (None, None) else [])])

    def convert(self, value, param, ctx):
        try:  # an option's text is parsed; a default (already a value) is only checked
            return self.rule.parse(value) if isinstance(value, str) else self.rule.check(value)
        except (TypeError, ValueError) as e:
            self.fail(str(e), param, ctx)


def checked(cls, name: str) -> Checked:
    """The click type of the option that fills field `name` of the request dataclass `cls`."""
    return Checked(rule_of(cls, name))


def _seed() -> Checked:
    return Checked(Int(0, SEED_MAX))


SEED = _seed()  # export.requests.SEED_MAX says why a seed is 0 to 2^32 - 1


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and infinity (`1e309` too): nan passes every range check, and
    both would only fail later, mid-run ("loss became nan"), after a run folder was made."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def thread_count() -> Checked:
    """The type of a --threads option: 1 to 8 per core of this machine (`base.values.max_threads`); past
    that the OpenMP runtime of torch or ONNX Runtime can fail to start them instead of refusing in one line.
    The rule is `BenchConfig.threads`'s, which the Python API and `Classifier.load` check with too."""
    return checked(BenchConfig, "threads")


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
    """Comma-separated batch sizes, read by `BenchConfig.batches`'s rule."""
    return checked(BenchConfig, "batches").convert(value, param, ctx)


def batch_triple(ctx: click.Context, param: click.Parameter, value: str | None):
    """MIN,OPT,MAX, read by `BuildRequest.dynamic_batch`'s rule (its order is the request's to check)."""
    return None if value is None else checked(BuildRequest, "dynamic_batch").convert(value, param, ctx)


def user_errors(fn):
    """Turn expected failures (bad paths, bad values, refused checkpoints) into one-line errors."""
    from ..base.terminate import EXIT_CODE, Terminated, sigterm_raises

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with sigterm_raises():  # SIGTERM unwinds like Ctrl-C: the command's temporaries are removed
                return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise click.ClickException(printable(first_line(e))) from None
        except (KeyboardInterrupt, Terminated) as e:
            what = "terminated" if isinstance(e, Terminated) else "interrupted"
            click.echo(f"{what}; the last completed epoch's checkpoint is intact (use --resume)"
                       if fn.__name__ in TRAINING else what, err=True)
            sys.exit(EXIT_CODE if isinstance(e, Terminated) else 130)
    return wrapper


def default(cls, name: str):
    """The default of field `name` of the dataclass `cls` (a request): a CLI option shows the one default there is."""
    f = cls.__dataclass_fields__[name]
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def log(line: str) -> None:
    click.echo(line, err=True)


SIZE = click.option("--size", default="xxs", show_default=True, callback=check_size,
                    help=f"Model size, one of: {', '.join(SIZES)}.")
def _opset() -> Checked:
    return checked(ExportOptions, "opset")


OPSET = click.option("--opset", default=None, type=_opset(),
                     help=f"ONNX opset of the portable graph (TensorRT's), {OPSETS[0]}-{OPSETS[-1]}; ONNX Runtime's "
                          f"fused one is opset 23 [default: {DEFAULT_OPSET}, or the newest a --jetpack's parser "
                          "reads; a given opset past that is refused].")

