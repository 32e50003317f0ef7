"""Hostile files, one per class of attack on the extractors, each under a 1 MiB body.

`hostile_files()` returns (name, kind, bytes) for: angle-bracket runs, tag floods, deep
nesting, Word paragraph floods, zips that lie about their sizes, zip bombs, many-entry zips,
huge and endless-word PDFs; `hostile_markdown()` the YAML alias bomb and the heading of
spaces, which only an ingest reads. The test tests/system/test_hostile_files.py sends them
as PUTs while clients query; the benchmark measures the same against `quarry serve`:

    .venv/bin/python benchmarks/hostile_files.py
"""

from __future__ import annotations

import functools
import io
import struct
import zipfile
import zlib

BODY_LIMIT = 1024 * 1024
_PAGE = b"<html><head><title>t</title></head><body><p>Lead paragraph.</p>%s</body></html>"
_CONTENT_TYPES = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                  b'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
                  b'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/'
                  b'document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.'
                  b'main+xml"/></Types>')
_RELS = (b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
         b'relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
         b'relationships/officeDocument" Target="word/document.xml"/></Relationships>')
_DOC_HEAD = (b'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
             b'wordprocessingml/2006/main"><w:body>')
_DOC_TAIL = b"</w:body></w:document>"


def _docx(document_xml: bytes, extra: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES)
        z.writestr("_rels/.rels", _RELS)
        z.writestr("word/document.xml", document_xml)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return out.getvalue()


def _paragraph_flood(count: int) -> bytes:
    return _docx(_DOC_HEAD + b"<w:p><w:r><w:t>Lead.</w:t></w:r></w:p>" + b"<w:p/>" * count + _DOC_TAIL)


