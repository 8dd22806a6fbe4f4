"""Peak resident memory from /proc. Standard library only: the peer scripts import it under their
own interpreters, where nothing of the project is installed."""

from __future__ import annotations


def peak_rss_mb(pid: int | str = "self") -> float:
    """``VmHWM`` of a process, 0.0 once it is gone. Not ``ru_maxrss``: Linux carries the parent's
    peak across fork + exec into the child's ru_maxrss, which would report the parent's memory."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # the process has just exited
        pass
    return 0.0
