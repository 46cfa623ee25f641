"""The `mlit-edge` command line. Bad input ends in a one-line error and a non-zero exit."""
from __future__ import annotations

import json

import click

from . import __version__
from .config import SIZES


def _size(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value.lower() not in SIZES:
        raise click.ClickException(f"unknown model size {value!r}; valid sizes: {', '.join(SIZES)}")
    return value.lower()


SIZE = click.option("--size", default="xxs", show_default=True, callback=_size,
                    help=f"Model size, one of: {', '.join(SIZES)}.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlit-edge")
def main() -> None:
    """mlit-edge: train, convert, build and benchmark mLiT vision transformers for edge GPUs."""


@main.command()
@SIZE
@click.option("--num-classes", default=100, show_default=True, type=click.IntRange(min=1),
              help="Classes of the head (the paper's counts use 100).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON instead of text.")
def info(size: str, num_classes: int, as_json: bool) -> None:
    """Per-layer table of a model size: hidden size, experts, parameters and MACs, with totals.

    Also shows how the reconstructed size compares with the paper's parameter count.
    """
    from .config import get_config
    from .info import format_table, model_stats, paper_comparison

    cfg = get_config(size, num_classes=num_classes)
    stats = model_stats(cfg)
    paper = paper_comparison(size, cfg)
    if as_json:
        click.echo(json.dumps({"size": size, **stats, "paper": paper}, indent=2))
    else:
        click.echo(format_table(size, stats, paper))


if __name__ == "__main__":
    main()
