"""The sweep runner under faults: killed mid-sweep, two runners, corrupt results (issue 22)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cfl_lightning import results
from cfl_lightning.__main__ import main
from cfl_lightning.sweep import guard, load_sweep, lock, plan_sweep
from tests.helpers import CI_LIMIT_S, alive, survivors, wait_for

# A fit that starts a grandchild in a session of its own (as W&B's service does) and records
# both pids; it sleeps unless a file "fast" exists beside it.
FIT = """\
import json, os, subprocess, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
here = os.path.dirname(os.path.abspath(__file__))
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                          start_new_session=True)
with open(os.path.join(here, "calls.txt"), "a") as f:
    f.write(json.dumps({"x": args["x"], "pids": [os.getpid(), helper.pid]}) + "\\n")
if args["x"] in ("3", "4") and not os.path.exists(os.path.join(here, "fast")):
    time.sleep(120)
out = os.path.join(args["trainer.default_root_dir"], "csv", "version_0")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"kl_total": 0.5, "x": args["x"]}, f)
helper.kill()
"""


def _sweep(tmp_path, values=(1, 2, 3, 4)):
    (tmp_path / "fit.py").write_text(FIT)
    path = tmp_path / "grid.yaml"
    path.write_text(
        f"method: grid\nprogram: fit.py\nparameters:\n  x:\n    values: {list(values)}\n"
        "command:\n  - ${env}\n  - ${interpreter}\n  - ${program}\n  - ${args}\n"
    )
    return path


def _calls(tmp_path):
    path = tmp_path / "calls.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _start_runner(tmp_path, path, out, *extra):
    return subprocess.Popen(
        [sys.executable, "-m", "cfl_lightning", "sweep", str(path), "--output", str(out),
         "--parallel", "2", *extra],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )


def _one_valid_results_per_point(out):
    points = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("x-")]
    for point in points:
        found = sorted(point.rglob("results.json"))
        assert len(found) == 1 and results.results_problem(found[0]) is None, point
    return len(points)


@pytest.mark.slow  # a runner process of its own (its imports take seconds on a loaded CPU)
def test_runner_killed_mid_sweep_takes_its_runs_along_and_a_rerun_finishes(tmp_path, capsys):
    path, out = _sweep(tmp_path), tmp_path / "out"
    proc = _start_runner(tmp_path, path, out)
    wait_for(lambda: len(_calls(tmp_path)) == 4, proc)  # x=1, 2 done; x=3, 4 training
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    pids = [pid for call in _calls(tmp_path) for pid in call["pids"]]
    assert survivors(pids) == [], "runs (or their children) outlived the runner"
    assert len(list(out.rglob("results.json"))) == 2
    (tmp_path / "fast").touch()
    os.chdir(tmp_path)
    try:
        code = main(["sweep", str(path), "--output", str(out)])
    finally:
        os.chdir(Path(__file__).parent)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "2 done, 2 skipped (already done), 0 failed of 4 points" in err
    assert sorted(c["x"] for c in _calls(tmp_path)[4:]) == ["3", "4"]  # only those ran again
    assert _one_valid_results_per_point(out) == 4
    for x in ("3", "4"):  # the killed attempt's log was kept, aside
        (point,) = out.glob(f"x-{x}_*")
        assert (point / ".attempts" / "1" / "run.log").is_file()
        earlier = (point / ".attempts" / "1" / "run.log").read_text()
        assert "# guard: the sweep runner is gone" in earlier


def test_a_second_runner_refuses_while_the_directory_is_locked(tmp_path, capsys, monkeypatch):
    path, out = _sweep(tmp_path, values=(1,)), tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    with lock.lock_output(out):  # what a running runner holds
        code = main(["sweep", str(path), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"is in use by another sweep runner (pid {os.getpid()} on {socket.gethostname()}" in err
    assert _calls(tmp_path) == []
    assert main(["sweep", str(path), "--output", str(out)]) == 0  # negative control: unlocked
    assert len(_calls(tmp_path)) == 1


@pytest.mark.slow  # a runner process of its own
def test_a_second_runner_on_the_same_directory_refuses_naming_the_first(tmp_path, capsys):
    path, out = _sweep(tmp_path, values=(3,)), tmp_path / "out"
    proc = _start_runner(tmp_path, path, out)
    try:
        wait_for(lambda: len(_calls(tmp_path)) == 1, proc)
        code = main(["sweep", str(path), "--output", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert f"is in use by another sweep runner (pid {proc.pid} on {socket.gethostname()}" in err
        assert len(_calls(tmp_path)) == 1  # nothing ran twice
        # negative control: a dry run takes no lock
        assert main(["sweep", str(path), "--output", str(out), "--dry-run"]) == 0
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=CI_LIMIT_S)
    assert proc.returncode == 130


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_a_lock_file_left_by_a_dead_runner_does_not_block(tmp_path):
    (tmp_path / lock.LOCK_NAME).write_text(
        json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "started": "then"})
    )
    started, lines = time.monotonic(), []
    with lock.lock_output(tmp_path, wait=60, say=lines.append):
        holder = json.loads((tmp_path / lock.LOCK_NAME).read_text())
    # taken at once: it never waited (nothing said), nor for long (half its wait: load-proof)
    assert holder["pid"] == os.getpid() and lines == [] and time.monotonic() - started < 30
    assert not (tmp_path / lock.LOCK_NAME).exists()  # removed by the runner that held it
    with lock.lock_output(tmp_path):  # and locked afresh
        assert (tmp_path / lock.LOCK_NAME).is_file()


HOLDER = """\
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, json.dumps({"pid": int(sys.argv[2]), "host": sys.argv[3], "started": "x"}).encode())
print("locked", flush=True)
time.sleep(float(sys.argv[4]))
"""


def _hold(tmp_path, pid, seconds):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / lock.LOCK_NAME), str(pid),
         socket.gethostname(), str(seconds)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout.readline() == "locked\n"
    return proc


def test_the_runs_of_a_dead_runner_are_waited_for(tmp_path):
    holder = _hold(tmp_path, _dead_pid(), 1.0)  # the recorded runner is dead, its runs stopping
    lines = []
    with lock.lock_output(tmp_path, wait=CI_LIMIT_S, say=lines.append):  # until they stop
        pass
    holder.wait()
    assert len(lines) == 1 and "waiting for the runs of a stopped sweep runner" in lines[0]


def test_runs_that_do_not_stop_and_a_live_runner_are_refused(tmp_path):
    holder = _hold(tmp_path, _dead_pid(), 30)
    try:
        with pytest.raises(lock.SweepLocked, match="still locked by the runs of a stopped"):
            with lock.lock_output(tmp_path, wait=0.3):
                pass
    finally:
        holder.kill()
        holder.wait()
    holder = _hold(tmp_path, os.getpid(), 60)  # negative control: a live runner, refused at once
    try:
        started = time.monotonic()
        named = rf"in use by another sweep runner \(pid {os.getpid()} on"
        with pytest.raises(lock.SweepLocked, match=named):
            with lock.lock_output(tmp_path, wait=60):
                pass
        # refused while the holder still held the lock, and long before its wait (load-proof)
        assert holder.poll() is None and time.monotonic() - started < 30
    finally:
        holder.kill()
        holder.wait()


CORRUPT = {
    "empty": "",
    "empty-object": "{}",
    "truncated": '{"kl_total": 0.1, "kl": {"state": {',
    "nan": '{"kl_total": NaN}',
    "infinite": '{"kl_total": Infinity}',
    "null": '{"kl_total": null}',
    "string": '{"kl_total": "0.1"}',
    "bool": '{"kl_total": true}',
    "list": "[0.1]",
}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_invalid_results_do_not_count(tmp_path, name):
    path = tmp_path / "results.json"
    path.write_text(CORRUPT[name])
    assert results.results_problem(path) is not None
    assert results.find_results(tmp_path) is None
    path.write_text('{"kl_total": 0.0}')  # negative control
    assert results.results_problem(path) is None and results.find_results(tmp_path) == path


def test_resume_over_corrupt_results_redoes_those_points_only(tmp_path, capsys, monkeypatch):
    values = list(range(1, len(CORRUPT) + 2))
    path, out = _sweep(tmp_path, values=values), tmp_path / "out"
    points = plan_sweep(load_sweep(path), out)
    contents = [*CORRUPT.values(), '{"kl_total": 0.125}']  # the last point is valid
    for point, text in zip(points, contents):
        target = point.directory / "csv" / "version_0" / "results.json"
        target.parent.mkdir(parents=True)
        target.write_text(text)
        (point.directory / "params.json").write_text(json.dumps(point.params))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fast").touch()
    code = main(["sweep", str(path), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"{len(CORRUPT)} done, 1 skipped (already done), 0 failed" in err
    assert sorted(int(c["x"]) for c in _calls(tmp_path)) == values[:-1]
    assert _one_valid_results_per_point(out) == len(values)
    for point, text in zip(points, contents[:-1]):  # each corrupt file kept aside, renamed
        aside = point.directory / ".attempts" / "1" / "csv" / "version_0" / "results.json.invalid"
        assert aside.read_text() == text
        assert (point.directory / "csv" / "version_0" / "results.json").is_file()
    kept = points[-1].directory / "csv" / "version_0" / "results.json"
    assert kept.read_text() == contents[-1] and not (points[-1].directory / ".attempts").exists()


# --------------------------------------------------------------------------- the guard

STUBBORN = """\
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"],
    start_new_session=True)
