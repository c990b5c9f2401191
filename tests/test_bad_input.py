"""Round two of bad input: every light-weight command and the Python API.

For each case: no traceback; a refusal exits non-zero with at most 5 lines on stderr naming the
problem; nothing that was in the directory is damaged or replaced; no temporary files are left;
and (in a child process under an address-space limit) peak memory stays bounded. Output paths
are tested with named pipes, symlinks and device nodes made in a temporary directory, never
with /dev/null itself. fit/validate/test are covered by tests/test_train_cli.py.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from cfl_lightning import PFSA, CflError, OutputError, SizeError, sample_corpus
from cfl_lightning.analysis import draw as draw_module
from cfl_lightning import sweep as sw
from cfl_lightning.io import Interrupted, atomic_open, check_output, signals_interrupt
from cfl_lightning.sampling import budget
from tests.helpers import CI_LIMIT_S, PARITY_JSON, exit_status

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}


# --------------------------------------------------------------------------- helpers


def automaton(**changes) -> dict:
    data = copy.deepcopy(PARITY_JSON)
    data.update(changes)
    return data


def renamed(kind: str, old: str, new: str) -> dict:
    """The parity automaton with one state or symbol renamed everywhere."""
    text = json.dumps(PARITY_JSON)
    key = "source|target|initial|state" if kind == "state" else "symbol"
    data = json.loads(text)
    if kind == "state":
        data["states"] = [new if s == old else s for s in data["states"]]
        data["initial"] = new if data["initial"] == old else data["initial"]
        data["final"] = {(new if k == old else k): v for k, v in data["final"].items()}
        for arc in data["transitions"]:
            for field in ("source", "target"):
                arc[field] = new if arc[field] == old else arc[field]
    else:
        data["alphabet"] = [new if s == old else s for s in data["alphabet"]]
        for arc in data["transitions"]:
            arc["symbol"] = new if arc["symbol"] == old else arc["symbol"]
    assert key
    return data


LONG = {  # one state, expected length 1e5 symbols
    "alphabet": ["a"],
    "states": ["s"],
    "initial": "s",
    "final": {"s": 1e-5},
    "transitions": [{"source": "s", "symbol": "a", "target": "s", "weight": 1 - 1e-5}],
}

SWEEP = (
    "method: grid\nprogram: fake.py\nparameters:\n  model:\n    values: [a, b]\n"
    "{extra}command:\n  - ${{env}}\n  - ${{interpreter}}\n  - ${{program}}\n  - ${{args}}\n"
)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind and content (files), target (links) or device."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", path.read_bytes())
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir",)
        else:
            out[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


def temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(".*.tmp")]


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A directory with a valid automaton, bad inputs, a sweep, links and an existing output."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2G")  # refusals independent of the host
    (tmp_path / "a.json").write_text(json.dumps(PARITY_JSON))
    (tmp_path / "colon.json").write_text(json.dumps(renamed("state", "odd", "o:d")))
    for name in ("EOS", "BOS", "PAD"):
        (tmp_path / f"{name}.json").write_text(json.dumps(renamed("symbol", "a", name)))
    (tmp_path / "empty.json").write_text(json.dumps(renamed("state", "odd", "")))
    (tmp_path / "long.json").write_text(json.dumps(LONG))
    (tmp_path / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe" * 20)
    (tmp_path / "latin1.json").write_bytes('{"states": ["\xe9"]}'.encode("latin-1"))
    (tmp_path / "keep.jsonl").write_text("precious\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inside").write_text("x")
    (tmp_path / "link-to-a.json").symlink_to("a.json")
    (tmp_path / "big.yaml").write_text(
        SWEEP.format(
            extra="  data.seed:\n    distribution: int_uniform\n    min: 0\n    max: 1000000000\n"
        )
    )
    return tmp_path


def run_main(argv):
    return exit_status(argv)


SAMPLE = ["sample", "--automaton", "a.json", "--num-strings", "5", "--seed", "0"]
OUT = ["--output", "new.jsonl"]

# (id, argv, expected text on stderr); every case exits 2 and leaves the directory as it was
REFUSALS = [
    # output paths
    ("sample-output-is-input", SAMPLE + ["--output", "a.json"], "is the input file"),
    ("sample-output-link-to-input", SAMPLE + ["--output", "link-to-a.json"], "is the input file"),
    ("sample-input-link-output-real", ["sample", "--automaton", "link-to-a.json",
     "--num-strings", "5", "--seed", "0", "--output", "a.json"], "is the input file"),
    ("sample-output-directory", SAMPLE + ["--output", "dir"], "is a directory"),
    ("sample-output-under-a-file", SAMPLE + ["--output", "keep.jsonl/x.jsonl"], "not a directory"),
    ("automaton-output-directory", ["automaton", "parity", "--output", "dir"], "is a directory"),
    ("draw-output-is-input", ["draw", "a.json", "--output", "a.json", "--format", "svg"],
     "is the input file"),
    ("draw-output-directory", ["draw", "a.json", "--output", "dir", "--format", "svg"],
     "is a directory"),
    # names
    ("sample-state-with-colon", ["sample", "--automaton", "colon.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "'o:d' contains ':'"),
    ("sample-symbol-EOS", ["sample", "--automaton", "EOS.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "symbol name 'EOS' is reserved"),
    ("sample-symbol-BOS", ["sample", "--automaton", "BOS.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "symbol name 'BOS' is reserved"),
    ("sample-symbol-PAD", ["sample", "--automaton", "PAD.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "symbol name 'PAD' is reserved"),
    ("sample-empty-state-name", ["sample", "--automaton", "empty.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "empty state name"),
    ("draw-state-with-colon", ["draw", "colon.json", "--output", "c.svg"], "'o:d' contains ':'"),
    ("draw-symbol-EOS", ["draw", "EOS.json", "--output", "c.svg"], "'EOS' is reserved"),
    # seeds, devices, probabilities
    ("sample-seed-negative", SAMPLE[:-2] + ["--seed", "-1"] + OUT, "0..2**64-1"),
    ("sample-seed-2**64", SAMPLE[:-2] + ["--seed", str(2**64)] + OUT, "0..2**64-1"),
    ("sample-seed-float", SAMPLE[:-2] + ["--seed", "1.5"] + OUT, "integer seed"),
    ("sample-device-gpu", SAMPLE + OUT + ["--device", "gpu"], "unknown device 'gpu'"),
    ("sample-device-empty", SAMPLE + OUT + ["--device", ""], "unknown device ''"),
    ("sample-device-tpu", SAMPLE + OUT + ["--device", "xla"], "unsupported device"),
    ("automaton-topology-seed-negative", ["automaton", "random", "--topology-seed", "-1",
     "--output", "r.json"], "0..2**64-1"),
    ("automaton-weight-seed-2**64", ["automaton", "random", "--weight-seed", str(2**64),
     "--output", "r.json"], "0..2**64-1"),
    ("automaton-parity-weight-seed-negative", ["automaton", "parity", "--weight-seed", "-5",
     "--output", "r.json"], "0..2**64-1"),
    ("automaton-keep-prob-above-1", ["automaton", "random", "--keep-prob", "1.5",
     "--output", "r.json"], "--keep-prob: a probability must be in [0, 1]"),
    ("automaton-accept-prob-negative", ["automaton", "random", "--accept-prob", "-0.1",
     "--output", "r.json"], "--accept-prob: a probability must be in [0, 1]"),
    ("automaton-keep-prob-nan", ["automaton", "random", "--keep-prob", "nan",
     "--output", "r.json"], "--keep-prob"),
    ("automaton-concentration-zero", ["automaton", "random", "--concentration", "0",
     "--output", "r.json"], "concentration must be positive"),
    ("automaton-final-weight-above-1", ["automaton", "random", "--final-weight", "1.5",
     "--output", "r.json"], "final_weight must be in (0, 1]"),
    ("automaton-parity-eta-nan", ["automaton", "parity", "--eta", "nan", "--output", "r.json"],
     "eta must be in [0, 1]"),
    ("automaton-parity-final-weight-ignored", ["automaton", "parity", "--final-weight", "0.2",
     "--output", "r.json"], "only with --weight-seed"),
    # input files
    ("sample-binary-automaton", ["sample", "--automaton", "binary.json", "--num-strings", "5",
     "--seed", "0"] + OUT, "not a text file"),
    ("draw-binary-input", ["draw", "binary.json", "--output", "b.svg"], "not a text file"),
    ("draw-latin1-input", ["draw", "latin1.json", "--output", "b.svg"], "not UTF-8"),
    ("draw-directory-input", ["draw", "dir", "--output", "b.svg"], "is a directory"),
    ("sweep-binary-file", ["sweep", "binary.json", "--output", "sw"], "not a text file"),
    ("sweep-directory", ["sweep", "dir", "--output", "sw"], "is a directory"),
    ("sweep-output-is-a-file", ["sweep", "big.yaml", "--output", "keep.jsonl", "--max-points",
     str(10**10), "--dry-run"], "not a directory"),
    # sizes
    ("sample-num-strings-1e12", SAMPLE[:3] + ["--num-strings", str(10**12), "--seed", "0"] + OUT,
     "needs ~"),
    ("sample-count-1e10", SAMPLE + OUT + ["--intervention", "exact", "--event", "state:odd",
     "--count", str(10**10)], "needs ~"),
    ("sample-long-strings", ["sample", "--automaton", "long.json", "--num-strings", "100000",
     "--seed", "0"] + OUT, "expected string length is 99,999 symbols"),
    ("automaton-too-many-states", ["automaton", "random", "--states", "1000000", "--symbols",
     "100", "--output", "r.json"], "1,000,000 states"),
    ("sweep-huge-grid", ["sweep", "big.yaml", "--output", "sw", "--dry-run", "--limit", "2"],
     "parameter 'data.seed' alone has 1,000,000,001 values"),
    ("sweep-huge-grid-run", ["sweep", "big.yaml", "--output", "sw", "--limit", "1"],
     "more than the limit of 100,000"),
    # the dispatcher
    ("unknown-command", ["smaple", "--seed", "0"], "unknown command 'smaple'"),
]


@pytest.mark.parametrize("case_id,argv,message", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals_are_one_clear_line_and_write_nothing(work, capsys, case_id, argv, message):
    before = snapshot(work)
    code = run_main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = err.splitlines()
    assert 1 <= len(lines) <= 5 and "Traceback" not in err, err
    assert message in err, err
    assert "error:" in lines[-1], err
    assert snapshot(work) == before  # nothing damaged, replaced, created or left behind
    assert not temp_files(work)


# --------------------------------------------------------------------------- output paths


def test_symlinked_output_is_written_through_and_stays_a_link(work, capsys):
    (work / "real.jsonl").write_text("old\n")
    (work / "out.jsonl").symlink_to("real.jsonl")
    (work / "dangling.jsonl").symlink_to("made/by/link.jsonl")
    assert run_main(SAMPLE + ["--output", "out.jsonl"]) == 0
    assert run_main(SAMPLE + ["--output", "dangling.jsonl"]) == 0
    capsys.readouterr()
    assert os.readlink(work / "out.jsonl") == "real.jsonl"
    assert len((work / "real.jsonl").read_text().splitlines()) == 5
    assert os.readlink(work / "dangling.jsonl") == "made/by/link.jsonl"
    assert len((work / "made/by/link.jsonl").read_text().splitlines()) == 5
    assert not temp_files(work)


def test_named_pipe_output_is_streamed(work, capsys):
    fifo = work / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert run_main(SAMPLE + ["--output", str(fifo)]) == 0, capsys.readouterr().err
    reader.join(timeout=CI_LIMIT_S)
    lines = got[0].decode().splitlines()
    assert len(lines) == 5 and all("symbols" in json.loads(line) for line in lines)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still a pipe, not replaced by a file
    assert not temp_files(work)


def test_character_device_output_is_streamed_not_replaced(work, capsys):
    node = work / "null-like"
    try:  # a /dev/null twin in the temporary directory (never /dev/null itself)
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as err:
        pytest.skip(f"cannot create a device node here: {err}")
    assert run_main(SAMPLE + ["--output", str(node)]) == 0, capsys.readouterr().err
    st = node.lstat()
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert not temp_files(work)


def test_endless_input_device_is_refused_with_bounded_memory(work, monkeypatch, capsys):
    node = work / "zero-like"
    try:
        os.mknod(node, stat.S_IFCHR | 0o444, os.makedev(1, 5))  # a /dev/zero twin
    except (PermissionError, OSError) as err:
        pytest.skip(f"cannot create a device node here: {err}")
    monkeypatch.setattr("cfl_lightning.io.MAX_INPUT_BYTES", 1 << 20)  # 256 MB by default
    code = run_main(["sample", "--automaton", str(node), "--num-strings", "5", "--seed", "0"] + OUT)
    assert code == 2 and "input larger than 1,048,576 bytes" in capsys.readouterr().err


def test_missing_output_directories_are_created_and_removed_on_failure(work, capsys):
    assert run_main(SAMPLE + ["--output", "new/deeper/c.jsonl"]) == 0
    assert (work / "new/deeper/c.jsonl").is_file()
    with pytest.raises(RuntimeError):
        with atomic_open(work / "other/deeper/c.jsonl") as handle:
            handle.write("half")
            raise RuntimeError("midway")
    assert not (work / "other").exists() and not temp_files(work)


def test_an_existing_file_keeps_its_mode(work, capsys):
    target = work / "keep.jsonl"
    target.chmod(0o640)
    assert run_main(SAMPLE + ["--output", "keep.jsonl"]) == 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert len(target.read_text().splitlines()) == 5


def test_sigterm_inside_atomic_open_removes_the_temp_file(work):
    target = work / "keep.jsonl"
    with pytest.raises(Interrupted) as info, signals_interrupt():
        with atomic_open(target) as handle:
            handle.write("partial")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
    assert info.value.signum == signal.SIGTERM
    assert target.read_text() == "precious\n" and not temp_files(work)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 128 + 15), (signal.SIGINT, 130)])
def test_signal_during_a_long_write_leaves_no_temp_file(tmp_path, sig, code):
    (tmp_path / "a.json").write_text(json.dumps(PARITY_JSON))
    target = tmp_path / "out.jsonl"
    target.write_text("precious\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfl_lightning", "sample", "--automaton", "a.json",
         "--num-strings", "400000", "--seed", "0", "--output", "out.jsonl", "--device", "cpu"],
        cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, text=True,
        # a job started with `&` by a non-interactive shell inherits SIGINT ignored (and so would
        # this child): give it the default dispositions an interactive user's process has
        preexec_fn=_default_signals,
    )
    deadline = time.monotonic() + CI_LIMIT_S  # the child's imports may take minutes under load
    while not temp_files(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if not temp_files(tmp_path):
        proc.kill()
        pytest.fail(f"the write was not seen (exit {proc.wait()}): {proc.stderr.read()[-500:]}")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=CI_LIMIT_S)
    assert proc.returncode == code, err
    assert "interrupted" in err and "Traceback" not in err and len(err.splitlines()) <= 5
    assert target.read_text() == "precious\n" and not temp_files(tmp_path)


@pytest.mark.slow  # a real fit process (imports Lightning: ~6 CPU-s); in process: test_train_cli_errors
def test_fit_bad_input_is_one_line_in_a_real_process(tmp_path):
    """Lightning's ``Seed set to 0`` came before the refusal (the seed is set before the data
    module validates its arguments): the process's whole stderr is the one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "fit", "--config",
         str(REPO / "configs" / "random_topology.yaml"), "--data.num_strings=-5",
         f"--trainer.default_root_dir={tmp_path / 'run'}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=CI_LIMIT_S,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "python -m cfl_lightning fit: error: num_strings must be an integer >= 1, got -5"
    ]
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- draw without dot


