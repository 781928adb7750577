#!/usr/bin/env python3
"""Images/s of PyTorch's and TensorFlow's standard ImageNet training input on a folder of
photographs, for bench/photos.sh (the same files and worker counts as Mirror's loader-bench).
Prints one line: "<torch|tf> <workers> <images/s>".

  photo_peers.py DIR WORKERS [--framework torch|tf] [--batch 64] [--seconds 10] [--size 224]

torch: DataLoader(ImageFolder(DIR, RandomResizedCrop(SIZE) + RandomHorizontalFlip() + ToTensor()
+ Normalize(ImageNet's mean and std))), shuffled, WORKERS worker processes (0: in the main
process), one intra-op thread per process: torchvision's ImageNet reference recipe.

tf: tf.data as the TensorFlow model garden's ImageNet input does it: the file list shuffled,
sample_distorted_bounding_box (area 0.08-1, aspect 3/4-4/3, 10 attempts) then
decode_and_crop_jpeg (libjpeg-turbo decodes only the crop's rows and columns), resize to SIZE,
random left-right flip, normalisation, batched; map with WORKERS parallel calls on a private
thread pool of WORKERS threads, one intra-op thread."""
import argparse
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("workers", type=int)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--framework", choices=("torch", "tf"), default="torch")
    a = p.parse_args()
    if a.framework == "tf":
        return tf_main(a)
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


def tf_main(a):
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    classes = sorted(e.name for e in os.scandir(a.dir) if e.is_dir())
    paths, labels = [], []
    for label, name in enumerate(classes):
        for root, _, files in sorted(os.walk(os.path.join(a.dir, name))):
            for f in sorted(files):
                if f.lower().endswith((".jpg", ".jpeg")):
                    paths.append(os.path.join(root, f))
                    labels.append(label)
    mean = tf.constant([0.485, 0.456, 0.406]) * 255
    std = tf.constant([0.229, 0.224, 0.225]) * 255
    whole = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])

    def recipe(path, label):
        data = tf.io.read_file(path)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(data), bounding_boxes=whole, min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(begin)
        h, w, _ = tf.unstack(size)
        image = tf.io.decode_and_crop_jpeg(data, tf.stack([y, x, h, w]), channels=3)
        image = tf.image.resize(image, [a.size, a.size])
        image = tf.image.random_flip_left_right(image)
        return (image - mean) / std, label

    workers = max(1, a.workers)
    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    options.threading.max_intra_op_parallelism = 1
    ds = (tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths)).repeat()
          .map(recipe, num_parallel_calls=workers).batch(a.batch, drop_remainder=True)
          .prefetch(2).with_options(options))
    it = iter(ds)
    for _ in range(2):
        next(it)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        count += int(next(it)[0].shape[0])
    print(f"tf {workers} {count / (time.perf_counter() - start):.0f}")


if __name__ == "__main__":
    main()
