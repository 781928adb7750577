#!/usr/bin/env python3
"""Converts an image folder (one subfolder per class, as --train-images reads it) into tar shards
in WebDataset's layout, which --train-images, --test-images and loader-bench --images also read:

  OUT/PREFIX-000000.tar, OUT/PREFIX-000001.tar, ...   each holding, per image,
    KEY.jpg (or .jpeg / .png: the file's bytes, unchanged)  and  KEY.cls (its class)

KEY is the image's path below its class folder without the extension, under the class name
(`cat/0001`; dots in it become '_', since WebDataset's extension starts at the first dot).
The order is the folder's: classes sorted, then the images of each class sorted by path, so the
shards are the same dataset as the folder, sample for sample, and the same bytes every time
(member times, owners and modes are fixed). Labels are the class's position among the sorted
classes (0, 1, ...) by default, or the class folder's name with --class-names.

  scripts/images_to_shards.py FOLDER OUT [--shard-size 1000] [--prefix train] [--class-names]

Only the Python standard library is needed.
"""
import argparse
import io
import os
import sys
import tarfile

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def images_of(folder):
    """(class names, [(path, class index)]) in the order load_image_folder reads them."""
    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    if not classes:
        sys.exit(f"images_to_shards: {folder} holds no class folder (one subfolder per class)")
    out = []
    for k, name in enumerate(classes):
        files = []
        for root, dirs, names in os.walk(os.path.join(folder, name)):
            for n in names:
                if not n.startswith(".") and os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS:
                    files.append(os.path.join(root, n))
        if not files:
            sys.exit(f"images_to_shards: {folder}/{name} is an empty class folder")
        # Byte order of the whole path, as the C++ reader sorts (std::sort of std::string).
        files.sort(key=lambda p: p.encode("utf-8", "surrogateescape"))
        out.extend((f, k) for f in files)
    return classes, out


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("folder", help="image folder: FOLDER/<class>/.../<image>.jpg|.jpeg|.png")
    p.add_argument("out", help="where the shards go (created)")
    p.add_argument("--shard-size", type=int, default=1000, help="images per shard (default 1000)")
    p.add_argument("--prefix", default="shard", help="shard file names: PREFIX-NNNNNN.tar")
    p.add_argument("--class-names", action="store_true",
                   help="label with the class folder's name instead of its index")
    a = p.parse_args()
    if a.shard_size < 1:
        p.error("--shard-size must be at least 1")
    classes, images = images_of(a.folder)
    os.makedirs(a.out, exist_ok=True)
    shards, keys = 0, set()
    for start in range(0, len(images), a.shard_size):
        path = os.path.join(a.out, f"{a.prefix}-{shards:06d}.tar")
        # GNU format: long names as 'L' members, no pax records with times in them.
        with tarfile.open(path + ".part", "w", format=tarfile.GNU_FORMAT) as tar:
            for file, k in images[start:start + a.shard_size]:
                class_dir = os.path.join(a.folder, classes[k])
                rel, ext = os.path.splitext(os.path.relpath(file, class_dir))
                key = classes[k] + "/" + rel.replace(os.sep, "/").replace(".", "_")
                if key in keys:
                    sys.exit(f"images_to_shards: {file} gets the key {key} of another image "
                             "(names differing only in '.' and '_'); rename one")
                keys.add(key)
                with open(file, "rb") as f:
                    add_member(tar, key + ext.lower(), f.read())
                label = classes[k] if a.class_names else str(k)
                add_member(tar, key + ".cls", label.encode("utf-8"))
        os.replace(path + ".part", path)
        shards += 1
    print(f"wrote {len(images)} images of {len(classes)} classes into {shards} shard(s) in {a.out} "
          f"(labels: {'class names' if a.class_names else 'class indices'})")


if __name__ == "__main__":
    main()