def test_draw_without_dot_writes_nothing_and_says_how_to_get_the_source(work, capsys,
                                                                     monkeypatch):
    """Issue 42: the README says a failing command writes nothing; draw without graphviz wrote
    NAME.dot. Now it writes nothing, and its one line names the .dot output that needs no
    graphviz."""
    monkeypatch.setattr(draw_module.shutil, "which", lambda name: None)
    code = run_main(["draw", "a.json", "--output", "figure.png"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "apt-get install graphviz" in err and "nothing written" in err
    assert "--output figure.dot" in err and "dot -Tpng" in err
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("figure")) == []
    # what the line points at: the source, written without graphviz
    assert run_main(["draw", "a.json", "--output", "figure.dot"]) == 0
    source = (work / "figure.dot").read_text()
    assert source.startswith("digraph") and "s_odd" in source


# --------------------------------------------------------------------------- memory, in a child


CHILD = r"""
import io, json, resource, sys, contextlib
resource.setrlimit(resource.RLIMIT_AS, (__LIMIT__, __LIMIT__))
from cfl_lightning.__main__ import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:  # a traceback would have escaped
        code = "escaped " + type(exc).__name__
    results.append([code, err.getvalue()])
print(json.dumps({"results": results,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


@pytest.mark.slow
def test_size_refusals_keep_peak_memory_bounded(work):
    """Without the memory override: the host's own limits; the child may map at most 6 GB."""
    argvs = [c[1] for c in REFUSALS if c[0] in (
        "sample-num-strings-1e12", "sample-count-1e10", "automaton-too-many-states",
        "sweep-huge-grid", "sweep-huge-grid-run",
    )]
    argvs.append(["sweep", "big.yaml", "--output", "sw", "--dry-run", "--limit", "2",
                  "--max-points", str(10**12)])  # allowed: two points printed, lazily
    env = {k: v for k, v in ENV.items() if k != "CFL_LIGHTNING_MEMORY_LIMIT"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.replace("__LIMIT__", str(6 * 1024**3)), json.dumps(argvs)],
        cwd=work, env=env, capture_output=True, text=True, timeout=CI_LIMIT_S,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    for argv, (code, err) in zip(argvs[:-1], report["results"]):
        assert code == 2 and len(err.splitlines()) <= 5 and "Traceback" not in err, (argv, err)
    code, err = report["results"][-1]
    assert code == 0 and err.count("--data.seed=0") == 2 and "2000000000 left for later" in err
    assert report["maxrss_kb"] < 1_500_000  # refused before allocating
    assert not (work / "sw").exists() and not (work / "r.json").exists()


# --------------------------------------------------------------------------- sweeps


GRIDS = [
    {
        "b": {"values": [3, 1, 3, 2]},
        "a": {"value": "c"},
        "A.z": {"values": [True, 1, 1.0, "1", None]},
    },
    {
        "x": {"distribution": "int_uniform", "min": -2, "max": 3},
        "m": {"values": [[1, 2], {"k": 1}]},
    },
    {"q": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.3}, "data.n": {"values": [5]}},
    {"z.y": {"value": 1}, "z.a": {"values": ["null", "x", "null"]}, "y": {"values": [2, 1]}},
]


