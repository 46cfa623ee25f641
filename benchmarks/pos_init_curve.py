"""How fast mLiT learns the embedded digits from each position init, side by side in one run.

Both arms are the same model, seed, data order, batch, lr schedule and precision; only
`pos_init` differs ("normal": timm's N(0, 0.02), the default; "sincos": MAE's 2-D table). Each
trains the first --epochs epochs of a --schedule-epochs cosine schedule with `train.loop`'s own
epoch function, and the test top-1 after every epoch is printed.

    python benchmarks/pos_init_curve.py --epochs 3 --schedule-epochs 15
"""
from __future__ import annotations

import argparse
import time

import torch

from mlit_edge.model.mlit import new_model as create_model
from mlit_edge.train.data import Loader, load_dataset
from mlit_edge.train.device import amp_dtype
from mlit_edge.train.loop import RoutingStats, evaluate, lr_at, make_optimizer, param_groups, train_one_epoch


def curve(pos_init: str, args, train_set, test_set, dtype) -> list[float]:
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    model = create_model(args.size, num_classes=len(train_set.classes), pos_init=pos_init)
    loader = Loader(train_set, args.batch_size, train=True, device=device, seed=args.seed)
    test = Loader(test_set, 256, train=False, device=device)
    total = args.schedule_epochs * len(loader)
    opt = make_optimizer(param_groups(model, 0.05), args.lr, device)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, total, args.lr, int(0.05 * total)) / args.lr)
    tops = []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        train_one_epoch(model, loader, opt, sched, None, "train", RoutingStats(model.cfg.experts_per_layer()),
                        dtype, progress=False)
        tops.append(evaluate(model, test, dtype)["acc"])
        print(f"  {pos_init:<7} epoch {epoch + 1}: test top-1 {tops[-1]:.3f}", flush=True)
    return tops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="xxs")
    ap.add_argument("--epochs", type=int, default=3, help="epochs trained per arm")
    ap.add_argument("--schedule-epochs", type=int, default=15, help="length of the lr schedule they are part of")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--amp", default="auto", choices=["auto", "bf16", "off"], help="as `mlit-edge train --amp`")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not 1 <= args.epochs <= args.schedule_epochs:
        raise SystemExit("--epochs must be between 1 and --schedule-epochs")
    dtype = amp_dtype(args.amp, torch.device("cpu"))
    train_set, test_set = load_dataset("mnist5k", "train"), load_dataset("mnist5k", "test")
    start = time.perf_counter()
    print(f"mLiT-{args.size.upper()} on mnist5k, batch {args.batch_size}, lr {args.lr:g}, {args.epochs} of "
          f"{args.schedule_epochs} epochs, amp {dtype or 'off'}, {torch.get_num_threads()} threads")
    results = {p: curve(p, args, train_set, test_set, dtype) for p in ("normal", "sincos")}
    print("test top-1 after each epoch")
    for p, tops in results.items():
        print(f"  {p:<7} " + "  ".join(f"{t:.3f}" for t in tops))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
