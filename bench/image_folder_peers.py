#!/usr/bin/env python3
"""Images/s that PyTorch's DataLoader(ImageFolder) or tf.data's image_dataset_from_directory
decode from an image folder, for bench/image_folders.sh (the same files and worker counts as
Mirror's loader-bench). Prints one line: "<framework> <workers> <images/s>".

  image_folder_peers.py torch|tf DIR WORKERS [--batch 256] [--seconds 10] [--size 28]

torch: torchvision.datasets.ImageFolder (PIL decoding, converted to greyscale, ToTensor) in a
DataLoader with WORKERS worker processes, shuffled, one intra-op thread. tf: grayscale
image_dataset_from_directory resized to SIZE (its resize runs even when the size is the same),
shuffled, with WORKERS threads in its private pool and WORKERS inter-/intra-op threads."""
import argparse
import time


def measure(batches, seconds):
    """Iterates `batches` (endless), skips the first 5, counts images over `seconds`."""
    it = iter(batches)
    for _ in range(5):
        next(it)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        count += len(next(it)[0])
    return count / (time.perf_counter() - start)


def torch_rate(folder, workers, batch, seconds, size):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    torch.set_num_threads(1)
    ds = datasets.ImageFolder(folder, transform=transforms.Compose(
        [transforms.Grayscale(), transforms.ToTensor()]))
    loader = DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, drop_last=True)

    def endless():
        while True:
            yield from loader
    return measure(endless(), seconds)


def tf_rate(folder, workers, batch, seconds, size):
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(workers)
    tf.config.threading.set_intra_op_parallelism_threads(workers)
    ds = tf.keras.utils.image_dataset_from_directory(
        folder, color_mode="grayscale", image_size=(size, size), batch_size=batch, shuffle=True,
        verbose=False)
    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    ds = ds.with_options(options).repeat().prefetch(2)
    return measure(ds.as_numpy_iterator(), seconds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("framework", choices=["torch", "tf"])
    p.add_argument("folder")
    p.add_argument("workers", type=int)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--size", type=int, default=28)
    a = p.parse_args()
    rate = (torch_rate if a.framework == "torch" else tf_rate)(a.folder, a.workers, a.batch,
                                                               a.seconds, a.size)
    print("%s %d %.0f" % (a.framework, a.workers, rate))


if __name__ == "__main__":
    main()
