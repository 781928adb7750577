#!/usr/bin/env python3
"""The code blocks of docs/*.md marked `<!-- example: PATH -->` (the line before the opening
fence), which are repository files printed whole.

  doc_examples.py check ROOT           every marked block equals ROOT/PATH; exit 1 naming each
                                       block that differs or whose file is missing
  doc_examples.py extract DOC OUTDIR   writes DOC's marked blocks to OUTDIR/<file name>
"""
import pathlib
import re
import sys

MARK = re.compile(r"^<!-- example: (\S+) -->$")


def blocks(doc):
    """(path, text) of each marked block in the Markdown file `doc`."""
    lines = doc.read_text().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if m and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            end = lines.index("```", i + 2)  # ValueError: an unclosed block
            out.append((m.group(1), "\n".join(lines[i + 2:end]) + "\n"))
            i = end
        elif m:
            raise SystemExit(f"{doc}:{i + 1}: an example mark not followed by a code block")
        i += 1
    return out


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        root = pathlib.Path(sys.argv[2])
        bad = 0
        count = 0
        for doc in sorted((root / "docs").glob("*.md")):
            for path, text in blocks(doc):
                count += 1
                f = root / path
                if not f.is_file():
                    print(f"FAIL {doc.name}: the example names {path}, which does not exist")
                    bad += 1
                elif f.read_text() != text:
                    print(f"FAIL {doc.name}: the block marked {path} differs from the file; "
                          f"copy the file into the page")
                    bad += 1
        if count == 0:
            raise SystemExit("FAIL no marked example in docs/*.md")
        print(f"{count} marked example(s) checked, {bad} differ")
        return 1 if bad else 0
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        out = pathlib.Path(sys.argv[3])
        out.mkdir(parents=True, exist_ok=True)
        found = blocks(pathlib.Path(sys.argv[2]))
        if not found:
            raise SystemExit(f"no marked example in {sys.argv[2]}")
        for path, text in found:
            (out / pathlib.Path(path).name).write_text(text)
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
