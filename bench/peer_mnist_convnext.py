#!/usr/bin/python3
# /usr/bin/python3 bench/peer_mnist_convnext.py --epochs 2 --max-train 3200
#
# The PyTorch-eager peer of recipes/mnist_convnext.toml, for bench/run.sh. Debian's python3-torch,
# python3-opencv and python3-numpy only (no pip, no timm): timm's convnext_atto is written out below
# in plain PyTorch, exactly as /work/shared/reference/timm.md describes it, and the parameter count
# is checked against timm's (3,376,450 for in_chans 1, 10 classes) before anything runs.
#
# Same work as `engine run recipes/mnist_convnext.toml`: same CSV, an 80/20 shuffled split of the
# same sizes (not the same rows: the engine's shuffle uses its own RNG), the same augmentations
# (OpenCV, albumentations semantics), the same model, init, optimizer, schedule, loss, batch size,
# memory format (channels-last: the engine's convnext default), eval batch (2 x batch), best
# checkpoint, reload of the best weights, final evaluation and test-set prediction.
# Differences that are the point of the benchmark: the engine's loader uses threads in one
# process, this one DataLoader worker processes; the engine's loop is C++, this one Python.
#
# Prints progress per epoch, then one JSON line (the last line) that bench/run.sh reads.
import argparse
import json
import math
import os
import random
import resource
import sys
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECTED_PARAMS = 3_376_450  # timm convnext_atto, in_chans 1, 10 classes (reference/timm.md)
MEAN, STD = 0.1310, 0.30854  # on the 0..1 scale; inputs are 0..255 (max_pixel_value 255)


# ---------------------------------------------------------------------------------------------
# Data: digit CSV -> uint8 28x28 images, 80/20 split, albumentations-style transforms in OpenCV.

def read_digit_csv(path, labeled=True):
    a = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.uint8 if not labeled else np.int64)
    if labeled:
        return a[:, 1:].astype(np.uint8).reshape(-1, 28, 28), a[:, 0].astype(np.int64)
    return a.reshape(-1, 28, 28), None


def split_indices(n, valid_fraction, seed, max_train, max_valid):
    order = np.random.default_rng(seed).permutation(n)
    n_valid = int(n * valid_fraction + 0.5)
    train, valid = order[: n - n_valid], np.sort(order[n - n_valid:])  # valid in file order, as the engine
    if max_train > 0:
        train = train[:max_train]
    if max_valid > 0:
        valid = valid[:max_valid]
    return train, valid


def shift_scale_rotate(img, rng, shift=0.08, scale=0.1, rotate=12.0, p=0.8):
    """albumentations ShiftScaleRotate: draw order angle, scale, dx, dy; about the pixel-grid centre."""
    if not (p >= 1 or rng.random() < p):
        return img
    angle = rng.uniform(-rotate, rotate)
    s = 1.0 + rng.uniform(-scale, scale)
    dx, dy = rng.uniform(-shift, shift), rng.uniform(-shift, shift)
    h, w = img.shape[:2]
    m = cv2.getRotationMatrix2D(((w - 1) * 0.5, (h - 1) * 0.5), angle, s)
    m[0, 2] += dx * w
    m[1, 2] += dy * h
    return cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)


IMAGE_SIZE = 40  # set from --image-size; the recipe resizes to 40x40


def resize_normalize(img, size=None):
    size = size or IMAGE_SIZE
    img = cv2.resize(img, (size, size), interpolation=cv2.INTER_LANCZOS4)
    return (img.astype(np.float32) - MEAN * 255.0) / (STD * 255.0)


class Digits(torch.utils.data.Dataset):
    def __init__(self, images, labels, indices, train, seed):
        self.images, self.labels, self.indices, self.train = images, labels, indices, train
        self.rng = random.Random(seed)  # reseeded per worker (worker_init)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        j = self.indices[i]
        img = self.images[j]
        if self.train:
            img = shift_scale_rotate(img, self.rng)
        x = torch.from_numpy(resize_normalize(img)).unsqueeze(0)  # ToTensorV2: HW -> 1HW
        y = int(self.labels[j]) if self.labels is not None else -1
        return x, y


