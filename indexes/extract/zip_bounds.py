"""Bounds on an Office Open XML archive (a .docx or .xlsx), checked by what its directory declares
before anything is inflated: the readers (python-docx, openpyxl) read parts whole or parse
them into trees, and zipfile stops each part at its declared size, so a part that lies about
its size cannot inflate past it."""

from __future__ import annotations

import zipfile

from indexes.extract.record import BadFile

MAX_UNZIPPED_BYTES = 256 * 1024 * 1024  # a zip that inflates past this is refused (a zip bomb)
MAX_XML_BYTES = 64 * 1024 * 1024  # its XML parts, which are parsed into trees of about 10x their size
MAX_ENTRIES = 10_000  # parts of one archive (a Word file has a few dozen, and one per image)


def check_archive(infos: list[zipfile.ZipInfo]) -> None:
    """Refuse an archive by what its directory declares, before anything is inflated (python-docx
    reads every part whole; zipfile stops each part at its declared size, so a part that lies
    about its size cannot inflate past it)."""
    if len(infos) > MAX_ENTRIES:
        raise BadFile("too_large", f"the archive holds {len(infos)} parts, over {MAX_ENTRIES}")
    unzipped = sum(info.file_size for info in infos)
    if unzipped > MAX_UNZIPPED_BYTES:
        raise BadFile("too_large", f"the archive inflates to {unzipped} bytes, over {MAX_UNZIPPED_BYTES}")
    xml = sum(info.file_size for info in infos if info.filename.lower().endswith((".xml", ".rels")))
    if xml > MAX_XML_BYTES:
        raise BadFile("too_large", f"its XML parts inflate to {xml} bytes, over {MAX_XML_BYTES}")
