#!/usr/bin/env python3
"""Images/s of PyTorch's standard ImageNet training input on a folder of photographs, for
bench/photos.sh (the same files and worker counts as Mirror's loader-bench). Prints one line:
"torch <workers> <images/s>".

  photo_peers.py DIR WORKERS [--batch 64] [--seconds 10] [--size 224]

DataLoader(ImageFolder(DIR, RandomResizedCrop(SIZE) + RandomHorizontalFlip() + ToTensor() +
Normalize(ImageNet's mean and std))), shuffled, WORKERS worker processes (0: in the main
process), one intra-op thread per process: torchvision's ImageNet reference recipe."""
import argparse
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("workers", type=int)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--size", type=int, default=224)
    a = p.parse_args()
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    recipe = transforms.Compose([
        transforms.RandomResizedCrop(a.size), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    loader = DataLoader(datasets.ImageFolder(a.dir, transform=recipe), batch_size=a.batch,
                        shuffle=True, num_workers=a.workers, persistent_workers=a.workers > 0,
                        drop_last=True)

    def endless():
        while True:
            yield from loader
    it = endless()
    for _ in range(2):  # workers started, first batches out
        next(it)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        count += len(next(it)[0])
    print(f"torch {a.workers} {count / (time.perf_counter() - start):.0f}")


if __name__ == "__main__":
    main()
