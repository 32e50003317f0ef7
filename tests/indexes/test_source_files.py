"""A source folder is read for its own regular files only: links are listed, never followed;
FIFOs, sockets and devices are listed, never opened; a file swapped for a link after the
listing is refused when it is read; kernel folders are refused as sources."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from indexes.source_files import FileTooLarge, NotRegularFile, check_source, list_folder, read_regular, shown
from retrieval.errors import IngestError


def test_links_fifos_and_sockets_are_listed_and_their_targets_never_walked(tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.md").write_text("secret")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.md").write_text("a")
    (src / "to-outside").symlink_to(outside)
    (src / "sub" / "passwd.txt").symlink_to("/etc/passwd")
    (src / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    os.mkfifo(src / "pipe.md")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock.md"))
        listing = list_folder(src)
    assert listing.files == [src / "sub" / "a.md"]
    refused = {r.path.relative_to(src).as_posix(): r.reason for r in listing.refused}
    assert refused == {"to-outside": "link", "sub/passwd.txt": "link", "dangling.md": "link",
                       "pipe.md": "special_file", "sock.md": "special_file"}
    assert any("/etc/passwd" in r.message for r in listing.refused)


def test_hidden_entries_are_ignored_as_before(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.md").write_text("x")
    (tmp_path / ".hidden.md").write_text("x")
    (tmp_path / ".link").symlink_to("/etc/passwd")
    (tmp_path / "seen.md").write_text("x")
    listing = list_folder(tmp_path)
    assert listing.files == [tmp_path / "seen.md"] and listing.refused == []


def test_files_are_listed_in_the_order_a_sorted_rglob_gives(tmp_path):
    for rel in ["b/a.md", "a-b.md", "a/z.md", "a/b/c.md", "A.md", "a.md"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert list_folder(tmp_path).files == sorted(p for p in tmp_path.rglob("*") if p.is_file())


def test_a_file_swapped_for_a_link_after_the_listing_is_refused_when_read(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    doc = src / "sub" / "a.md"
    doc.write_text("mine")
    assert read_regular(doc, 100, src) == b"mine"
    doc.unlink()
    doc.symlink_to("/etc/passwd")
    with pytest.raises(NotRegularFile, match="symbolic link"):
        read_regular(doc, 100, src)
    with pytest.raises(NotRegularFile):
        read_regular(doc, 100)  # without its folder, the file's own name is still not followed


def test_a_folder_swapped_for_a_link_after_the_listing_is_refused_when_read(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.md").write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.md").write_text("not in the folder")
    (src / "sub").rename(tmp_path / "moved")
    (src / "sub").symlink_to(elsewhere)
    with pytest.raises(NotRegularFile):
        read_regular(src / "sub" / "a.md", 100, src)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="not a regular file"):
        read_regular(fifo, 100, tmp_path)


def test_reading_stops_past_the_bound(tmp_path):
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * 101)
    assert read_regular(big, 101, tmp_path) == b"x" * 101
    with pytest.raises(FileTooLarge, match="larger than 100 bytes"):
        read_regular(big, 100, tmp_path)


@pytest.mark.parametrize("path", ["/proc/self/environ", "/proc", "/sys/kernel", "/dev/stdin", "/proc/self/cwd"])
def test_kernel_folders_are_refused_as_sources(path):
    with pytest.raises(IngestError, match="/proc, /sys and /dev"):
        check_source(Path(path))


def test_a_link_to_a_kernel_folder_is_refused_as_a_source(tmp_path):
    (tmp_path / "env.txt").symlink_to("/proc/self/environ")
    with pytest.raises(IngestError, match="/proc, /sys and /dev"):
        check_source(tmp_path / "env.txt")
    check_source(tmp_path)


def test_a_path_is_shown_with_its_invisible_characters_escaped():
    assert shown("/a/Q3 report.pdf") == "/a/Q3 report.pdf"
    assert shown("/a/x\u202eyz\tq\u200b") == "/a/x\\u202eyz\\tq\\u200b"
    assert shown("bad\udcff") == "bad\\udcff"