def _lying_sizes(real: int, declared: int) -> bytes:
    """A Word file whose document part inflates to `real` bytes but declares `declared`, in both
    its local header and the central directory."""
    body = _DOC_HEAD + b"<w:p><w:r><w:t>" + b"A" * real + b"</w:t></w:r></w:p>" + _DOC_TAIL
    data = bytearray(_docx(body))
    name = b"word/document.xml"
    local = data.find(name) - 30  # the name's first occurrence is in its local header
    central = data.find(b"PK\x01\x02")
    while central != -1 and data[central + 46: central + 46 + len(name)] != name:
        central = data.find(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", data, local + 22, declared)
    struct.pack_into("<I", data, central + 24, declared)
    return bytes(data)


def _zip_bomb(inflated: int) -> bytes:
    """A Word file with a media part of `inflated` zero bytes (about 1,000:1 deflated)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    parts = [compressor.compress(chunk) for _ in range(inflated >> 20)]
    raw = b"".join(parts) + compressor.flush()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES)
        z.writestr("_rels/.rels", _RELS)
        z.writestr("word/document.xml", _DOC_HEAD + b"<w:p><w:r><w:t>Lead.</w:t></w:r></w:p>" + _DOC_TAIL)
        info = zipfile.ZipInfo("word/media/zeros.bin")
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, b"")  # a placeholder entry, rewritten below with the bomb's stream
    data = out.getvalue()
    # Rebuild the archive by hand around the stream deflated above (zipfile would deflate the GB again).
    return _with_raw_entry(data, "word/media/zeros.bin", raw, inflated)


def _with_raw_entry(archive: bytes, name: str, raw: bytes, size: int) -> bytes:
    """`archive` with entry `name` replaced by an already deflated stream `raw` of `size` bytes."""
    src = zipfile.ZipFile(io.BytesIO(archive))
    out = io.BytesIO()
    entries = []
    for info in src.infolist():
        offset = out.tell()
        fname = info.filename.encode()
        if info.filename == name:
            data, csize, usize, ccrc = raw, len(raw), size, _zero_crc(size)
        else:
            data = archive[info.header_offset + 30 + len(fname) + _extra_len(archive, info.header_offset):][: info.compress_size]
            csize, usize, ccrc = info.compress_size, info.file_size, info.CRC
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, ccrc, csize, usize, len(fname), 0) + fname)
        out.write(data)
        entries.append((fname, ccrc, csize, usize, offset))
    start = out.tell()
    for fname, ccrc, csize, usize, offset in entries:
        out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, ccrc, csize, usize, len(fname), 0, 0,
                              0, 0, 0, offset) + fname)
    end = out.tell()
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), end - start, start, 0))
    return out.getvalue()


def _extra_len(archive: bytes, header_offset: int) -> int:
    return int(struct.unpack_from("<H", archive, header_offset + 28)[0])


def _zero_crc(size: int) -> int:
    crc, chunk = 0, bytes(1 << 20)
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    return crc


def _many_entries(count: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES)
        z.writestr("_rels/.rels", _RELS)
        z.writestr("word/document.xml", _DOC_HEAD + b"<w:p><w:r><w:t>Lead.</w:t></w:r></w:p>" + _DOC_TAIL)
        for n in range(count):
            z.writestr(f"{n:x}", b"")
    return out.getvalue()


def pdf(pages: list[bytes], compress: bool = True) -> bytes:
    """A PDF of one content stream per page (Helvetica), written by hand so that a test can
    shape what no authoring library would write."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for content in pages:
        stream = zlib.compress(content) if compress else content
        filt = b" /Filter /FlateDecode" if compress else b""
        objects.append(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(stream), filt, stream))
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       b"/Contents %d 0 R >>" % len(objects))
        kids.append(len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _text_page(text: bytes) -> bytes:
    return b"BT /F1 10 Tf 20 700 Td (" + text + b") Tj ET"


@functools.lru_cache(maxsize=1)
def hostile_files() -> tuple[tuple[str, str, bytes], ...]:
    """(name, kind, bytes) for each class of hostile file, each under BODY_LIMIT (made once)."""
    files = [
        ("angle_brackets", "html", _PAGE % (b"<a" * 32_000)),
        ("bare_brackets", "html", _PAGE % (b"<" * 64_000)),
        ("end_tag_flood", "html", _PAGE % (b"</p>" * 60_000)),
        ("self_closed_div_flood", "html", _PAGE % (b"<div/>" * 170_000)),
        ("deep_nesting", "html", _PAGE % (b"<div>" * 100_000)),
        ("formatting_flood", "html", _PAGE % (b"<b><i><u>x" * 60_000)),
        ("paragraph_flood", "docx", _paragraph_flood(10_000_000)),
        ("paragraph_flood_small", "docx", _paragraph_flood(2_000_000)),
        ("lying_zip_sizes", "docx", _lying_sizes(real=50_000_000, declared=1000)),
        ("zip_bomb", "docx", _zip_bomb(300 << 20)),
        ("many_entry_zip", "docx", _many_entries(12_000)),
        ("many_page_pdf", "pdf", pdf([b""] * 4_000, compress=False)),
        ("endless_word_pdf", "pdf", pdf([_text_page(b"W" * 1_000_000)])),
        ("many_words_pdf", "pdf", pdf([_text_page(b"ab " * 300_000)])),
    ]
    for name, _, data in files:
        assert len(data) <= BODY_LIMIT, (name, len(data))
    return tuple(files)


def hostile_markdown() -> list[tuple[str, bytes]]:
    """(file name, bytes) of Markdown that attacks the front matter and heading readers."""
    laughs = ["---", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n, prev in zip("bcdefghi", "abcdefgh", strict=True):
        laughs.append(f"{n}: &{n} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    laughs += ["---", "# Laughs", "", "Body."]
    return [("alias_bomb.md", "\n".join(laughs).encode()),
            ("heading_spaces.md", b"#" + b" " * 100_000 + b"x\n\nBody text.\n")]


FLOOD_ROUNDS = 5  # bursts of 16 PUTs at once, one after the other
CONTENT_TYPES = {"html": "text/html", "pdf": "application/pdf",
                 "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}


class Clients:
    """`n` clients of another key querying (hybrid search and the loop, alternately) and one
    polling /healthz every 20 ms, until stopped; latencies in ms."""

    def __init__(self, url: str, key: str, n: int = 4) -> None:
        import threading

        self.url, self.key, self.done = url, key, threading.Event()
        self.query_ms: list[float] = []
        self.health_ms: list[float] = []
        self.statuses: list[int] = []
        self.threads = [threading.Thread(target=self._query, args=(i,), daemon=True) for i in range(n)]
        self.threads.append(threading.Thread(target=self._health, daemon=True))

    def _query(self, i: int) -> None:
        import time

        import httpx

        with httpx.Client(base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {self.key}"}) as client:
            while not self.done.is_set():
                t0 = time.perf_counter()
                if i % 2:
                    r = client.post("/v1/query", json={"question": "How do I rotate the on-call pager?"})
                else:
                    r = client.post("/v1/search", json={"retriever": "hybrid", "query": "incident postmortem", "k": 5})
                self.query_ms.append((time.perf_counter() - t0) * 1000)
                self.statuses.append(r.status_code)

    def _health(self) -> None:
        import time

        import httpx

        with httpx.Client(base_url=self.url, timeout=120) as client:
            while not self.done.wait(0.02):
                t0 = time.perf_counter()
                client.get("/healthz")
                self.health_ms.append((time.perf_counter() - t0) * 1000)

    def __enter__(self) -> Clients:
        import time

        for t in self.threads:
            t.start()
        while len(self.query_ms) < 2 * len(self.threads) or not self.health_ms:  # connected and warm
            time.sleep(0.01)
        self.query_ms.clear()
        self.health_ms.clear()
        self.statuses.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for t in self.threads:
            t.join()


def _tree_rss_mb(pid: int) -> tuple[float, float]:
    """(the server's resident MB, its extraction workers' together)."""
    from benchmarks.hostile_sql import rss_mb

    import glob

    children = []
    for listing in glob.glob(f"/proc/{pid}/task/*/children"):  # workers are started by request threads
        try:
            with open(listing) as f:
                children += f.read().split()
        except OSError:
            pass
    workers = 0.0
    for child in children:
        try:
            workers += rss_mb(child)
        except OSError:
            pass
    return rss_mb(str(pid)), workers


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1) if ordered else 0.0


def flood(url: str, key: str) -> list[tuple[int, float, str]]:
    """FLOOD_ROUNDS bursts of 16 PUTs at once of the paragraph flood, from `key`."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    slow = next(data for name, _, data in hostile_files() if name == "paragraph_flood")

    def put(n: int) -> tuple[int, float, str]:
        t0 = time.perf_counter()
        r = httpx.put(f"{url}/v1/documents/hostile-flood-{n}", content=slow, params={"acl": "group:sre"}, timeout=300,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": CONTENT_TYPES["docx"]})
        return r.status_code, time.perf_counter() - t0, r.json().get("error", {}).get("code", "stored")

    with ThreadPoolExecutor(16) as pool:
        return [answer for _ in range(FLOOD_ROUNDS) for answer in pool.map(put, range(16))]


def main(attacker_nice: int = 0) -> None:
    """Serve the demo corpus from `quarry serve` (a child process); measure other callers idle,
    then each hostile file PUT by a write key while 4 clients of another key query, then
    FLOOD_ROUNDS bursts of 16 such PUTs at once; writes benchmarks/results/hostile_files.json."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import json
    from collections import Counter

    import httpx

    from benchmarks.common import CACHE, ROOT, build_or_reuse, machine, make_embedder, write_json
    from benchmarks.hostile_sql import Peak
    from auth.keys import KeyStore

    index, _ = build_or_reuse("hostile-files-demo", [ROOT / "eval_data" / "demo" / "docs"], make_embedder())
    work = CACHE / "hostile-files-server"
    work.mkdir(parents=True, exist_ok=True)
    (work / "keys.json").unlink(missing_ok=True)
    store = KeyStore(work / "keys.json")
    writer = store.add("mallory", ["sre"], ["query", "write"])[0]
    reader = store.add("olga", ["sre"], ["query"])[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "QUARRY_RATE_PER_SECOND": "1000", "QUARRY_BURST": "1000"}
    proc = subprocess.Popen([sys.executable, "-m", "routes.cli.main", "serve", "--index", str(index), "--keys",
                             str(work / "keys.json"), "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)

        def put(name: str, kind: str, data: bytes) -> tuple[int, float, str]:
            t0 = time.perf_counter()
            r = httpx.put(f"{url}/v1/documents/hostile-{name}", content=data, params={"acl": "group:sre"}, timeout=300,
                          headers={"Authorization": f"Bearer {writer}", "Content-Type": CONTENT_TYPES[kind]})
            detail = r.json().get("error", {}).get("message", "")[:90] if r.status_code != 200 else "stored"
            return r.status_code, time.perf_counter() - t0, detail

        put("warm", "html", _PAGE % b"<p>warm the extraction workers</p>")
        with Clients(url, reader) as idle:
            time.sleep(15)
        rss_idle = _tree_rss_mb(proc.pid)
        files = {}
        with Clients(url, reader) as attacked, Peak(str(proc.pid)) as peak:
            for name, kind, data in hostile_files():
                status, seconds, detail = put(name, kind, data)
                files[name] = {"status": status, "seconds": round(seconds, 2), "outcome": detail,
                               "workers_rss_mb": round(_tree_rss_mb(proc.pid)[1], 1)}
                print(f"{name:24} {status} {seconds:6.2f} s  {detail}", flush=True)
        with Clients(url, reader) as flooded, Peak(str(proc.pid)) as flood_peak:
            # From a process of its own, as an attacker is: its threads do not slow the measuring clients.
            raw = subprocess.run([sys.executable, __file__, "--flood", url, writer], capture_output=True, check=True,
                                 cwd=ROOT, timeout=1200, preexec_fn=lambda: os.nice(attacker_nice)).stdout
            flood = [tuple(answer) for answer in json.loads(raw)]
        out = {
            "machine": machine(),
            "idle": {"query_p99_ms": _p99(idle.query_ms), "healthz_p99_ms": _p99(idle.health_ms), "queries": len(idle.query_ms),
                     "server_rss_mb": round(rss_idle[0], 1), "workers_rss_mb": round(rss_idle[1], 1)},
            "files": files,
            "during_files": {"query_p99_ms": _p99(attacked.query_ms), "healthz_p99_ms": _p99(attacked.health_ms),
                             "queries": len(attacked.query_ms), "statuses": sorted(set(attacked.statuses)),
                             "server_rss_growth_mb": round(peak.growth, 1)},
            "flood_16": {"rounds": FLOOD_ROUNDS, "attacker_nice": attacker_nice,
                         "statuses": dict(Counter(s for s, _, _ in flood)),
                         "seconds_max": round(max(t for _, t, _ in flood), 2),
                         "query_p99_ms": _p99(flooded.query_ms), "healthz_p99_ms": _p99(flooded.health_ms),
                         "statuses_of_others": sorted(set(flooded.statuses)),
                         "server_rss_growth_mb": round(flood_peak.growth, 1)},
        }
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"idle: query p99 {out['idle']['query_p99_ms']} ms, /healthz p99 {out['idle']['healthz_p99_ms']} ms")
    print(f"during the files: query p99 {out['during_files']['query_p99_ms']} ms, /healthz p99 "
          f"{out['during_files']['healthz_p99_ms']} ms, server RSS +{out['during_files']['server_rss_growth_mb']} MB")
    print(f"16 at once from one key: {out['flood_16']}")
    write_json("hostile_files" + (f"-attacker-nice{attacker_nice}" if attacker_nice else ""), out)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if sys.argv[1:2] == ["--flood"]:
        import json

        print(json.dumps(flood(sys.argv[2], sys.argv[3])))
    else:
        # --attacker-nice N: the flooding process at a lower priority, standing in for an attacker on
        # another machine (on one 2-core machine its own threads otherwise take a core from the server).
        main(int(sys.argv[sys.argv.index("--attacker-nice") + 1]) if "--attacker-nice" in sys.argv else 0)