@pytest.mark.parametrize("params", GRIDS, ids=[f"grid{i}" for i in range(len(GRIDS))])
def test_lazy_grid_equals_the_sweeps_engine(params):
    config = {"method": "grid", "parameters": params}
    engine = sw.grid._import_sweeps()
    reference = [
        {k: v["value"] for k, v in run.config.items()}
        for run in engine.next_runs(copy.deepcopy(config), [], n=10_000)
        if run is not None
    ]
    ours = sw.expand_grid(config)
    assert ours == reference  # values
    assert [list(p) for p in ours] == [list(p) for p in reference]  # key order
    assert sw.grid_size(config) == len(reference)
    assert list(itertools.islice(sw.iter_grid(config), 2)) == reference[:2]
    assert all(sw.grid_contains(config, p) for p in reference)
    assert not sw.grid_contains(config, {**reference[0], "extra": 1})


def test_negative_control_engine_order_is_not_insertion_order():
    """A lazy product in the file's order (not the engine's sorted order) would be caught."""
    config = {"method": "grid", "parameters": {"b": {"values": [1, 2]}, "a": {"values": [3, 4]}}}
    naive = [dict(zip(["b", "a"], v)) for v in itertools.product([1, 2], [3, 4])]
    assert naive != sw.expand_grid(config) and sorted(map(str, naive)) != list(
        map(str, sw.expand_grid(config))
    )


