"""A one-node SLURM cluster on localhost, for the tests and the overhead benchmark.

Debian's ``slurm-wlm`` and ``munge`` (``apt-get install -y slurm-wlm munge``) are started as root
with everything in one folder: a munge key and socket of their own, ``slurm.conf`` (proctrack
``linuxproc``, task plugin ``none``, no accounting, free ports), the controller's state, the
node's spool and both daemons' logs. Clients find it through the environment that
:func:`local_slurm` yields (``SLURM_CONF``). Nothing outside the folder is touched.

:func:`cannot_start` says why a machine cannot start it (not root, a binary missing), so that a
test skips with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BINARIES", "PARTITION", "cannot_start", "local_slurm", "node_line"]

BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "srun", "scancel", "munged",
            "mungekey")
PARTITION = "debug"


def cannot_start() -> str | None:
    """Why this machine cannot start the cluster (None when it can)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a local SLURM cluster needs root (slurmd runs jobs as their user)"
    missing = [name for name in BINARIES if shutil.which(name) is None and not
               Path("/usr/sbin", name).exists()]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install -y slurm-wlm munge)"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_line(cpus: int | None = None) -> tuple[str, str]:
    """``(node name, NodeName=... line)`` from ``slurmd -C`` (``cpus`` overrides its CPUs)."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, check=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("NodeName="))
    fields = dict(item.split("=", 1) for item in line.split())
    if cpus is not None:
        fields.update(CPUs=str(cpus), Boards="1", SocketsPerBoard="1",
                      CoresPerSocket=str(cpus), ThreadsPerCore="1")
    fields.pop("UpTime", None)
    memory = int(fields.get("RealMemory", "1024"))
    fields["RealMemory"] = str(max(memory - 512, 256))
    return fields["NodeName"], " ".join(f"{k}={v}" for k, v in fields.items()) + (
        " NodeAddr=127.0.0.1 State=UNKNOWN"
    )


def _write_conf(root: Path, cpus: int | None) -> tuple[Path, str]:
    name, node = node_line(cpus)
    for sub in ("state", "spool", "log", "run"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = f"""\
ClusterName=cfltest
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root / 'run' / 'munge.sock'}
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}
SlurmdPidFile={root / 'run' / 'slurmd.pid'}
SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
SlurmdLogFile={root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MinJobAge=600
MaxArraySize=10001
MaxJobCount=50000
InactiveLimit=0
{node}
PartitionName={PARTITION} Nodes={name} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
    path = root / "slurm.conf"
    path.write_text(conf, encoding="utf-8")
    return path, name


def _wait(check, seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    tail = ""
    if log is not None and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise RuntimeError(f"local SLURM: {what} within {seconds:g} s\n{tail}")


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def local_slurm(root: str | os.PathLike, *, cpus: int | None = None) -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd under ``root``; yield the clients' environment.

    Args:
        root: an empty folder that holds everything.
        cpus: CPUs to declare for the node (default: what ``slurmd -C`` finds).

    Yields:
        ``os.environ`` plus ``SLURM_CONF`` (pass it to the processes that call ``sbatch``).

    Raises:
        RuntimeError: a daemon did not come up (the message holds its log's last lines).
    """
    root = Path(root).absolute()
    conf, name = _write_conf(root, cpus)
    run = root / "run"
    key = run / "munge.key"
    subprocess.run([_binary("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
    os.chmod(key, 0o600)
    env = dict(os.environ, SLURM_CONF=str(conf))
    processes: list[subprocess.Popen] = []
    try:
        munge = subprocess.Popen(
            [_binary("munged"), "-F", "-f", f"--socket={run / 'munge.sock'}", f"--key-file={key}",
             f"--pid-file={run / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
             f"--seed-file={run / 'munged.seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        processes.append(munge)
        _wait(lambda: (run / "munge.sock").exists(), 20, "munged did not start",
              root / "log" / "munged.log")
        for daemon, log in (("slurmctld", "slurmctld.log"), ("slurmd", "slurmd.log")):
            extra = ["-N", name] if daemon == "slurmd" else ["-i"]
            processes.append(subprocess.Popen(
                [_binary(daemon), "-D", "-f", str(conf), *extra], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            ))

        def idle() -> bool:
            if any(p.poll() is not None for p in processes):
                logs = "".join((root / "log" / name).read_text(errors="replace")[-2000:]
                               for name in ("slurmctld.log", "slurmd.log"))
                raise RuntimeError("local SLURM: a daemon exited: " + logs)
            out = subprocess.run([_binary("sinfo"), "-h", "-o", "%t"], env=env,
                                 capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")

        _wait(idle, 60, "the node did not become idle", root / "log" / "slurmd.log")
        yield env
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([_binary("scancel"), "--full", "-u", "root"], env=env,
                           capture_output=True, timeout=10)
        for process in reversed(processes):
            _stop(process)
