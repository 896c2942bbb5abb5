#!/usr/bin/env python3
# ACCELERATE_MIXED_PRECISION=fp16 python3 tools/gpu_seed_ddp_train.py --max-steps 300 --output-dir runs/seed
#
# The seed's ddp_train.py (../shared/seeds/, timm + Accelerate), as close to its text as the GPU
# machine allows, so that tools/gpu_check.sh can put the engine's img/s beside the seed's on the
# same data, model, batch and steps. Same as the seed: timm.create_model(convnext_small, in_chans=1,
# num_classes=10), Adam lr 5e-5, batch 256, num_workers=2, CrossEntropyLoss, the seed's train and
# valid transforms on float32 images (0..255), accelerator.prepare / accelerator.backward, a
# loss.item() per step, validation each epoch with gather_for_metrics, model.bin kept on
# improvement, test predictions at the end. `accelerate launch --mixed_precision=fp16` sets
# ACCELERATE_MIXED_PRECISION, which Accelerator() reads: the same here.
# What differs, and why:
#   - pretrained=False: the GPU machine has no network (the engine's recipe also starts from random init);
#   - data/mnist/train.csv has 8,000 rows, not Kaggle's 42,000: the first 80% train, the rest
#     validate (the engine recipe's split.valid_fraction = 0.2, shuffle = false), not [:40000];
#   - --max-steps stops after N optimizer steps, as the engine's train.max_steps;
#   - albumentations is not installed there: if it cannot be imported, the same transforms are done
#     below with OpenCV/NumPy, keeping albumentations' semantics (RandomBrightnessContrast on float32
#     clips to [0, 1], as albumentations does on the seed's 0..255 float images);
#   - tqdm refreshes at most every 10 s (a log file, not a terminal);
#   - the last line printed is one JSON object with the timings, for gpu_check.sh.
import argparse
import json
import os
import random
import time

import cv2
import numpy as np
import pandas as pd
import timm
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

try:
    import albumentations as A
    from albumentations.pytorch import ToTensorV2
except ImportError:  # the GPU machine's image: same transforms, albumentations' semantics
    A = None

MEAN, STD = 0.1310, 0.30854


class _Compose:
    def __init__(self, train, image_size):
        self.train, self.size = train, image_size

    def __call__(self, image):
        img = image
        if self.train:
            if random.random() < 0.5:  # HorizontalFlip(p=0.5)
                img = img[:, ::-1]
            if random.random() < 0.5:  # VerticalFlip(p=0.5)
                img = img[::-1, :]
            if random.random() < 0.2:  # RandomBrightnessContrast(p=0.2): limits 0.2, brightness_by_max
                alpha = 1.0 + random.uniform(-0.2, 0.2)
                beta = random.uniform(-0.2, 0.2)
                img = np.clip(img * alpha + beta * 1.0, 0.0, 1.0)  # float32: max value 1.0, clipped
        img = cv2.resize(np.ascontiguousarray(img, dtype=np.float32), (self.size, self.size),
                         interpolation=cv2.INTER_LANCZOS4)  # Resize(image_size, image_size, LANCZOS4)
        img = (img - MEAN * 255.0) / (STD * 255.0)  # Normalize(0.1310, 0.30854), max_pixel_value 255
        return {"image": torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32)).unsqueeze(0)}  # ToTensorV2


def get_transform(image_size, train=True):
    if A is None:
        return _Compose(train, image_size)
    if train:
        return A.Compose([
            A.HorizontalFlip(p=0.5),
            A.VerticalFlip(p=0.5),
            A.RandomBrightnessContrast(p=0.2),
            A.Resize(image_size, image_size, interpolation=cv2.INTER_LANCZOS4),
            A.Normalize(0.1310, 0.30854),
            ToTensorV2(),
        ])
    return A.Compose([
        A.Resize(image_size, image_size, interpolation=cv2.INTER_LANCZOS4),
        A.Normalize(0.1310, 0.30854),
        ToTensorV2(),
    ])


class MiniDataSet(Dataset):
    def __init__(self, images, labels=None, transform=None):
        self.images = images.astype("float32")
        self.labels = labels
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        ret = {}
        img = self.images[idx]
        if self.transform is not None:
            img = self.transform(image=img)["image"]
        ret["image"] = img
        if self.labels is not None:
            ret["label"] = self.labels[idx]
        return ret


class TimmModel(nn.Module):
    def __init__(self, backbone, num_class, pretrained=False):
        super().__init__()
        self.model = timm.create_model(backbone, pretrained=pretrained, in_chans=1, num_classes=num_class)

    def forward(self, image):
        return self.model(image)


def train_fn(args, model, optimizer, dataloader):
    model.train()
    train_loss = []
    loss_fn = torch.nn.CrossEntropyLoss()
    for batch in tqdm(dataloader, disable=not args.accelerator.is_main_process, mininterval=10):
        if args.steps_done >= args.max_steps > 0:
            break
        logits = model(batch["image"])
        optimizer.zero_grad()
        loss = loss_fn(logits, batch["label"])
        args.accelerator.backward(loss)
        optimizer.step()
        train_loss.append(loss.item())
        args.steps_done += 1
    return np.mean(train_loss), len(train_loss)


@torch.no_grad()
def predict_fn(args, model, dataloader):
    model.eval()
    predictions = []
    for step, batch in enumerate(dataloader):
        output = model(batch["image"])
        prediction = torch.argmax(output, 1)
        prediction = args.accelerator.gather_for_metrics(prediction)
        predictions.append(prediction.cpu().numpy())
    return np.concatenate(predictions, axis=0)


