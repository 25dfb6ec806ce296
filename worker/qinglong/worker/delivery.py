"""Project secrets on this Worker: what a plan's secrets become here, and for how long. Touches the Run's own
directory (the secret files it creates, then removes) and nothing else: never the journal (its callers journal
what it returns), never the network, never a log line. Standard library only; nothing happens at import.

A plan names secrets, never values (`Plan.secret_env`: variable → secret, `Plan.secret_files`: path in the
Run's directory → secret). The answer to a starting ACK, first or replayed, of a starting or running Attempt
delivers the values of the versions the Attempt received (`ActivationResponse.secrets`); the Worker starts
nothing unless every name its plan names is there (`missing`).

- **Values** live in this process's memory only (`SecretValues`, per offer), for masking the task's output;
  a restarted Worker gets them again by replaying the starting ACK. No value is ever written to the journal,
  logged, or put in an exception's message (messages name a variable or a path, never a value).
- **Environment**: `secret_env` entries are put into the task's environment by the Executor (they override
  nothing: a variable in both `env` and `secretEnv` is refused, `secret_env_refused`).
- **Files** (`write_files`): each one created 0600, owned by the task's user and group, at its path inside the
  Run's own directory, its missing parent folders created 0700 (and owned likewise). Where the Worker has a
  tmpfs (`store_base`: worker.toml `secret_store`, by default /dev/shm when it is one) the bytes never touch
  a disk: they live in the launch's own folder there (`<store_base>/<launch nonce>`, 0700, the task's), and
  the path in the Run's directory is a symlink to them; without one the file itself is at the path. Every
  step is relative to an open folder (`dir_fd`) with O_NOFOLLOW, so nothing follows a symlink or leaves the
  directory; a path that would (a symlink, a file where a folder is needed, a name already taken) is refused,
  `secret_file_refused`. Crash-safe in four steps, each journaled before the next:
  1. the caller journals the files to be made (`plan_files`: path and a temporary name made of the launch
     nonce, so a temporary file is ours by its name) and the launch's store folder, if any;
  2. every temporary file is created empty (O_CREAT | O_EXCL | O_NOFOLLOW) in the store folder, else in the
     Run's directory, and its identity (device, inode) handed to `identified`, which journals it before any
     value is written;
  3. each value is written and the path made (symlinkat to the stored file, or linkat of the temporary file;
     both refuse an existing name), then given to the task's user and group;
  4. without a store, the temporary names are unlinked (in a store, the temporary file is the file).
  `remove_files` removes what a launch made and nothing else: a temporary name always (it is ours), a path
  only while it is still ours (the symlink to our stored file, or the regular file of the journaled identity:
  a file the task put there instead, or a path never made, stays), then the store folder. It is what ends
  every Attempt that had files (inbox.save) and what a restart retries from the journal. The identity is
  (device, inode): a file the task made at that path after deleting ours may get the same inode number back
  from the file system and is then removed too (a file replaced by a rename, as tools replace files, never
  is: both inodes existed at once).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from qinglong.wire.activation import DeliveredSecret
from qinglong.wire.offer import Plan

TEMP_PREFIX: Final = ".qinglong-secret-"
SHM: Final = Path("/dev/shm")  # noqa: S108  the usual tmpfs; only a folder of our own in it, checked at each use
# Start-failure codes (error codes, not secrets):
SECRET_UNAVAILABLE: Final = "secret_unavailable"  # noqa: S105  the answer lacks a secret the plan names
SECRET_FILE_REFUSED: Final = "secret_file_refused"  # noqa: S105  a secret file cannot be made safely
SECRET_ENV_REFUSED: Final = "secret_env_refused"  # noqa: S105  a secret cannot be an environment entry
UNMASKABLE: Final = "unmaskable"

_SEGMENT: Final = re.compile(r"[A-Za-z0-9._-]+")
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Errors that mean "not where we may write": a symlink (O_NOFOLLOW), a file where a folder is needed, a name taken.
_REFUSALS: Final = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.EISDIR})


def missing(plan: Plan, delivered: Sequence[DeliveredSecret] | None) -> frozenset[str]:
    """The secrets `plan` names that an answer did not deliver (nothing may start while one is missing)."""
    return plan.secret_names() - {s.name for s in delivered or ()}


def by_name(delivered: Sequence[DeliveredSecret] | None) -> dict[str, bytes]:
    """The delivered values by secret name."""
    return {s.name: s.value for s in delivered or ()}


class SecretValues:
    """The values each Attempt received, by offer, in memory only: a restart forgets them. An Attempt whose
    values cannot be had again (a secret deleted since its start) is marked UNMASKABLE: no more of its output
    leaves the Worker. Its repr shows counts only."""

    def __init__(self) -> None:
        self._by_offer: dict[str, tuple[bytes, ...] | None] = {}

    def put(self, offer_id: str, values: Iterable[bytes]) -> None:
        self._by_offer[offer_id] = tuple(values)

    def unmaskable(self, offer_id: str) -> None:
        self._by_offer[offer_id] = None

    def get(self, offer_id: str) -> tuple[bytes, ...] | Literal["unmaskable"] | None:
        """The offer's values, UNMASKABLE, or None when this process does not know them."""
        if offer_id not in self._by_offer:
            return None
        found = self._by_offer[offer_id]
        return UNMASKABLE if found is None else found

    def forget(self, offer_id: str) -> None:
        self._by_offer.pop(offer_id, None)

    def __repr__(self) -> str:
        return f"SecretValues({len(self._by_offer)} offers)"


