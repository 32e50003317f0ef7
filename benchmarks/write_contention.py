"""Small writes while a 1 MiB write embeds, with the real model: how long each small one waits.

    .venv/bin/python benchmarks/write_contention.py [--small 10]

On the small test corpus (tests/fixtures/mini), in-process through the writer a server uses:
the baseline is `--small` puts of short notes one after another with nothing else running;
then one principal puts a 1 MiB document (about 700 chunks, embedded with the real model on
these 2 cores) while another principal puts the same short notes. Each small put is timed
until it is acknowledged (logged and served); the large one from its start. Writes
benchmarks/results/write_contention.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import threading
import time

from benchmarks.common import ROOT, build_or_reuse, machine, make_embedder, write_json
from indexes.corpus import make_document
from indexes.live import Put
from retrieval.types import Principal
from routes.service.view import open_view
from routes.service.generations import Generations
from routes.service.writes import Writer

LOADER, EDITOR = Principal("loader", ("content",), frozenset({"write"})), Principal("editor", ("content",), frozenset({"write"}))


def note(i: int, tag: str) -> Put:
    return Put(make_document({"id": f"note-{tag}-{i}", "text": f"Short note {i}: the Harrowgate weir gauge read "
                              f"{i * 7} cm at noon.", "acl": ["group:content"]}, None, ("group:admin",)), "bench")


def small_puts(writer: Writer, n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        writer.write([note(i, tag)], EDITOR, key=EDITOR.id)
        out.append(round(time.perf_counter() - t0, 3))
    return out


def main() -> None:
    import shutil

    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=10)
    args = parser.parse_args()
    embedder = make_embedder()
    base, _ = build_or_reuse("write-contention-base", [ROOT / "tests" / "fixtures" / "mini"], embedder)
    index = base.parent / "write-contention"
    shutil.rmtree(index, ignore_errors=True)
    shutil.copytree(base, index)
    generations = Generations(open_view(index, embedder, plugins=False), owned=True)
    writer = Writer(index, generations)
    try:
        alone = small_puts(writer, args.small, "alone")
        text = " ".join(f"Section {i}: the Harrowgate pump station log records flow, pressure and valve state."
                        for i in range(12_000))[: 1024 * 1024 - 2000]
        big_doc = Put(make_document({"id": "bulk-manual", "text": text, "acl": ["group:content"]}, None, ("group:admin",)),
                      "bench")
        big: dict = {}

        def put_big() -> None:
            t0 = time.perf_counter()
            big["out"] = writer.write([big_doc], LOADER, key=LOADER.id)
            big["s"] = round(time.perf_counter() - t0, 3)

        thread = threading.Thread(target=put_big)
        thread.start()
        time.sleep(1.0)  # the large write is embedding
        during = small_puts(writer, args.small, "during")
        finished_first = "out" in big
        thread.join()
    finally:
        writer.close()
        generations.close()
    print(f"{args.small} small puts alone: {min(alone):.3f}-{max(alone):.3f} s; while a 1 MiB put embeds: "
          f"{min(during):.3f}-{max(during):.3f} s; the 1 MiB put took {big['s']:.1f} s "
          f"({'before' if finished_first else 'after'} the small ones were answered)")
    write_json("write_contention", {"machine": machine(), "small_alone_s": alone, "small_during_s": during,
                                    "large_put_s": big["s"], "large_answered_first": finished_first})


if __name__ == "__main__":
    main()
