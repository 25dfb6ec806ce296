"""Unpack a task's bundle into its Run's own directory. Touches that directory only: the files and folders the bundle
names and temporary files (`.qinglong-unpack-<random>`) beside them, never following a symlink. Standard library
only; nothing happens at import.

The archive is validated whole first (`qinglong.wire.bundle.entries`: paths, types, modes, duplicates, every cap),
then read again (`members`, the same rules and caps as it goes) while writing, in two phases:

1. **Stage**: each entry's folders are opened from the Run's directory one at a time (`dir_fd`, O_NOFOLLOW): a
   missing one is made 0755 and given to `owner`, an existing one is reused as it is (its mode and owner kept), a
   symlink or a file on the way is refused (`bundle.path_blocked`), as is a folder where a file goes. Each file is
   written to a temporary file made O_CREAT | O_EXCL | O_NOFOLLOW in its folder, then given its mode (0644 or
   0755) and `owner`.
2. **Place**: each temporary file is renamed over its name. A rename replaces the entry there (an earlier
   Attempt's file, or a symlink a task left) atomically and never follows it: nothing outside is ever written.

On any refusal (BundleError, with the bundle's stable code) or fault (the OSError itself), what this call made is
removed, each only while it is still the one made (same device and inode; a folder only when empty): its temporary
files, the files it placed where nothing was, the folders it made. A file it placed over an existing entry stays
placed (the old entry is gone): only a failure during phase 2, after the whole archive was read and written, can
leave one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from qinglong.wire.bundle import PATH_BLOCKED, BundleError, entries, members

TEMP_PREFIX: Final = ".qinglong-unpack-"
FOLDER_MODE: Final = 0o755
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Errors that mean "something is in the way": a symlink (O_NOFOLLOW), a file where a folder goes, a folder where a
# file goes (empty or not).
_BLOCKED: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY})


@dataclass(frozen=True)
class _Made:
    """Something this call made: its folder's segments below the Run's directory, its name and its identity."""

    folder: tuple[str, ...]
    name: str
    dev: int
    ino: int
    is_dir: bool = False


def _blocked(path: str, error: OSError) -> Exception:
    """A refusal for what the file system says about `path`, or the OSError itself (a fault, not a refusal)."""
    if error.errno in _BLOCKED:
        return BundleError(PATH_BLOCKED, f"path {path[:80]!r}: a symlink, a file or a folder is in the way")
    return error


def _open_folders(root: int, folders: Sequence[str], owner: tuple[int, int] | None, made: list[_Made] | None) -> int:
    """A descriptor of the folder `folders` below `root`, never following a symlink. With `made`, a missing folder
    is made 0755, given to `owner` and recorded there; without, a missing folder is an error. The caller closes it."""
    fd = os.dup(root)
    try:
        for depth, name in enumerate(folders):
            created = False
            if made is not None:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, FOLDER_MODE, dir_fd=fd)
                    created = True
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if created and made is not None:
                st = os.fstat(fd)
                made.append(_Made(tuple(folders[:depth]), name, st.st_dev, st.st_ino, is_dir=True))
                os.fchmod(fd, FOLDER_MODE)
                if owner is not None:
                    os.fchown(fd, *owner)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _stage(
    parent: int, folder: tuple[str, ...], mode: int, chunks: Iterable[bytes], owner: tuple[int, int] | None,
    temps: list[_Made],
) -> None:  # fmt: skip
    """Write `chunks` to a new temporary file in `parent` (recorded in `temps` before a byte is written), with
    `mode` and given to `owner`."""
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(temp, _NEW_FILE, 0o600, dir_fd=parent)
    try:
        st = os.fstat(fd)
        temps.append(_Made(folder, temp, st.st_dev, st.st_ino))
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def _target(parent: int, name: str, path: str) -> bool:
    """Whether an entry is at the file's name (to be replaced); a folder there is refused."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        raise BundleError(PATH_BLOCKED, f"path {path[:80]!r}: a folder is in the way")
    return True


def unpack(data: bytes, run_dir: Path, owner: tuple[int, int] | None) -> tuple[str, ...]:
    """Unpack the bundle `data` into `run_dir` (the module docstring); the paths unpacked, in the archive's order.
    `owner`: the task's (uid, gid) when it is not the Worker's own. BundleError for a refusal, OSError for a fault;
    either way having removed what it made."""
    entries(data)  # the whole archive, before anything is made
    root = os.open(run_dir, _DIR_FLAGS)
    paths: list[str] = []
    folders_made: list[_Made] = []
    temps: list[_Made] = []
    targets: list[tuple[str, str, bool]] = []  # per temporary file: its path, its name, whether it replaces one
    placed = 0
    try:
        for entry, chunks in members(data):
            paths.append(entry.path)
            segments = entry.path.split("/")
            try:
                parent = _open_folders(root, segments if entry.kind == "dir" else segments[:-1], owner, folders_made)
            except OSError as error:
                raise _blocked(entry.path, error) from None
            try:
                if entry.kind == "file":
                    replaces = _target(parent, segments[-1], entry.path)
                    _stage(parent, tuple(segments[:-1]), entry.mode, chunks, owner, temps)
                    targets.append((entry.path, segments[-1], replaces))
            finally:
                os.close(parent)
        for temp, (path, name, _) in zip(temps, targets, strict=True):
            try:
                parent = _open_folders(root, temp.folder, None, None)
                try:
                    os.rename(temp.name, name, src_dir_fd=parent, dst_dir_fd=parent)
                finally:
                    os.close(parent)
            except OSError as error:
                raise _blocked(path, error) from None
            placed += 1
        return tuple(paths)
    except BaseException:
        done = zip(temps[:placed], targets[:placed], strict=True)
        new = [replace(temp, name=name) for temp, (_, name, replaces) in done if not replaces]
        _remove(root, [*temps[placed:], *new, *reversed(folders_made)])  # the files, then the folders, deepest first
        raise
    finally:
        os.close(root)


def _remove(root: int, made: Iterable[_Made]) -> None:
    """Remove each of `made` while it is still the one made (a folder only when empty); never raises."""
    for item in made:
        try:
            parent = _open_folders(root, item.folder, None, None)
        except OSError:
            continue
        try:
            st = os.stat(item.name, dir_fd=parent, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (item.dev, item.ino):
                if item.is_dir:
                    os.rmdir(item.name, dir_fd=parent)
                else:
                    os.unlink(item.name, dir_fd=parent)
        except OSError:
            pass
        finally:
            os.close(parent)
