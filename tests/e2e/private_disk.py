"""A small disk of its own for a service process: a tmpfs mounted in a private mount namespace.

:meth:`PrivateDisk.mount` starts a holder process, ``unshare --user --map-root-user --mount``
(no privilege needed where unprivileged user namespaces are allowed; root falls back to a plain
``unshare --mount``), which mounts a tmpfs of the given size on a folder and sleeps. Only
processes in its namespaces see that tmpfs: a service runs there through :attr:`wrapper`
(``nsenter``), and the test reaches the files through ``/proc/<holder>/root``
(:meth:`outside`). The disk lives as long as the holder, so a service can restart on it; nothing
is mounted where the rest of the machine would see it.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.processes import ROOT

MOUNT_TIMEOUT_S = 10.0
NAMESPACES = (
    ("--user", "--map-root-user", "--mount"),  # unprivileged
    ("--mount",),  # root without user namespaces
)


class PrivateDiskUnavailable(RuntimeError):
    """Neither kind of namespace can be made here (or ``unshare``/``nsenter`` are missing)."""


@dataclass
class PrivateDisk:
    """A tmpfs on ``mount_point`` (a path as the service sees it) held by ``holder``."""

    mount_point: Path
    holder: subprocess.Popen
    user_namespace: bool

    @classmethod
    def mount(cls, mount_point: Path, size_bytes: int) -> PrivateDisk:
        """Mount it (``mount_point`` is created); :class:`PrivateDiskUnavailable` saying why
        not, with each way's error."""
        if shutil.which("unshare") is None or shutil.which("nsenter") is None:
            raise PrivateDiskUnavailable("unshare and nsenter (util-linux) are not installed")
        mount_point.mkdir(parents=True, exist_ok=True)
        script = f'mount -t tmpfs -o size={size_bytes} fractal-test "$0" && echo mounted && '
        script += "exec sleep 3600"
        errors = []
        for flags in NAMESPACES:
            holder = subprocess.Popen(
                ["unshare", *flags, "sh", "-c", script, str(mount_point)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert holder.stdout is not None and holder.stderr is not None
            ready, _, _ = select.select([holder.stdout], [], [], MOUNT_TIMEOUT_S)
            if ready and holder.stdout.readline() == b"mounted\n":
                return cls(mount_point, holder, user_namespace="--user" in flags)
            holder.kill()
            errors.append(f"unshare {' '.join(flags)}: {holder.communicate()[1].decode().strip()}")
        raise PrivateDiskUnavailable("cannot mount a private tmpfs: " + "; ".join(errors))

    @property
    def wrapper(self) -> list[str]:
        """The command prefix that runs a program in the disk's namespaces, in the checkout
        (``nsenter`` execs it: signals reach the program itself)."""
        command = ["nsenter", f"--target={self.holder.pid}", "--mount", f"--wd={ROOT}"]
        if self.user_namespace:
            command[2:2] = ["--user", "--preserve-credentials"]
        return command

    def outside(self, path: Path) -> Path:
        """Where this process reaches ``path`` as the namespace sees it."""
        return Path(f"/proc/{self.holder.pid}/root") / path.relative_to("/")

    def free_bytes(self) -> int:
        stats = os.statvfs(self.outside(self.mount_point))
        return stats.f_bavail * stats.f_frsize

    def fill(self, name: str, leave_bytes: int) -> Path:
        """A file ``name`` on the disk that leaves about ``leave_bytes`` free; its path (as
        :meth:`outside` gives it: unlink it to free the space)."""
        path = self.outside(self.mount_point / name)
        with path.open("wb", buffering=0) as filler:
            try:
                filler.write(b"\0" * max(0, self.free_bytes() - leave_bytes))
            except OSError as full:  # a process on the disk took room meanwhile
                if full.errno != errno.ENOSPC:
                    raise
        shortfall = leave_bytes - self.free_bytes()
        if shortfall > 0:  # give that room back from the filler
            os.truncate(path, max(0, path.stat().st_size - shortfall))
        return path

    def unmount(self) -> None:
        """End the holder: the tmpfs and everything on it go with the last process inside."""
        self.holder.kill()
        self.holder.communicate()
