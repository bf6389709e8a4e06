"""Train a small CNN on the digits database with picpac's TorchLoader, on the CPU, with checkpoints.

    python examples/train_torch.py                          # 12 epochs, >= 97% held-out accuracy
    python examples/train_torch.py --checkpoint ck.pt       # save model, optimizer and loader each epoch
    python examples/train_torch.py --checkpoint ck.pt --resume ck.pt   # continue where ck.pt stopped

The database is examples/digits.py's (built on the first run, kept in --db). The checkpoint holds
the model, the optimizer and ``loader.state_dict()``, so a resumed run goes on with the very batches
(order and augmentation) the interrupted run would have had, even from the middle of an epoch
(``--save-every N`` steps). Each epoch prints one line ``epoch E step S loss L held-out A``; the last
line is ``held-out accuracy A``.
"""
from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import digits

from picpac.adapters.torch import TorchLoader

STREAM = digits.STREAM


def make_model() -> torch.nn.Module:
    def block(cin, cout):
        return [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU(),
                torch.nn.MaxPool2d(2)]
    return torch.nn.Sequential(*block(1, 16), *block(16, 32), *block(32, 64),       # 32 -> 16 -> 8 -> 4
                               torch.nn.Flatten(), torch.nn.Dropout(0.2), torch.nn.Linear(64 * 4 * 4, digits.CLASSES))


def evaluate(model: torch.nn.Module, loader: TorchLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels, pad in loader:
            n = len(labels) - pad
            correct += int((model(images[:n]).argmax(1) == labels[:n]).sum())
            total += n
    model.train()
    return correct / total


def save(path: str, model, optimizer, scheduler, loader, epoch: int, step: int) -> None:
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "loader": loader.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch, "step": step}
    partial = path + ".partial"
    torch.save(state, partial)
    os.replace(partial, path)  # a kill while saving leaves the previous checkpoint whole


def main(argv=None) -> float:
    parser = digits.arguments(__doc__)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpoint", help="save a checkpoint here after every epoch (and --save-every steps)")
    parser.add_argument("--save-every", type=int, default=0, metavar="N", help="also save every N steps")
    parser.add_argument("--resume", metavar="PATH", help="continue from this checkpoint")
    parser.add_argument("--seed", type=int, default=0, help="the model's initialisation")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="torch's CPU threads (default: half the cores; the loader's decoding threads use the rest)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    digits.build(args.db)

    loader = TorchLoader(args.db, **STREAM, **digits.TRAIN)
    held_out = TorchLoader(args.db, **STREAM, **digits.HELD_OUT)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.epochs * len(loader))

    epoch, step, resumed = 0, 0, False
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        loader.load_state_dict(checkpoint["loader"])  # the next batch is the one after the saved step
        torch.set_rng_state(checkpoint["rng"])         # dropout's draws too: the run goes on as if never stopped
        epoch, step, resumed = checkpoint["epoch"], checkpoint["step"], True
        print(f"resumed from {args.resume}: epoch {epoch} step {step}", flush=True)

    accuracy = evaluate(model, held_out) if epoch >= args.epochs else 0.0
    started = time.perf_counter()
    while epoch < args.epochs:
        if not resumed:
            loader.set_epoch(epoch)  # a resumed run's loader is already in this epoch, maybe in its middle
        resumed = False
        total, batches = 0.0, 0
        for images, labels, pad in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)  # the filler of a short batch: none
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if scheduler.last_epoch < scheduler.total_steps:
                scheduler.step()
            step += 1
            total, batches = total + loss.item(), batches + 1
            if args.checkpoint and args.save_every and step % args.save_every == 0:
                save(args.checkpoint, model, optimizer, scheduler, loader, epoch, step)
        epoch += 1
        accuracy = evaluate(model, held_out)
        if args.checkpoint:
            save(args.checkpoint, model, optimizer, scheduler, loader, epoch, step)  # the loader: at epoch's end
        print(f"epoch {epoch - 1} step {step} loss {total / max(batches, 1):.4f} held-out {accuracy:.4f} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    loader.close(), held_out.close()
    print(f"held-out accuracy {accuracy:.4f}", flush=True)
    return accuracy


if __name__ == "__main__":
    main()