def worker_init(worker_id):
    cv2.setNumThreads(1)  # as the engine: parallel over samples, not inside OpenCV
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = random.Random(info.seed)  # distinct per worker and per epoch


# ---------------------------------------------------------------------------------------------
# Model: timm convnext_atto (conv_mlp=True), in plain PyTorch, timm's module names and init.

class LayerNorm2d(nn.LayerNorm):
    """timm LayerNorm2d: LayerNorm over C of an NCHW tensor (permute to NHWC and back)."""

    def __init__(self, c):
        super().__init__(c, eps=1e-6)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        # bf16 autocast: 1.13's CPU layer_norm wants one dtype: statistics in fp32, result in x's dtype
        # (both casts are no-ops in fp32).
        y = F.layer_norm(x.to(self.weight.dtype), self.normalized_shape, self.weight, self.bias, self.eps)
        return y.to(x.dtype).permute(0, 3, 1, 2)


def drop_path(x, p, training):
    if p <= 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep).div_(keep)
    return x * mask


class ConvMlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1 = nn.Conv2d(c, 4 * c, 1)
        self.act = nn.GELU()  # exact (erf)
        self.fc2 = nn.Conv2d(4 * c, c, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c, dp):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((c,), 1e-6))
        self.conv_dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = LayerNorm2d(c)
        self.mlp = ConvMlp(c)
        self.dp = dp

    def forward(self, x):
        y = self.mlp(self.norm(self.conv_dw(x)))
        y = y * self.gamma.view(1, -1, 1, 1)
        return drop_path(y, self.dp, self.training) + x


class Stage(nn.Module):
    def __init__(self, cin, cout, depth, dps, downsample):
        super().__init__()
        self.downsample = nn.Sequential(LayerNorm2d(cin), nn.Conv2d(cin, cout, 2, stride=2)) if downsample else nn.Identity()
        self.blocks = nn.Sequential(*[Block(cout, dps[j]) for j in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class Head(nn.Module):
    def __init__(self, c, num_classes):
        super().__init__()
        self.norm = LayerNorm2d(c)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.norm(x.mean((2, 3), keepdim=True)).flatten(1)
        return self.fc(self.drop(x))


class ConvNeXt(nn.Module):
    def __init__(self, in_chans=1, num_classes=10, depths=(2, 2, 6, 2), dims=(40, 80, 160, 320), drop_path_rate=0.05):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], 4, stride=4), LayerNorm2d(dims[0]))
        rates = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        stages, k = [], 0
        for i in range(4):
            stages.append(Stage(dims[i - 1] if i else dims[0], dims[i], depths[i], rates[k:k + depths[i]], i > 0))
            k += depths[i]
        self.stages = nn.Sequential(*stages)
        self.head = Head(dims[3], num_classes)
        for m in self.modules():  # timm _init_weights
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02, a=-2.0, b=2.0)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def no_decay(name, p):  # timm / engine grouping: biases, norm weights, layer-scale gamma
    return p.ndim <= 1 or name.endswith(".bias") or name.endswith("gamma")


# ---------------------------------------------------------------------------------------------
# fastai fit_one_cycle: pos = step / total; two cosine phases split at pct_start.

def cos_anneal(start, end, pos):
    return start + (1 + math.cos(math.pi * (1 - pos))) * (end - start) / 2


def combined_cos(pct, start, middle, end, pos):
    if pos >= pct and pct < 1:
        return cos_anneal(middle, end, (pos - pct) / (1 - pct))
    return cos_anneal(start, middle, pos / pct)


def one_cycle(step, total, lr_max, pct=0.25, div=25.0, div_final=1e5, moms=(0.95, 0.85, 0.95)):
    pos = min(max(step, 0), total - 1) / total
    return (combined_cos(pct, lr_max / div, lr_max, lr_max / div_final, pos),
            combined_cos(pct, moms[0], moms[1], moms[2], pos))


# ---------------------------------------------------------------------------------------------

MIXED_BF16 = False  # set from --mixed-precision in main()


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=MIXED_BF16)


