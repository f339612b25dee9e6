#!/usr/bin/env python3
"""Writes the example knowledge base (README, "Bring your own knowledge base").

Usage:
    python3 corpora/kb-example/generate.py

Writes, next to this script, `kb.jsonl` (rows of "id" or "qid", "text", "image_path") and
three tiny PNGs under `images/`, with the standard library only; reruns write the same bytes.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def png(width: int, height: int, pixel) -> bytes:
    """An 8-bit RGB PNG whose pixel (x, y) is pixel(x, y)."""
    raw = b"".join(
        b"\x00" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


IMAGES = {
    # a red disc on white
    "images/volcano.png": (16, 16, lambda x, y: (200, 40, 20) if (x - 8) ** 2 + (y - 8) ** 2 < 30 else (255, 255, 255)),
    # green vertical stripes
    "images/fern.png": (16, 16, lambda x, y: (30, 160, 60) if x % 4 < 2 else (230, 250, 230)),
    # a blue gradient
    "images/wave.png": (16, 16, lambda x, y: (20, 60 + 8 * y, 200)),
}

ROWS = [
    {"id": "volcano", "text": "Lava flows from an erupting volcano; the basalt cools into black rock.", "image_path": "images/volcano.png"},
    {"id": "fern", "text": "Fern fronds unroll from tight coils called fiddleheads.", "image_path": "images/fern.png"},
    {"qid": 3, "text": "Ocean waves carry energy, not water, across the sea.", "image_path": "images/wave.png"},
    {"id": "lava-caption", "text": "A second caption of the volcano picture: magma that reaches the surface is lava.", "image_path": "images/volcano.png"},
    {"id": "tides", "text": "Tides rise and fall twice a day under the pull of the Moon.", "image_path": None},
    {"id": "wave-photo", "image_path": "images/wave.png"},
]


def main() -> None:
    for rel, (w, h, pixel) in IMAGES.items():
        path = HERE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png(w, h, pixel))
    with open(HERE / "kb.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for row in ROWS:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(ROWS)} rows and {len(IMAGES)} images to {HERE}")


if __name__ == "__main__":
    main()
