"""Publishing a KDTR file atomically (FORMAT.md §2): temp file, fsync, rename, fsync the folder.

A writer's temp file is `.kdtr-<random>.tmp` in the target's folder, created with mode 0666 so that the
umask (and a default ACL) applies as it does to any new file, and held under an exclusive `flock` for
the writer's whole life. The kernel drops that lock when the writer dies however it dies, so the next
`save` into the same folder can tell a killed writer's leftovers (lock free) from a live writer's temp
file (lock held) and removes only the former. Ages are never used: a slow writer is not a dead one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Mapping

import numpy as np

from .errors import Code, KdtrError
from .format import DEFAULT_ALIGN_LOG2
from .writer import dumps

TEMP_PREFIX, TEMP_SUFFIX = ".kdtr-", ".tmp"


def _same_file(fd: int, name: str, dir_fd: int) -> bool:
    """Whether `name` in the folder still names the file open as `fd`."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def remove_dead_temps(folder: str | os.PathLike) -> list[str]:
    """Remove the temp files of writers that died in `folder`; returns their names.

    A temp file is dead when its flock can be taken; it is removed while that lock is held and only if
    its name still names the locked file. Anything that is not a regular file, or cannot be opened, is
    left alone (opened without blocking and without following links, so a FIFO or a link named like a
    temp file cannot hang or redirect the cleanup).
    """
    removed = []
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in os.listdir(dfd):
            if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                continue  # gone meanwhile, a link, or not ours to read
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live writer holds it
                if _same_file(fd, name, dfd):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=dfd)
                        removed.append(name)
            finally:
                os.close(fd)
    finally:
        os.close(dfd)
    return removed


def _create_locked_temp(folder: str) -> tuple[int, str]:
    """A new temp file in `folder`, open for writing and flock-ed, that no cleanup can remove.

    Between creating the file and locking it a concurrent cleanup may see it unlocked and remove it; the
    name is then checked again under the lock and a fresh one taken if it was.
    """
    while True:
        tmp = os.path.join(folder, f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            st = os.stat(tmp, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        mine = os.fstat(fd)
        if st is not None and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
            return fd, tmp
        os.close(fd)


def save(
    path: str | os.PathLike,
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
    *,
    align_log2: int = DEFAULT_ALIGN_LOG2,
    _before_publish=None,
) -> None:
    """Publish atomically: temp file in the same folder, fsync, rename, fsync the folder.

    A crash at any point leaves the old file or the new one at `path`, never a torn one; an existing
    file is never modified in place (readers holding an mmap of it keep valid pages). The new file's mode
    is 0666 less the umask. Temp files of writers killed earlier in the same folder are removed first.
    Raises KdtrError only: the reader's code (kdtr.writer.dumps) for content no reader would open, E90 IO
    naming the path for anything the file system refuses (a folder that is missing or not writable, a
    directory at `path`, a full disk), with the OSError as its cause; nothing is left behind either way.
    `_before_publish` is a test hook called after the temp file is durable and before the rename.
    """
    data = dumps(tensors, metadata, align_log2=align_log2)
    path = os.fspath(path)
    try:
        _publish(path, data, _before_publish)
    except OSError as e:
        raise KdtrError(Code.IO, f"{path}: {e.strerror or e} (errno {e.errno})") from e


def _publish(path: str, data: bytes, _before_publish) -> None:
    """save()'s file-system part: temp file, fsync, rename, fsync the folder (OSError on failure)."""
    if os.path.isdir(path):  # refused before anything is written (os.replace would refuse only at the end)
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    folder = os.path.dirname(os.path.abspath(path))
    remove_dead_temps(folder)
    fd, tmp = _create_locked_temp(folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        if _before_publish is not None:
            _before_publish(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)  # drops the lock, after the rename: the temp name is gone by then
    dfd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
