"""strip_model_spec.py IN OUT: a copy of a Mirror checkpoint without its 'mirror.model' metadata
(as a C++ Task's checkpoint without a spec would be), with a valid mirror.checksum: CRC-32 over
the canonical header (sorted keys, compact, no checksum key) followed by the byte buffer
(docs/checkpoint.md)."""
import json
import struct
import sys
import zlib

data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, buffer = json.loads(data[8:8 + n]), data[8 + n:]
meta = header["__metadata__"]
del meta["mirror.model"], meta["mirror.checksum"]
canonical = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
meta["mirror.checksum"] = "crc32:%08x" % (zlib.crc32(canonical.encode() + buffer) & 0xFFFFFFFF)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * ((8 - (8 + len(text)) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + buffer)