def test_grid_is_counted_not_enumerated_and_refused_by_parameter(work):
    config = sw.load_sweep(work / "big.yaml")
    assert sw.grid_size(config) == 2 * 1_000_000_001
    with pytest.raises(sw.SweepError, match="parameter 'data.seed' alone has 1,000,000,001"):
        sw.check_grid_size(config, 1000)
    first = list(itertools.islice(sw.iter_grid(config, max_points=10**12), 3))
    assert [p["data.seed"] for p in first] == [0, 0, 1]


def test_sweep_package_replaced_the_old_modules():
    """Grid planning, the runner and ensemble grouping live in cfl_lightning.sweep alone."""
    from cfl_lightning.sweep import runner

    assert sw.run_sweep is runner.run_sweep and sw.SweepSummary is runner.SweepSummary
    for module in ("analysis/sweeps.py", "runner.py", "ensemble/sweep.py"):
        assert not (REPO / "cfl_lightning" / module).exists(), module


def test_limit_counts_done_points_beyond_the_walk(work, capsys):
    (work / "fake.py").write_text(
        "import json, os, sys\nargs = dict(a[2:].split('=', 1) for a in sys.argv[1:])\n"
        "d = args['trainer.default_root_dir']\nos.makedirs(d, exist_ok=True)\n"
        "open(os.path.join(d, 'results.json'), 'w').write(json.dumps({'kl_total': 0.5}))\n"
    )
    path = work / "small.yaml"
    path.write_text(SWEEP.format(extra="  x:\n    values: [1, 2, 3]\n"))
    points = sw.expand_grid(sw.load_sweep(path))  # (model, x): a1 a2 a3 b1 b2 b3
    assert run_main(["sweep", str(path), "--output", "out", "--limit", "6"]) == 0
    capsys.readouterr()
    for name in ("a", "b"):  # undo a1 and b1: pending a1, then a2 a3 done, b1 pending, b2 b3 done
        done = [
            d for d in (work / "out").iterdir() if f"_{name}_" in f"_{d.name}" and "x-1" in d.name
        ]
        (done[0] / "results.json").unlink()
    assert len(points) == 6
    assert run_main(["sweep", str(path), "--output", "out", "--limit", "1", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "6 points, 4 already done, 1 to run (1 left for later: --limit)" in err, err


# --------------------------------------------------------------------------- the Python API


def test_numpy_integers_are_accepted_for_counts_and_seeds(parity):
    plain = sample_corpus(parity, 40, seed=3, intervention="exact", event="state:odd", count=90)
    numpy = sample_corpus(
        parity, np.int64(40), seed=np.uint64(3), intervention="exact", event="state:odd",
        count=np.int32(90),
    )
    assert torch.equal(plain.tokens, numpy.tokens) and numpy.total_count == 90
    top = sample_corpus(parity, 4, seed=2**64 - 1, intervention="exact", event="state:odd", count=3)
    assert top.total_count == 3  # the largest seed works on every generator


API_REFUSALS = [
    (lambda p: sample_corpus("a.json", 5, seed=0), "expected an automaton"),
    (lambda p: sample_corpus(p, 5, seed=-1), "seed must be in 0..2**64-1"),
    (lambda p: sample_corpus(p, 5, seed=2**64), "seed must be in 0..2**64-1"),
    (lambda p: sample_corpus(p, 5, seed=1.5), "seed must be an integer"),
    (lambda p: sample_corpus(p, 5.0, seed=0), "num_strings must be an integer"),
    (lambda p: sample_corpus(p, True, seed=0), "num_strings must be an integer"),
    (lambda p: sample_corpus(p, 0, seed=0), "num_strings must be a positive integer"),
    (lambda p: sample_corpus(p, 5, seed=0, device="gpu"), "unknown device 'gpu'"),
    (lambda p: sample_corpus(p, 5, seed=0, device=3.5), "unknown device"),
    (lambda p: sample_corpus(p, 5, seed=0, event=7), "event must be text"),
    (lambda p: sample_corpus(p, 5, seed=0, intervention="exact", event="state:odd", count="3"),
     "count must be an integer"),
    (lambda p: sample_corpus(p, 10**13, seed=0), "needs ~"),
    (lambda p: sample_corpus(p, 5, seed=0, intervention="exact", event="state:odd",
                             count=10**11), "needs ~"),
]


@pytest.mark.parametrize("call,message", API_REFUSALS, ids=[m for _, m in API_REFUSALS])
def test_sample_corpus_raises_cfl_errors(parity, monkeypatch, call, message):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2G")
    with pytest.raises(CflError, match=message.replace("*", r"\*").replace("(", r"\(")):
        call(parity)


def test_memory_estimate_api(parity, monkeypatch):
    est = budget.estimate_sampling(parity, 1000)
    assert est.expected_tokens == pytest.approx(1000 * parity.expected_length())
    assert est.bins_bytes == 0 and 0 < est.total < 1_000_000
    exact = budget.estimate_sampling(parity, 1000, intervention="exact", event="state:odd",
                                     count=10**6)
    assert exact.bins_bytes > 10**6 * 4 * 8 and exact.expected_tokens > est.expected_tokens
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "1M")
    with pytest.raises(SizeError, match="more than the 1.0 MB of memory available"):
        budget.check_sampling_memory(parity, 10**5)
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "off")
    budget.check_sampling_memory(parity, 10**9)  # the check can be turned off
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "lots")
    with pytest.raises(SizeError, match="expected bytes such as 4G"):
        budget.check_sampling_memory(parity, 10)


