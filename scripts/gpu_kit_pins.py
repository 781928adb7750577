#!/usr/bin/env python3
"""The cuDNN and NCCL versions the GPU kit builds against: exactly the ones torch pins.

The GPU machine loads cuDNN and NCCL from the pip wheels its PyTorch installed, so the kit
(scripts/gpu_kit.sh) compiles against the same wheels: torch's own metadata (Requires-Dist)
names them, pip downloads them once into a cache outside the repository, and only their
headers and the libraries the linker needs are unpacked. See docs/gpu-kit.md.

  gpu_kit_pins.py resolve --torch 2.11.0 [--metadata FILE] [--cache DIR]
      prints  torch=2.11.0 / cudnn=nvidia-cudnn-cu13==9.19.0.56 / nccl=nvidia-nccl-cu13==2.28.9
      FILE: a wheel METADATA file or a `pip install --report` JSON (no network then);
      otherwise torch's metadata comes from PyPI through pip (PEP 658 metadata: kilobytes,
      the wheel itself is not downloaded), cached in DIR.
  gpu_kit_pins.py fetch --cache DIR PIN...
      PIN as printed by resolve (nvidia-cudnn-cu13==9.19.0.56); downloads each wheel once
      (pip download --no-deps) and unpacks its include/ and lib/ into
      DIR/<name>-<version>/; prints  name=<that folder>  per pin.

  gpu_kit_pins.py compare --cudnn-include DIR --nccl-include DIR PIN...
  gpu_kit_pins.py compare --doctor-json FILE PIN...
      the versions the headers in DIR say (cudnn_version.h, nccl.h), or the ones the built
      binary was compiled with (`mirror-doctor --json`: cudnn_compiled, nccl_compiled -- the
      headers the compiler actually saw), against the pins; prints "match (...)" and exits 0,
      or "DIFFER (...)" and exits 3.

Exit status: 0 done; 1 a clear error on stderr (no network, no such version, metadata
without the pins, a wheel without headers); 2 usage.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import zipfile

PACKAGES = {"cudnn": "nvidia-cudnn-cu13", "nccl": "nvidia-nccl-cu13"}
# What the build needs from each wheel: headers, and the library the linker resolves.
WHEEL_FILES = {
    "nvidia-cudnn-cu13": ("nvidia/cudnn/", ["include/", "lib/libcudnn.so.9"]),
    "nvidia-nccl-cu13": ("nvidia/nccl/", ["include/", "lib/libnccl.so.2"]),
}


def fail(message):
    print(f"gpu_kit_pins: {message}", file=sys.stderr)
    sys.exit(1)


def requires_from(path):
    """Requires-Dist entries of a METADATA file or of a pip --report JSON."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        fail(f"cannot read the metadata file {path}: {e.strerror}")
    if text.lstrip().startswith("{"):
        try:
            report = json.loads(text)
            installs = report["install"]
        except (ValueError, KeyError, TypeError):
            fail(f"{path} is JSON but not a pip --report (expected an 'install' list)")
        for item in installs:
            meta = item.get("metadata", {})
            if meta.get("name", "").lower() == "torch":
                return meta.get("version", ""), meta.get("requires_dist", [])
        fail(f"{path}: the pip report has no torch entry")
    version = ""
    requires = []
    for line in text.splitlines():
        if line.startswith("Version:") and not version:
            version = line.split(":", 1)[1].strip()
        elif line.startswith("Requires-Dist:"):
            requires.append(line.split(":", 1)[1].strip())
    return version, requires


def torch_metadata(torch, cache):
    """pip's report of torch==VERSION (metadata only), cached in CACHE."""
    os.makedirs(cache, exist_ok=True)
    report = os.path.join(cache, f"torch-{torch}.report.json")
    if os.path.exists(report):
        return report
    tmp = report + ".part"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
           "--quiet", "--report", tmp, f"torch=={torch}"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0 or not os.path.exists(tmp):
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        fail(f"could not read torch {torch}'s metadata from PyPI through pip ({last}); "
             "give torch's METADATA as a file (gpu_kit.sh --pins-from FILE), or pack without "
             "pinning (--no-pin)")
    os.replace(tmp, report)
    return report


def pins_of(requires, torch_version, source):
    """{'cudnn': 'nvidia-cudnn-cu13==9.19.0.56', ...} from Requires-Dist entries."""
    pins = {}
    for entry in requires:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*==\s*([0-9][0-9A-Za-z.\-+]*)", entry)
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        for key, package in PACKAGES.items():
            if name == package:
                pins[key] = f"{package}=={m.group(2)}"
    missing = [PACKAGES[k] for k in PACKAGES if k not in pins]
    if missing:
        fail(f"torch {torch_version or '?'}'s metadata ({source}) pins no exact version of "
             f"{', '.join(missing)}; it needs Requires-Dist entries like "
             f"'{PACKAGES['cudnn']}==9.19.0.56' (is this a CUDA 13 torch?)")
    return pins


def resolve(args):
    source = args.metadata or torch_metadata(args.torch, args.cache)
    version, requires = requires_from(source)
    if args.metadata and version and version != args.torch:
        fail(f"{args.metadata} describes torch {version}, not the requested {args.torch}")
    pins = pins_of(requires, version or args.torch, source)
    print(f"torch={version or args.torch}")
    for key in PACKAGES:
        print(f"{key}={pins[key]}")