def fit_model(args, model, optimizer, train_dl, val_dl):
    best_score = 0.0
    epochs = []
    for ep in range(args.ep):
        if args.steps_done >= args.max_steps > 0:
            break
        t0 = time.perf_counter()
        train_loss, steps = train_fn(args, model, optimizer, train_dl)
        train_s = time.perf_counter() - t0  # loss.item() each step: the GPU work is done here
        val_pred = predict_fn(args, model, val_dl)
        val_acc = np.mean(val_pred == val_dl.dataset.labels)
        if args.accelerator.is_main_process:
            print(f"Epoch {ep+1}, train loss {train_loss:.4f}, val acc {val_acc:.4f}, "
                  f"{steps * args.bs / train_s:.1f} img/s", flush=True)
        epochs.append({"epoch": ep + 1, "steps": steps, "train_seconds": train_s, "train_loss": float(train_loss),
                       "valid_accuracy": float(val_acc), "images_per_s": steps * args.bs / train_s})
        if val_acc > best_score:
            best_score = val_acc
            torch.save(model.state_dict(), os.path.join(args.output_dir, "model.bin"))
    model.load_state_dict(torch.load(os.path.join(args.output_dir, "model.bin")))
    return model, epochs


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--ep", default=5, type=int)
    parser.add_argument("--lr", default=0.00005, type=float)
    parser.add_argument("--bs", default=256, type=int)
    parser.add_argument("--device", default=0, type=int)
    parser.add_argument("--model", default="convnext_small")
    parser.add_argument("--image_size", default=56, type=int)
    parser.add_argument("--data", default="data/mnist")
    parser.add_argument("--max-steps", dest="max_steps", default=0, type=int, help="stop after N steps (0 = --ep epochs)")
    parser.add_argument("--output-dir", dest="output_dir", default="runs/seed")
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    if args.max_steps > 0:
        args.ep = 10**6  # as the engine's run: epochs until max_steps
    args.steps_done = 0
    t_start = time.perf_counter()

    train = pd.read_csv(os.path.join(args.data, "train.csv"))
    train_images = train.iloc[:, 1:].values.reshape(-1, 28, 28)
    train_labels = train.iloc[:, 0].values
    test = pd.read_csv(os.path.join(args.data, "test.csv"))
    test_images = test.values.reshape(-1, 28, 28)
    n_train = len(train_images) - int(len(train_images) * 0.2 + 0.5)  # engine: split.valid_fraction = 0.2

    train_transform = get_transform(args.image_size, True)
    valid_transform = get_transform(args.image_size, False)
    train_ds = MiniDataSet(train_images[:n_train], train_labels[:n_train], train_transform)
    val_ds = MiniDataSet(train_images[n_train:], train_labels[n_train:], valid_transform)
    test_ds = MiniDataSet(test_images, transform=valid_transform)

    train_dl = DataLoader(train_ds, batch_size=args.bs, num_workers=2, shuffle=True, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=args.bs * 2, num_workers=2, shuffle=False, drop_last=False)
    test_dl = DataLoader(test_ds, batch_size=args.bs * 2, num_workers=2, shuffle=False, drop_last=False)

    model = TimmModel(args.model, 10, pretrained=False)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = Adam(model.parameters(), lr=args.lr)
    accelerator = Accelerator()
    model, optimizer, train_dl, val_dl, test_dl = accelerator.prepare(model, optimizer, train_dl, val_dl, test_dl)
    args.accelerator = accelerator
    print(f"seed: torch {torch.__version__}, timm {timm.__version__}, {args.model} {n_params:,} parameters, "
          f"mixed precision {accelerator.mixed_precision}, {len(train_ds)} train / {len(val_ds)} valid, "
          f"batch {args.bs}, albumentations {'yes' if A is not None else 'no (OpenCV/NumPy equivalent)'}", flush=True)

    t_fit = time.perf_counter()
    model, epochs = fit_model(args, model, optimizer, train_dl, val_dl)
    fit_s = time.perf_counter() - t_fit
    test_pred = predict_fn(args, model, test_dl)
    if accelerator.is_local_main_process:
        pd.DataFrame({"ImageId": np.arange(1, len(test_pred) + 1), "Label": test_pred}).to_csv(
            os.path.join(args.output_dir, "submission.csv"), index=False)
    # Steady state: epochs after the first (cuDNN autotuning, allocator warm-up, worker start).
    steady = epochs[1:] if len(epochs) > 1 else epochs
    images = sum(e["steps"] * args.bs for e in steady)
    seconds = sum(e["train_seconds"] for e in steady)
    print(json.dumps({"peer": "seed ddp_train.py", "torch": torch.__version__, "timm": timm.__version__,
                      "mixed_precision": accelerator.mixed_precision, "params": n_params, "steps": args.steps_done,
                      "batch_size": args.bs, "images_per_s": images / seconds if seconds else None,
                      "images_per_s_per_epoch": [e["images_per_s"] for e in epochs],
                      "train_loss": epochs[-1]["train_loss"] if epochs else None,
                      "valid_accuracy": max(e["valid_accuracy"] for e in epochs) if epochs else None,
                      "fit_seconds": fit_s, "wall_seconds": time.perf_counter() - t_start}), flush=True)
