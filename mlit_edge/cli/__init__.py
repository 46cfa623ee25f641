"""The `mlit-edge` command line: each command parses its options and calls one function of its stage.

Bad input ends in a one-line error and a non-zero exit. Options carry the names of the request
dataclass fields they fill, and the dataclasses validate them. The commands live with their stage:
`train` (info, train, pretrain, finetune, eval, export-weights, pretrained, quickstart), `deploy` (export, build, check, export-triton, export-deepstream) and
`inference` (bench, predict, serve, stream); nothing here imports torch until a command that needs it runs.
"""
from __future__ import annotations

import click

from .. import __version__
from ..base.messages import log_to_stderr
from . import deploy
from .inference import bench, predict, serve, stream
from .train import eval_, export_weights, finetune, info, pretrain, pretrained, quickstart, train


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mlit-edge")
def main() -> None:
    """mlit-edge: train, convert, build and benchmark mLiT vision transformers for edge GPUs."""
    log_to_stderr()


for command in (info, train, pretrain, finetune, eval_, pretrained, bench, quickstart, predict, serve, stream,
                export_weights, *deploy.COMMANDS):
    main.add_command(command)