print(os.getpid(), child.pid, flush=True)
time.sleep(120 if sys.argv[1] == "wait" else 0)
"""


def _guarded(tmp_path, mode, grace=0.5):
    """An intermediate 'runner' that starts a guard and prints the run's pids."""
    runner = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-I', {str(Path(guard.__file__))!r}, "
        f"str(__import__('os').getpid()), '{grace}', '--', sys.executable, '-c', {STUBBORN!r}, "
        f"{mode!r}])\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2
    return proc, pids


def test_guard_stops_the_run_and_its_stubborn_children_when_the_runner_is_killed(tmp_path):
    proc, pids = _guarded(tmp_path, "wait")
    assert all(alive(p) for p in pids)
    proc.kill()
    proc.wait()
    assert survivors(pids) == []


def test_guard_stops_a_finished_runs_leftovers_and_control_without_guard(tmp_path):
    proc, pids = _guarded(tmp_path, "exit")
    try:
        assert survivors(pids) == []  # the run exited; its stray was stopped
    finally:
        proc.kill()
        proc.wait()
    # negative control: without the guard the stray outlives its parent
    bare = subprocess.Popen(
        [sys.executable, "-c", STUBBORN, "exit"], stdout=subprocess.PIPE, text=True
    )
    stray = int(bare.stdout.readline().split()[1])
    bare.wait()
    try:
        assert survivors([stray], timeout=1) == [stray]
    finally:
        os.kill(stray, signal.SIGKILL)
        bare.stdout.close()


def test_guard_exit_status_is_the_runs(tmp_path):
    for code in (0, 3):
        run = subprocess.run(
            [sys.executable, "-I", guard.__file__, str(os.getpid()), "1", "--",
             sys.executable, "-c", f"import sys; sys.exit({code})"],
        )
        assert run.returncode == code
    run = subprocess.run([sys.executable, "-I", guard.__file__, "1", "--", "x"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "usage" in run.stderr


def test_alive_is_false_for_a_process_that_ends_between_open_and_read(monkeypatch):
    """The race CI met: ``/proc/PID/stat`` opened while the process ran, read after it was
    reaped, raises ProcessLookupError; ``alive`` answers False instead of failing the test."""
    import tests.helpers as helpers

    proc = subprocess.Popen(["sleep", "30"])
    handle = open(f"/proc/{proc.pid}/stat", "rb")
    proc.kill()
    proc.wait()
    monkeypatch.setattr(helpers, "open", lambda *args, **kwargs: handle, raising=False)
    assert helpers.alive(proc.pid) is False