def test_extreme_length_warns(monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "off")
    with pytest.warns(budget.LongStringWarning, match="99,999 symbols"):
        budget.check_sampling_memory(PFSA.from_dict(LONG), 1)


@pytest.mark.parametrize("kind,old,new,message", [
    ("state", "odd", "o:d", "'o:d' contains ':'"),
    ("symbol", "a", "EOS", "'EOS' is reserved"),
    ("symbol", "b", "PAD", "'PAD' is reserved"),
    ("state", "odd", "", "empty state name"),
])
def test_names_rejected_at_load(kind, old, new, message):
    from cfl_lightning import PFSAError

    with pytest.raises(PFSAError, match=message) as info:
        PFSA.from_dict(renamed(kind, old, new), source="f.json")
    assert str(info.value).startswith("f.json: ")


def test_names_allowed_elsewhere():
    """Symbols may contain ':' (the last field of an event); states may be named EOS."""
    data = renamed("symbol", "a", "x:y")
    data = json.loads(json.dumps(data).replace('"init"', '"EOS"'))
    pfsa = PFSA.from_dict(data)
    corpus = sample_corpus(pfsa, 20, seed=0, intervention="exact", event="transition:odd:x:y",
                           count=5)
    assert corpus.total_count == 5


@pytest.mark.parametrize("call,message", [
    (lambda g: g.random_pfsa(5, 2, np.int64(1), np.uint8(2)), None),
    (lambda g: g.random_pfsa(5, 2, -1, 0), "topology seed must be an integer in 0..2\\*\\*64-1"),
    (lambda g: g.random_pfsa(5, 2, 0, 2**64), "weight seed"),
    (lambda g: g.random_pfsa(5, 2, 0, 0, keep_prob=1.5), "keep_prob must be in \\[0, 1\\]"),
    (lambda g: g.random_pfsa(5, 2, 0, 0, accept_prob=float("nan")), "accept_prob"),
    (lambda g: g.random_pfsa(5.5, 2, 0, 0), "num_states must be an integer"),
    (lambda g: g.random_pfsa(5, 2, 0, 0, concentration=-1), "concentration must be positive"),
    (lambda g: g.resampled_parity_starfree_pfsa(-3), "weight seed"),
])
def test_generators_check_their_arguments(call, message):
    from cfl_lightning.automata import generators

    if message is None:
        assert call(generators).num_states == 5
    else:
        with pytest.raises(CflError, match=message):
            call(generators)


