"""Moving a user program's files between the local object store and its job directory.

The platforms' object stores (SageMaker's S3, PAI's OSS, ...) are directories on the local
platform (``<data_dir>/s3/<bucket>/<key>``, ``<data_dir>/oss/<bucket>/<key>``): a prefix is a
directory, an object a file. These helpers are what every user-code contract does with them
(:mod:`.programs`): copy a channel or saved checkpoints in before the program starts (the program
gets its own copy, File input mode), copy new checkpoint files out while it runs, copy an output
directory out when it ends. Paths are absolute local paths.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable


def copy_in(source: str, target: str) -> str | None:
    """Copy a prefix (``source`` a directory: its whole tree) or an object (``source`` a file: into
    ``target`` under its own name) into the directory ``target`` (created).

    :returns: the copied file's path for an object, ``target`` for a prefix, ``None`` when nothing
        is at ``source`` (an empty prefix: ``target`` stays an empty directory).
    """
    os.makedirs(target, exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True)
        return target
    if os.path.isfile(source):
        copied = os.path.join(target, os.path.basename(source))
        shutil.copy2(source, copied)
        return copied
    return None


def copy_files_out(local_dir: str, paths: Iterable[str], remote_dir: str) -> list[str]:
    """Copy files under ``local_dir`` (absolute ``paths``, e.g. the checkpoint files that changed)
    to the same relative paths under ``remote_dir``; a path gone since it was listed is skipped.

    :returns: the remote paths written.
    """
    written = []
    for path in paths:
        if not os.path.isfile(path):
            continue
        target = os.path.join(remote_dir, os.path.relpath(path, local_dir))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target)
        written.append(target)
    return written


def copy_tree_out(local_dir: str, remote_dir: str) -> list[str]:
    """Copy every file under ``local_dir`` to the same relative path under ``remote_dir`` (files
    already there and not in ``local_dir`` are kept: an upload, not a mirror).

    :returns: the remote paths written.
    """
    paths = [os.path.join(root, name) for root, _dirs, files in os.walk(local_dir) for name in files]
    return copy_files_out(local_dir, sorted(paths), remote_dir)