def fetch(args):
    wheels = os.path.join(args.cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    for pin in args.pins:
        m = re.fullmatch(r"([a-z0-9\-]+)==([0-9][0-9A-Za-z.\-+]*)", pin)
        if not m or m.group(1) not in WHEEL_FILES:
            fail(f"'{pin}' is not a pin of {' or '.join(WHEEL_FILES)} (name==version)")
        name, version = m.groups()
        dest = os.path.join(args.cache, f"{name}-{version}")
        if not os.path.exists(os.path.join(dest, ".complete")):
            wheel = find_wheel(wheels, name, version)
            if wheel is None:
                cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                       "--quiet", "-d", wheels, pin]
                print(f"gpu_kit_pins: downloading {pin} (once; cached in {wheels})", file=sys.stderr)
                run = subprocess.run(cmd, capture_output=True, text=True)
                wheel = find_wheel(wheels, name, version)
                if run.returncode != 0 or wheel is None:
                    last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                    fail(f"could not download {pin} ({last})")
            unpack(wheel, name, dest)
        print(f"{name}={dest}")


def find_wheel(folder, name, version):
    prefix = f"{name.replace('-', '_')}-{version}-"
    for f in sorted(os.listdir(folder)):
        if f.startswith(prefix) and f.endswith(".whl"):
            return os.path.join(folder, f)
    return None


def unpack(wheel, name, dest):
    root, wanted = WHEEL_FILES[name]
    os.makedirs(dest, exist_ok=True)
    found = set()
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            if not member.startswith(root) or member.endswith("/"):
                continue
            rel = member[len(root):]
            for w in wanted:
                if rel == w or (w.endswith("/") and rel.startswith(w)):
                    found.add(w)
                    target = os.path.join(dest, rel)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with z.open(member) as src, open(target, "wb") as out:
                        out.write(src.read())
    missing = [w for w in wanted if w not in found]
    if missing:
        fail(f"{os.path.basename(wheel)} lacks {', '.join(root + w for w in missing)}")
    open(os.path.join(dest, ".complete"), "w").close()


def header_version(path, names):
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    parts = []
    for n in names:
        m = re.search(rf"^#define {n}\s+(\d+)", text, re.M)
        if not m:
            fail(f"{path} does not define {n}")
        parts.append(m.group(1))
    return ".".join(parts)


def doctor_versions(path):
    """cuDNN and NCCL as the binary was compiled: mirror-doctor --json's version codes."""
    try:
        report = json.load(open(path, encoding="utf-8"))
        gpu = report["ranks"][0]["gpu"]
        codes = {"nvidia-cudnn-cu13": int(gpu["cudnn_compiled"]),
                 "nvidia-nccl-cu13": int(gpu["nccl_compiled"])}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        fail(f"cannot read the compiled versions from {path}: {e}")
    for name, code in codes.items():
        if code <= 0:
            fail(f"{path}: the binary reports no {name} version (built without CUDA?)")
    # cuDNN 9: major*10000 + minor*100 + patch; NCCL 2.9+: the same encoding.
    return {n: f"{c // 10000}.{c // 100 % 100}.{c % 100}" for n, c in codes.items()}


def compare(args):
    if args.doctor_json:
        compiled = doctor_versions(args.doctor_json)
        source = "compiled"
    else:
        if not (args.cudnn_include and args.nccl_include):
            fail("compare needs --doctor-json FILE, or --cudnn-include and --nccl-include")
        compiled = {
            "nvidia-cudnn-cu13": header_version(os.path.join(args.cudnn_include, "cudnn_version.h"),
                                                ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"]),
            "nvidia-nccl-cu13": header_version(os.path.join(args.nccl_include, "nccl.h"),
                                               ["NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"]),
        }
        source = "headers"
    same, differ = [], []
    for pin in args.pins:
        name, _, version = pin.partition("==")
        if name not in compiled:
            fail(f"'{pin}' is not a pin of {' or '.join(compiled)}")
        # A wheel's version has a 4th (build) component: 9.19.0.56 is cuDNN 9.19.0.
        text = f"{name} {version} vs {source} {compiled[name]}"
        (same if version.split(".")[:3] == compiled[name].split(".") else differ).append(text)
    if differ:
        print(f"DIFFER ({'; '.join(differ)})")
        sys.exit(3)
    print(f"match ({'; '.join(same)})")


def main():
    default_cache = os.environ.get("MIRROR_GPUKIT_CACHE",
                                   os.path.join(os.path.expanduser("~"), ".cache", "mirror-gpukit"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve")
    r.add_argument("--torch", default="2.11.0")
    r.add_argument("--metadata")
    r.add_argument("--cache", default=default_cache)
    f = sub.add_parser("fetch")
    f.add_argument("--cache", default=default_cache)
    f.add_argument("pins", nargs="+")
    c = sub.add_parser("compare")
    c.add_argument("--cudnn-include")
    c.add_argument("--nccl-include")
    c.add_argument("--doctor-json")
    c.add_argument("pins", nargs="+")
    args = parser.parse_args()
    {"resolve": resolve, "fetch": fetch, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
