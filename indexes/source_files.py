"""What an ingest reads of a source folder: its own regular files, and nothing they point to.

A folder's author decides what is in it, not what the ingesting process can reach, so:

- **Symbolic links inside a source folder are never followed**, neither to files nor to
  folders. Each is left out and listed (reason `link`), whatever it points to: a link can aim
  at anything the ingesting process may read (its environment in /proc/self/environ, where
  credentials live, /etc/passwd, another team's folder), and a sidecar beside it could make
  that public. A source named on the command line may itself be a link: the person running
  the ingest chose it.
- **FIFOs, sockets and devices are left out and listed** (`special_file`) and never opened
  (opening a FIFO blocks until something writes to it).
- **A name that is not UTF-8** is left out and listed (`bad_name`): it can be neither an id
  nor shown. A folder that cannot be listed is left out and listed (`unreadable`).
- **A source under /proc, /sys or /dev is refused**: those are the kernel's, not documents.
- Hidden entries (a name starting with '.') are ignored and not listed, as always.

Every file is then opened by `open_regular`: beneath its source folder one path part at a
time with O_NOFOLLOW, the file itself with O_NOFOLLOW | O_NONBLOCK, and fstat must say a
regular file. An entry swapped for a link, a FIFO or a device between the listing and the
reading is refused too. `read_regular` bounds what it reads.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

from retrieval.errors import IngestError

KERNEL_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))
_SHOWN_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})  # invisible or reordering when printed
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegularFile(OSError):
    """An entry that is a link, a FIFO, a socket or a device where a regular file was listed."""


class FileTooLarge(OSError):
    """A file longer than the reader's bound (its strerror says the bound)."""


@dataclass(frozen=True)
class Refused:
    """An entry of a source folder that is never read, and why."""

    path: Path
    reason: str  # link | special_file | bad_name | unreadable
    message: str


@dataclass(frozen=True)
class Listing:
    files: list[Path]  # regular files, not hidden, sorted as Path sorts (the order an ingest reads them)
    refused: list[Refused]


def shown(path: Path | str) -> str:
    """`path` as text safe to print: control, bidi, zero-width and other invisible characters
    (and bytes that are not UTF-8) written as escapes, so a name cannot hide or reorder what a
    report says."""
    return "".join(c.encode("unicode_escape").decode("ascii")
                   if c != " " and unicodedata.category(c) in _SHOWN_ESCAPED else c for c in str(path))


def check_source(src: Path) -> None:
    """Refuse a source under /proc, /sys or /dev, as given or once its links are resolved."""
    for candidate in (Path(os.path.abspath(src)), Path(os.path.realpath(src))):
        if any(candidate == k or k in candidate.parents for k in KERNEL_FOLDERS):
            raise IngestError("refused: /proc, /sys and /dev hold the system's state, not documents", shown(src))


def list_folder(root: Path) -> Listing:
    """The regular files below `root` and the entries refused, without following any link
    below it (the folder `root` itself may be one)."""
    files: list[Path] = []
    refused: list[Refused] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as e:
            if folder == root:
                raise IngestError(f"cannot list folder: {e.strerror}", shown(root)) from None
            refused.append(Refused(folder, "unreadable", f"cannot list folder: {e.strerror}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = folder / entry.name
            try:
                if not _utf8(entry.name):
                    refused.append(Refused(path, "bad_name", "the name is not UTF-8 text"))
                elif entry.is_symlink():
                    refused.append(Refused(path, "link", f"a symbolic link (to {shown(os.readlink(path))}): "
                                                         "links inside a source folder are not followed"))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                elif entry.is_file(follow_symlinks=False):
                    files.append(path)
                else:
                    kind = _special_kind(entry.stat(follow_symlinks=False).st_mode)
                    refused.append(Refused(path, "special_file", f"a {kind}, not a regular file: never opened"))
            except OSError as e:
                refused.append(Refused(path, "unreadable", f"cannot inspect: {e.strerror}"))
    files.sort()
    refused.sort(key=lambda r: r.path)
    return Listing(files, refused)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")  # a name that is not UTF-8 arrives holding surrogate escapes
    except UnicodeEncodeError:
        return False
    return True


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def open_regular(path: Path, root: Path | None = None) -> BinaryIO:
    """`path` open for binary reading, only if it is a regular file reached without a link:
    each part of its path below `root` is opened with O_NOFOLLOW (without `root`, the file's
    own name only). O_NONBLOCK keeps a FIFO from blocking the open; fstat then refuses
    anything but a regular file. Raises NotRegularFile, or the OSError of the open."""
    if root is not None and path != root:
        fd = _open_beneath(root, path.relative_to(root).parts)
    else:
        fd = _open(lambda: os.open(path, _FILE_FLAGS), path.name)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file (a FIFO, socket, device or folder): never read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int, root: Path | None = None) -> bytes:
    """The bytes of `path`, opened by `open_regular`; FileTooLarge past `limit` bytes."""
    with open_regular(path, root) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(errno.EFBIG, f"larger than {limit:,} bytes")
    return data


def _open_beneath(root: Path, parts: tuple[str, ...]) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            folder = fd
            fd = _open(lambda: os.open(part, _DIR_FLAGS, dir_fd=folder), part)  # noqa: B023 - called at once
            os.close(folder)
        folder = fd
        fd = _open(lambda: os.open(parts[-1], _FILE_FLAGS, dir_fd=folder), parts[-1])
        os.close(folder)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open(call: Callable[[], int], name: str) -> int:
    try:
        return call()
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW met a link (as a folder: ENOTDIR)
            raise NotRegularFile(e.errno, f"{shown(name)!r} is a symbolic link (or no longer a folder): "
                                          "links inside a source folder are not followed") from None
        raise