class SecretFileRefused(Exception):
    """A secret file that cannot be made safely; the message names its path, never its value."""


@dataclass(frozen=True)
class SecretFile:
    """One secret file of a launch as the journal keeps it: its path in the Run's directory, the temporary name
    it is written under first, and once created the identity of its inode (None until then)."""

    path: str
    temp: str
    dev: int | None = None
    ino: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "temp": self.temp, "dev": self.dev, "ino": self.ino}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SecretFile:
        if not isinstance(data, Mapping) or set(data) != {"path", "temp", "dev", "ino"}:
            raise ValueError("a secret file record has exactly path, temp, dev and ino")
        path, temp, dev, ino = data["path"], data["temp"], data["dev"], data["ino"]
        if type(path) is not str or type(temp) is not str or not temp.startswith(TEMP_PREFIX) or "/" in temp:
            raise ValueError("a secret file record's path and temp must be names")
        if (dev is None) != (ino is None) or any(v is not None and type(v) is not int for v in (dev, ino)):
            raise ValueError("a secret file record's identity is two ints or none")
        return cls(path, temp, dev, ino)


@dataclass(frozen=True)
class FileDelivery:
    """What the Executor is asked to make: the files as journaled (no identity yet), each path's value, and the
    callback that journals the files' identities before any value is written."""

    files: tuple[SecretFile, ...]
    values: Mapping[str, bytes] = field(repr=False)  # by path
    identified: Callable[[tuple[SecretFile, ...]], None]


def plan_files(paths: Iterable[str], launch_nonce: str) -> tuple[SecretFile, ...]:
    """The secret files of one launch, by path, each with its temporary name (ours by the launch nonce)."""
    return tuple(SecretFile(path, f"{TEMP_PREFIX}{launch_nonce}-{i}") for i, path in enumerate(sorted(paths)))


def _segments(path: str) -> list[str]:
    """The path's folders and name; SecretFileRefused for anything but relative segments of [A-Za-z0-9._-]."""
    parts = path.split("/") if isinstance(path, str) else []
    if not parts or len(path) > 255 or any(p in (".", "..") or not _SEGMENT.fullmatch(p) for p in parts):
        raise SecretFileRefused(f"secret file {path!r} is not a relative path inside the Run's directory")
    return parts


def _refused(path: str, error: OSError) -> Exception:
    """A refusal for what the file system says about `path`, or the OSError itself (a fault, not a refusal)."""
    if error.errno in _REFUSALS:
        return SecretFileRefused(f"secret file {path!r} would follow a symlink, cross a file or replace a file")
    return error


def _open_folders(
    root: int, folders: Sequence[str], *, create: bool, owner: tuple[int, int] | None, close_root: bool = False
) -> int:
    """A descriptor of the folder `folders` below `root`, never following a symlink; with `create`, a missing
    folder is made 0700 (and given to `owner`). The caller closes it (and `root`, unless `close_root`)."""
    fd = root if close_root else os.dup(root)
    try:
        for name in folders:
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
                else:
                    made = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    try:
                        os.fchmod(made, 0o700)
                        if owner is not None:
                            os.fchown(made, *owner)
                    finally:
                        os.close(made)
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def is_tmpfs(path: Path) -> bool:
    """Whether `path` (resolved) lies on a tmpfs or ramfs, by the mount table of this process."""
    target = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = target == point or target.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return False
    return kind in ("tmpfs", "ramfs")


def prepare_store_base(base: Path) -> None:
    """Create the store base (0711: the task's user may pass through to its own launch folder, nobody may list
    it). A base that is a symlink, not ours, or writable by others is refused: in a shared tmpfs such as /dev/shm
    another user could have made it first."""
    base.mkdir(mode=0o711, parents=False, exist_ok=True)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SecretFileRefused(f"the secret store {str(base)!r} is not a folder of this Worker's alone")
    os.chmod(base, 0o711, follow_symlinks=False)  # noqa: S103  traversable, not listable: see above