def evaluate(model, loader, channels_last):
    model.eval()
    correct, count, loss_sum, preds = 0, 0, 0.0, []
    with torch.no_grad():
        for x, y in loader:
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast():
                logits = model(x).float()
            p = logits.argmax(1)
            preds.append(p)
            if y[0] >= 0:
                loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
                correct += (p == y).sum().item()
                count += y.numel()
    return (correct / count if count else float("nan")), (loss_sum / count if count else float("nan")), torch.cat(preds)


def fit(model, opt, train_loader, valid_loader, n_epochs, lr_max, channels_last, label_smoothing, best_path):
    """fit_one_cycle with the engine's habits: zero grads in place, evaluate every epoch, keep the best
    epoch's weights and evaluate them at the end. Returns (epoch records, best epoch, seconds, accuracy)."""
    total = len(train_loader) * n_epochs
    step, best, best_epoch, epochs = 0, -1.0, 0, []
    t_start = time.perf_counter()
    for epoch in range(n_epochs):
        model.train()
        t0 = time.perf_counter()
        loss_sum, count = 0.0, 0
        for x, y in train_loader:
            lr, mom = one_cycle(step, total, lr_max)
            for grp in opt.param_groups:
                grp["lr"], grp["betas"] = lr, (mom, grp["betas"][1])
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast():  # Accelerate's mixed_precision="bf16": the forward under autocast
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=label_smoothing)
            opt.zero_grad(set_to_none=False)  # the engine zeroes in place
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.item() * x.shape[0]
            count += x.shape[0]
        train_s = time.perf_counter() - t0
        t_eval = time.perf_counter()
        acc, vloss, _ = evaluate(model, valid_loader, channels_last)
        eval_s = time.perf_counter() - t_eval  # the engine's eval_images_per_s: valid images / this
        if acc > best:
            best, best_epoch = acc, epoch + 1
            torch.save(model.state_dict(), best_path)
        e = {"epoch": epoch + 1, "train/loss": loss_sum / count, "valid/loss": vloss, "valid/accuracy": acc,
             "seconds": time.perf_counter() - t0, "train_seconds": train_s, "images_per_s": count / train_s,
             "eval_images_per_s": len(valid_loader.dataset) / eval_s}
        epochs.append(e)
        print(f"epoch {epoch + 1}/{n_epochs}  loss {e['train/loss']:.4f}  valid/loss {vloss:.4f}  "
              f"valid/accuracy {acc:.4f}  {e['seconds']:.1f}s  {e['images_per_s']:.1f} img/s", flush=True)
    fit_s = time.perf_counter() - t_start
    model.load_state_dict(torch.load(best_path))  # as the engine: keep the best epoch's weights
    final_acc, _, _ = evaluate(model, valid_loader, channels_last)
    return epochs, best_epoch, fit_s, final_acc


