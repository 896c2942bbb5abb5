#!/usr/bin/python3
# /usr/bin/python3 bench/peer_digits_resnet34.py --epochs 1 --max-train 1600
#
# The PyTorch-eager peer of recipes/digits_png_resnet34_pretrain.toml, for `bench/run.sh resnet`.
# Debian's python3-torch, python3-opencv and python3-numpy only (no timm): timm's resnet34 is written
# out below in plain PyTorch (BasicBlock, 7x7 stem, timm's module names and init), and its parameter
# count is checked against timm's (21,283,530 for in_chans 1, 10 classes) before anything runs.
#
# Same work as `engine run recipes/digits_png_resnet34_pretrain.toml`: the same PNG files (digits
# 0-4, the label in the file name, 10 outputs), a 20% validation split of the same sizes (not the
# same files: the engine's shuffle uses its own RNG), ShiftScaleRotate + Normalize on the training
# images, AdamW (lr 2e-3, weight decay 0.01 except biases and norm weights), fit_one_cycle, plain
# cross-entropy, batch 64, evaluation batch 128, channels-last (the engine's resnet default), best
# checkpoint and the final evaluation of the best weights. The data pipeline, the one-cycle schedule,
# the evaluation loop and the JSON line bench/run.sh reads are bench/peer_mnist_convnext.py's.
import argparse
import glob
import json
import os
import re
import sys
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_mnist_convnext as base  # noqa: E402

EXPECTED_PARAMS = 21_283_530  # timm resnet34, in_chans 1, 10 classes (the engine prints the same)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet34(nn.Module):
    def __init__(self, in_chans=1, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        inplanes, layers = 64, []
        for i, depth in enumerate((3, 4, 6, 3)):
            planes, stride = 64 << i, 1 if i == 0 else 2
            blocks = []
            for j in range(depth):
                ds = None
                if j == 0 and (stride != 1 or inplanes != planes):
                    ds = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
                blocks.append(BasicBlock(inplanes, planes, stride if j == 0 else 1, ds))
                inplanes = planes
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():  # timm's init: kaiming fan_out for convs, zero_init_last
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean((2, 3)))


def read_pngs(folder, pattern):
    files = sorted(glob.glob(os.path.join(folder, pattern)))
    if not files:
        sys.exit(f"no {pattern} in {folder}: run the engine once (datasets/ makes them)")
    images = np.stack([cv2.imread(f, cv2.IMREAD_GRAYSCALE) for f in files])
    labels = np.array([int(re.match(r"^(\d)_", os.path.basename(f)).group(1)) for f in files], dtype=np.int64)
    return images, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", default="data/digits_png/images")
    ap.add_argument("--files", default="[0-4]_*.png")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-train", type=int, default=0, help="first N training samples (0 = all)")
    ap.add_argument("--max-valid", type=int, default=0, help="first N validation samples (0 = all)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0 = all cores of this process)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--mixed-precision", choices=["no", "bf16"], default="no")
    ap.add_argument("--output-dir", default="build/bench-runs/peer")
    ap.add_argument("--image-size", type=int, default=0, help="ignored: the recipe does not resize (run.sh passes it)")
    args = ap.parse_args()
    base.MIXED_BF16 = args.mixed_precision == "bf16"
    base.IMAGE_SIZE = 28  # the PNGs' own size: resize_normalize's resize is then the identity

    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    cv2.setNumThreads(1)
    os.makedirs(args.output_dir, exist_ok=True)

    images, labels = read_pngs(args.images, args.files)
    train_idx, valid_idx = base.split_indices(len(images), 0.2, args.seed, args.max_train, args.max_valid)
    model = ResNet34()
    n_params = sum(p.numel() for p in model.parameters())
    if n_params != EXPECTED_PARAMS:
        sys.exit(f"peer resnet34 has {n_params:,} parameters, timm has {EXPECTED_PARAMS:,}")
    model = model.to(memory_format=torch.channels_last)
    named = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in named if not base.no_decay(n, p)], "weight_decay": 0.01},
         {"params": [p for n, p in named if base.no_decay(n, p)], "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.999), eps=1e-8)

    g = torch.Generator()
    g.manual_seed(args.seed)
    kw = dict(num_workers=args.workers, worker_init_fn=base.worker_init if args.workers else None,
              persistent_workers=args.workers > 0)
    train_loader = torch.utils.data.DataLoader(base.Digits(images, labels, train_idx, True, args.seed),
                                               batch_size=args.batch_size, shuffle=True, drop_last=True,
                                               generator=g, **kw)
    valid_loader = torch.utils.data.DataLoader(base.Digits(images, labels, valid_idx, False, 0),
                                               batch_size=2 * args.batch_size, shuffle=False, **kw)
    print(f"peer: torch {torch.__version__}, {threads} threads, {len(train_idx)} train / {len(valid_idx)} valid, "
          f"batch {args.batch_size}, {len(train_loader)} steps/epoch, resnet34 {n_params:,} parameters", flush=True)

    epochs, best_epoch, fit_s, final_acc = base.fit(model, opt, train_loader, valid_loader, args.epochs, args.lr,
                                                    True, 0.0, os.path.join(args.output_dir, "best.pt"))
    result = {"peer": "pytorch-eager", "torch": torch.__version__, "threads": threads, "params": n_params,
              "mixed_precision": args.mixed_precision, "train": len(train_idx), "valid": len(valid_idx),
              "batch_size": args.batch_size, "epochs": args.epochs, "workers": args.workers,
              "images_per_s": epochs[-1]["images_per_s"], "images_per_s_per_epoch": [e["images_per_s"] for e in epochs],
              "eval_images_per_s": epochs[-1]["eval_images_per_s"], "fit_seconds": fit_s,
              "valid_accuracy": final_acc, "best_epoch": best_epoch,
              "peak_rss_mb": base.peak_rss_mb(base.resource.RUSAGE_SELF)}
    del train_loader, valid_loader
    result["peak_rss_workers_mb"] = base.peak_rss_mb(base.resource.RUSAGE_CHILDREN)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
