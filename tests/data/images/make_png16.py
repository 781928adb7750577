#!/usr/bin/env python3
"""Writes the 16-bit PNG fixtures of tests/data_image_test.cpp (stdlib only): rgb16.png (colour
type 2) and gray16.png (colour type 0), 5x3, whose high bytes the test expects."""
import struct
import sys
import zlib


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png16(width, height, color_type, pixels):
    raw = b"".join(b"\0" + b"".join(struct.pack(">" + "H" * len(p), *p) for p in row)
                   for row in pixels)
    header = struct.pack(">IIBBBBB", width, height, 16, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def main(folder):
    w, h = 5, 3
    rgb = [[((x * 13000 + y * 700) % 65536, (x * 300 + y * 21000) % 65536, 65535 - x * 9000)
            for x in range(w)] for y in range(h)]
    gray = [[((x * 16000 + y * 5000 + 255) % 65536,) for x in range(w)] for y in range(h)]
    with open(f"{folder}/rgb16.png", "wb") as f:
        f.write(png16(w, h, 2, rgb))
    with open(f"{folder}/gray16.png", "wb") as f:
        f.write(png16(w, h, 0, gray))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
