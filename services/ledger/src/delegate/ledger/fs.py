"""Which filesystem holds the runtime directory: WAL needs shared memory and POSIX locks
that network and FUSE filesystems do not give reliably, so there we use a rollback journal."""

import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

MOUNTINFO = Path("/proc/self/mountinfo")

# Filesystems where SQLite's WAL (an mmap'd -shm file shared between connections) is unsafe.
NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "virtiofs", "ceph", "glusterfs", "lustre",
    "afs", "gpfs", "beegfs", "davfs", "ncpfs", "sshfs", "fuse", "fuseblk",
})


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_fstype(path: Path, mountinfo: str | None = None) -> str | None:
    """The filesystem type of the mount that holds ``path`` (longest mount-point prefix wins)."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    target = _resolved(path)
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mount_point = _unescape(fields[4])
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= best[0]):
            best = (len(mount_point), right.split()[0])
    return best[1] if best else None


def is_network_fs(fstype: str | None) -> bool:
    if not fstype:
        return False
    return fstype in NETWORK_FS or fstype.startswith("fuse.")


def default_journal_mode(path: Path, mountinfo: str | None = None) -> str:
    """WAL, or DELETE when ``path`` is on a network (or FUSE) filesystem."""
    fstype = mount_fstype(path, mountinfo)
    if is_network_fs(fstype):
        log.warning("%s is on a %s filesystem: using the DELETE journal (WAL is unsafe there)", path, fstype)
        return "DELETE"
    return "WAL"


def _resolved(path: Path) -> str:
    """Symlinks resolved on the part that exists; the runtime dir may not be created yet."""
    path = path.absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    real = Path(os.path.realpath(existing)) / path.relative_to(existing)
    return str(real).rstrip("/") or "/"
