"""Copies between the local OBS (directories, :func:`.wire.obs_path`) and a user program's channel
directories: data copied in before the program starts, output copied out while it runs and after.

Platform-neutral in all but name (paths in, paths out, no wire format): a shared engine helper for
channel directories can take these over.
"""

from __future__ import annotations

import os
import shutil


def copy_in(source: str, target: str) -> None:
    """Copy an OBS directory (a prefix) or object (a file) into the directory ``target``, which is
    created. Nothing at ``source``: ``target`` stays empty, as for an empty prefix."""
    os.makedirs(target, exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True)
    elif os.path.isfile(source):
        shutil.copy2(source, os.path.join(target, os.path.basename(source)))


def copy_files_out(local_dir: str, remote_dir: str, paths: list[str]) -> None:
    """Copy the files ``paths`` (absolute, under ``local_dir``) to the same relative paths under
    ``remote_dir``; a file removed since it was listed is skipped."""
    for path in paths:
        if not os.path.isfile(path):
            continue
        target = os.path.join(remote_dir, os.path.relpath(path, local_dir))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target)


def copy_tree_out(local_dir: str, remote_dir: str) -> None:
    """Copy everything under ``local_dir`` to ``remote_dir`` (files replaced, none deleted)."""
    if os.path.isdir(local_dir):
        shutil.copytree(local_dir, remote_dir, dirs_exist_ok=True)