def write_files(
    run_dir: Path,
    delivery: FileDelivery,
    owner: tuple[int, int] | None,
    store: Path | None = None,
) -> tuple[SecretFile, ...]:
    """Make every file of `delivery` at its path in `run_dir`, its bytes in `store` (a new folder on a tmpfs)
    when given (see the module docstring); the files with their identities. `owner`: the task's (uid, gid) when
    it is not the Worker's own. Refuses (SecretFileRefused) or fails (OSError, or what `identified` raises)
    having removed whatever it made."""
    files = delivery.files
    for f in files:
        _segments(f.path)
        if f.path not in delivery.values:
            raise SecretFileRefused(f"secret file {f.path!r} has no value")
    root = os.open(run_dir, _DIR_FLAGS)
    made: list[SecretFile] = []
    fds: list[int] = []
    held = -1
    try:
        try:
            if store is not None:
                prepare_store_base(store.parent)
                held = _open_folders(os.open(store.parent, _DIR_FLAGS), [store.name], create=True, owner=owner,
                                     close_root=True)  # fmt: skip
            home = root if held < 0 else held
            for f in files:
                fd = os.open(f.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=home)  # fmt: skip
                fds.append(fd)
                st = os.fstat(fd)
                made.append(SecretFile(f.path, f.temp, st.st_dev, st.st_ino))
                os.fchmod(fd, 0o600)
            delivery.identified(tuple(made))  # journaled before any value exists on disk
            for f, fd in zip(made, fds, strict=True):
                view = memoryview(delivery.values[f.path])
                while view:
                    view = view[os.write(fd, view) :]
                if owner is not None:
                    os.fchown(fd, *owner)
                *folders, name = _segments(f.path)
                try:
                    parent = _open_folders(root, folders, create=True, owner=owner)
                    try:
                        if store is None:
                            os.link(f.temp, name, src_dir_fd=root, dst_dir_fd=parent, follow_symlinks=False)
                        else:
                            os.symlink(str(store / f.temp), name, dir_fd=parent)
                            if owner is not None:
                                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
                    finally:
                        os.close(parent)
                except OSError as error:
                    raise _refused(f.path, error) from None
            if store is None:
                for f in made:
                    os.unlink(f.temp, dir_fd=root)
        finally:
            for fd in fds:
                os.close(fd)
            if held >= 0:
                os.close(held)
    except BaseException:
        _remove(root, made, store)
        raise
    finally:
        os.close(root)
    return tuple(made)


def remove_files(run_dir: str | None, files: Sequence[SecretFile], store: str | None = None) -> tuple[SecretFile, ...]:
    """Remove what a launch made of `files` in `run_dir` and `store` and nothing else (the module docstring); the
    files that could not be removed now (a file system fault: try again later). Never raises."""
    if run_dir is None or not files:
        return ()
    try:
        root = os.open(run_dir, _DIR_FLAGS)
    except OSError as error:
        # Gone, or no longer a real folder (nothing of ours can be found through a symlink): the paths are gone.
        if error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return tuple(files)
        root = -1
    try:
        return _remove(root, files, None if store is None else Path(store))
    finally:
        if root >= 0:
            os.close(root)


def _remove(root: int, files: Sequence[SecretFile], store: Path | None) -> tuple[SecretFile, ...]:
    """Remove the paths in the Run's directory (`root`, -1 when it is gone), then the stored files and folder."""
    try:
        held = -1 if store is None else os.open(store, _DIR_FLAGS)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return tuple(files)
        held = -1  # gone (a reboot empties a tmpfs), or not a folder we made: nothing of ours in it
    left: list[SecretFile] = []
    try:
        for f in files:
            try:
                if root >= 0:
                    _unlink_path(root, f, store)
                if store is None and root >= 0:
                    _unlink(root, f.temp, f, by_name=True)
                elif held >= 0:
                    _unlink(held, f.temp, f, by_name=True)
            except OSError:
                left.append(f)
        if store is not None and held >= 0 and not left:
            with contextlib.suppress(OSError):
                os.rmdir(store)
    finally:
        if held >= 0:
            os.close(held)
    return tuple(left)


def _unlink_path(root: int, f: SecretFile, store: Path | None) -> None:
    """Unlink `f`'s path in the Run's directory while it is ours: our symlink into `store`, or our file."""
    try:
        *folders, name = _segments(f.path)
        parent = _open_folders(root, folders, create=False, owner=None)
    except (SecretFileRefused, FileNotFoundError, NotADirectoryError):
        return  # not where we made it (or never made): nothing of ours there
    except OSError as error:
        if error.errno == errno.ELOOP:
            return
        raise
    try:
        if store is None:
            _unlink(parent, name, f, by_name=False)
            return
        try:
            ours = os.readlink(name, dir_fd=parent) == str(store / f.temp)
        except OSError as error:
            if error.errno in (errno.ENOENT, errno.EINVAL):
                return  # gone, or not a symlink: not ours
            raise
        if ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)
    finally:
        os.close(parent)


def _unlink(folder: int, name: str, f: SecretFile, *, by_name: bool) -> None:
    """Unlink `name` in `folder` when it is ours: a regular file of `f`'s identity, or (`by_name`, a temporary
    name) any regular file when the identity was never journaled."""
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    ours = (st.st_dev, st.st_ino) == (f.dev, f.ino) if f.dev is not None else by_name
    if ours:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)