def test_decomposed_kl_rejects_probabilities_instead_of_log_probabilities(parity):
    from cfl_lightning import DecomposedKL

    metric = DecomposedKL(parity)
    logits = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0))
    states = torch.zeros(2, 3, dtype=torch.long)
    mask = torch.ones(2, 3, dtype=torch.bool)
    metric.update(torch.log_softmax(logits, -1), states, mask)  # accepted
    metric.update(torch.log_softmax(logits.float(), -1).half().float(), states, mask)
    with pytest.raises(ValueError, match="log_softmax"):
        metric.update(torch.softmax(logits, -1), states, mask)  # probabilities
    with pytest.raises(ValueError, match="log_softmax"):
        metric.update(logits, states, mask)  # raw logits
    padded = torch.log_softmax(logits, -1).clone()
    padded[1, 2] = 5.0  # garbage at a padding position is ignored
    mask[1, 2] = False
    metric.update(padded, states, mask)


def test_check_output_names_the_input(work):
    with pytest.raises(OutputError, match="is the input file"):
        check_output(work / "dir/../a.json", [work / "a.json"])
    assert check_output(work / "fresh.json", [work / "a.json"]) == "file"


def test_ignored_hangup_stays_ignored():
    """Under ``nohup`` (SIGHUP ignored) a command must not start dying on hangup."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