def peak_rss_mb(who):
    return resource.getrusage(who).ru_maxrss / 1024.0  # Linux: KiB


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="data/mnist/train.csv")
    ap.add_argument("--test", default="data/mnist/test.csv", help="unlabeled digits to predict ('' = skip)")
    ap.add_argument("--test-labels", default="data/mnist/test_labels.csv")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--max-train", type=int, default=0, help="first N training samples (0 = all)")
    ap.add_argument("--max-valid", type=int, default=0, help="first N validation samples (0 = all)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = all cores of this process)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--image-size", type=int, default=40, help="resize side (the recipe's data.*_transforms resize)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-channels-last", action="store_true", help="NCHW-contiguous weights and inputs")
    ap.add_argument("--mixed-precision", choices=["no", "bf16"], default="no",
                    help="bf16: forward passes under torch.autocast('cpu', bfloat16), as Accelerate does")
    ap.add_argument("--output-dir", default="build/bench-runs/peer")
    args = ap.parse_args()
    global MIXED_BF16
    MIXED_BF16 = args.mixed_precision == "bf16"
    global IMAGE_SIZE
    IMAGE_SIZE = args.image_size  # DataLoader workers fork after this, so they see it too

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    cv2.setNumThreads(1)
    channels_last = not args.no_channels_last
    os.makedirs(args.output_dir, exist_ok=True)

    images, labels = read_digit_csv(args.data)
    train_idx, valid_idx = split_indices(len(images), 0.2, args.seed, args.max_train, args.max_valid)

    model = ConvNeXt()
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != EXPECTED_PARAMS:
        sys.exit(f"peer convnext_atto has {n_params:,} parameters, timm has {EXPECTED_PARAMS:,}")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)

    named = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in named if not no_decay(n, p)], "weight_decay": 0.05},
         {"params": [p for n, p in named if no_decay(n, p)], "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.999), eps=1e-8)

    g = torch.Generator()
    g.manual_seed(args.seed)
    loader_kw = dict(num_workers=args.workers, worker_init_fn=worker_init if args.workers else None,
                     persistent_workers=args.workers > 0, prefetch_factor=2 if args.workers else None)
    if not args.workers:
        loader_kw.pop("prefetch_factor")
    train_loader = torch.utils.data.DataLoader(Digits(images, labels, train_idx, True, args.seed), batch_size=args.batch_size,
                                               shuffle=True, drop_last=True, generator=g, **loader_kw)
    valid_loader = torch.utils.data.DataLoader(Digits(images, labels, valid_idx, False, 0),
                                               batch_size=2 * args.batch_size, shuffle=False, **loader_kw)
    steps_per_epoch = len(train_loader)
    print(f"peer: torch {torch.__version__}, {threads} threads, {len(train_idx)} train / {len(valid_idx)} valid, "
          f"batch {args.batch_size}, {steps_per_epoch} steps/epoch, convnext_atto {n_params:,} parameters "
          f"(timm: {EXPECTED_PARAMS:,}), {'channels_last' if channels_last else 'contiguous'}", flush=True)

    epochs, best_epoch, fit_s, final_acc = fit(model, opt, train_loader, valid_loader, args.epochs, args.lr,
                                               channels_last, 0.1, os.path.join(args.output_dir, "best.pt"))
    result = {"peer": "pytorch-eager", "torch": torch.__version__, "threads": threads, "mixed_precision": args.mixed_precision, "params": n_params,
              "train": len(train_idx), "valid": len(valid_idx), "batch_size": args.batch_size,
              "epochs": args.epochs, "channels_last": channels_last, "workers": args.workers,
              "images_per_s": epochs[-1]["images_per_s"], "images_per_s_per_epoch": [e["images_per_s"] for e in epochs],
              "eval_images_per_s": epochs[-1]["eval_images_per_s"],
              "seconds_per_epoch": [e["seconds"] for e in epochs], "fit_seconds": fit_s,
              "valid_accuracy": final_acc, "best_epoch": best_epoch}
    if args.test:
        timgs, _ = read_digit_csv(args.test, labeled=False)
        test_loader = torch.utils.data.DataLoader(Digits(timgs, None, np.arange(len(timgs)), False, 0),
                                                  batch_size=2 * args.batch_size, num_workers=args.workers,
                                                  worker_init_fn=worker_init if args.workers else None)
        _, _, preds = evaluate(model, test_loader, channels_last)
        with open(os.path.join(args.output_dir, "submission.csv"), "w") as f:
            f.write("ImageId,Label\n" + "".join(f"{i + 1},{int(p)}\n" for i, p in enumerate(preds)))
        if args.test_labels and os.path.exists(args.test_labels):
            truth = np.loadtxt(args.test_labels, delimiter=",", skiprows=1, dtype=np.int64)[:, 1]
            result["test_accuracy"] = float((preds.numpy() == truth[: len(preds)]).mean())
    torch.save(model.state_dict(), os.path.join(args.output_dir, "model.pt"))
    # Main process only (ru_maxrss of RUSAGE_SELF); loader workers are separate processes:
    # RUSAGE_CHILDREN is the largest of them that has exited.
    result["peak_rss_mb"] = peak_rss_mb(resource.RUSAGE_SELF)
    del train_loader, valid_loader  # stop persistent workers so that they count in RUSAGE_CHILDREN
    result["peak_rss_workers_mb"] = peak_rss_mb(resource.RUSAGE_CHILDREN)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
