"""Words of a scanned page, read by Tesseract (Debian's `tesseract-ocr`, offline, its English
model installed with it), for a PDF page without a text layer when the ingest or server
asks for OCR (off by default: a page costs seconds, BENCHMARKS.md "Scans").

The page is rendered by PDFium in grey at OCR_DPI and handed to `tesseract` on stdin as a PGM
image (no image library needed); its TSV output gives each word's box in pixels, which become
points in the page's top-down space, so the words take the same reading-order, heading and
table rules as a text layer's (indexes/extract/pdf_text.py). Tesseract runs as a child of the
extraction worker, under the worker's limits and with one thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

OCR_DPI = 300  # Tesseract reads best at about 300 dpi
MIN_CONFIDENCE = 30  # words Tesseract itself doubts more than this are noise (specks, rules)
ENGINE = "tesseract"


@dataclass(frozen=True)
class OcrWord:
    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    size: float  # its font size, estimated from its box and letters (`font_size`): what ranks headings on a scan


class OcrUnavailable(Exception):
    """No OCR engine on this machine."""


def available() -> bool:
    return shutil.which(ENGINE) is not None


def pgm(pixels: bytes, width: int, height: int) -> bytes:
    """An 8-bit grey image as a binary PGM file."""
    return b"P5\n%d %d\n255\n" % (width, height) + pixels


def read_words(image: bytes, scale: float, timeout_s: float) -> list[OcrWord]:
    """The words Tesseract reads in a PGM `image` rendered at `scale` pixels per point, with
    their boxes in points. Raises OcrUnavailable when Tesseract is not installed."""
    engine = shutil.which(ENGINE)
    if engine is None:
        raise OcrUnavailable(f"no OCR engine: install {ENGINE} (Debian: tesseract-ocr)")
    env = {"PATH": os.environ.get("PATH", ""), "OMP_THREAD_LIMIT": "1", "LC_ALL": "C"}
    dpi = str(round(scale * 72))  # a PGM carries no resolution, and a wrong estimate drops whole blocks
    done = subprocess.run([engine, "stdin", "stdout", "--dpi", dpi, "--psm", "3", "-l", "eng", "tsv"], input=image,
                          capture_output=True, timeout=timeout_s, env=env, check=False)
    if done.returncode != 0:
        return []
    words = []
    for row in done.stdout.decode("utf-8", "replace").splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip():
            continue
        try:
            left, top, width, height, confidence = (float(cells[i]) for i in (6, 7, 8, 9, 10))
        except ValueError:
            continue
        if confidence < MIN_CONFIDENCE:
            continue
        text = cells[11].strip()
        words.append(OcrWord(text, left / scale, top / scale, (left + width) / scale, (top + height) / scale,
                             font_size(text, height / scale)))
    return words


_ASCENDING = set("bdfhklt0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DESCENDING = set("gjpqy")


def font_size(text: str, height: float) -> float:
    """A word's font size from the height of its box: a word of small letters only stands about
    0.52 em tall, one with a capital, a digit or an ascender 0.72 em, and a descender adds
    0.21 em below (Latin text faces, roughly), so a heading without descenders is not taken
    for smaller than it is."""
    span = (0.72 if _ASCENDING & set(text) else 0.52) + (0.21 if _DESCENDING & set(text) else 0.0)
    return height / span
