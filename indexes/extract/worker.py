"""The extraction worker process: reads files from its parent and answers their extraction.

Started by indexes/extract/sandbox.py as `python -m indexes.extract.worker MEMORY_BYTES`, it
lowers its own limits before it reads anything: its data segment to MEMORY_BYTES (a zip bomb
or a paragraph flood ends in MemoryError here, not in the server), its priority (the lowest:
a file being extracted yields the cores to queries), and, per file, its CPU time (a worker
whose parent is gone cannot spin on a hostile file for ever).

Frames on stdin: `>II` (header length, data length), a JSON header `{"kind", "max_chars",
"cpu_s", "ocr"}`, the file's bytes. Frames on stdout: `>I` length and a JSON body, `{"ok": record}`
or `{"bad": {"reason", "message"}}`. JSON, never pickle: a parser exploited by a file must not
be able to make its parent run code.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys
from typing import Any, BinaryIO

from indexes.extract.record import BadFile, Extracted

HEADER = struct.Struct(">II")
REPLY = struct.Struct(">I")


def record_of(got: Extracted) -> dict[str, Any]:
    """An extraction as JSON (the reply of a worker)."""
    return {"text": got.text, "title": got.title, "date": got.date.isoformat() if got.date else None,
            "metadata": got.metadata, "pages": got.pages, "tables": [g.to_json() for g in got.tables],
            "regions": [[r.start, r.end, r.page, list(r.section)] for r in got.regions]}


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _answer(out: BinaryIO, body: dict[str, Any]) -> None:
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    out.write(REPLY.pack(len(raw)) + raw)
    out.flush()


def _cpu_limit(seconds: float) -> None:
    """Let this file use `seconds` of CPU beyond what the worker used so far (SIGXCPU after)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(spent + seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def serve(memory_bytes: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
    from indexes.files import extract

    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    os.nice(19)
    while True:
        head = _read_exact(stdin, HEADER.size)
        if head is None:
            return  # the parent closed the pipe: no more work
        meta_len, data_len = HEADER.unpack(head)
        meta_raw, data = _read_exact(stdin, meta_len), _read_exact(stdin, data_len)
        if meta_raw is None or data is None:
            return
        meta = json.loads(meta_raw)
        _cpu_limit(float(meta["cpu_s"]))
        try:
            got = extract(data, meta["kind"], int(meta["max_chars"]), bool(meta.get("ocr", False)))
            body: dict[str, Any] = {"ok": record_of(got)}
        except BadFile as e:
            body = {"bad": {"reason": e.reason, "message": e.message}}
        except MemoryError:
            body = {"bad": {"reason": "too_large", "message": f"extracting it needs more than the {memory_bytes >> 20} MiB "
                                                              "an extraction may use"}}
        except RecursionError:
            body = {"bad": {"reason": "too_large", "message": "the file nests too deep to read"}}
        del data
        _answer(stdout, body)


def main() -> None:
    """Replies go to a private copy of stdout; fd 1 then points at stderr, so a library that
    prints cannot break a frame."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(int(sys.argv[1]), sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
