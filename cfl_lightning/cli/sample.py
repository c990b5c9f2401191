"""``python -m cfl_lightning sample``: write a corpus as JSON Lines.

Example::

    python -m cfl_lightning sample --automaton A.json --num-strings 500 --seed 0 \\
        --intervention exact --event state:odd --count 1200 --output corpus.jsonl

Each output line is ``{"symbols": [...], "count": n}`` (``count`` only when ``--event`` is given).
With ``--tokens T`` instead of ``--num-strings`` (token-matched, ``exact`` or ``at_least``), the
number of strings is chosen so that the corpus holds ``T`` symbols within 1%
(:mod:`~cfl_lightning.sampling.token_matched`); a JSON line on standard output reports it.
``--output -`` writes the lines to standard output (the messages go to standard error). Before
sampling, the output path and the flags are checked, then the event's names against the file's
declared names (before the automaton is built: a pushdown automaton's fixed point is the slow
step), then the time and memory needed are estimated: a request that does not fit, or whose
estimate is far beyond its size, is refused in one line with the estimate and the event's
natural count (``--force`` runs the latter anyway). Work estimated above 10 s is announced.
Imports only the pure core: no Lightning, no wandb.
"""

from __future__ import annotations

import sys

from cfl_lightning.cli.common import STDOUT, ArgumentParser, command_args, run_command, seed_type

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning sample"
ANNOUNCE_SECONDS = 10.0  # work estimated above this gets one line on stderr first


def build_parser() -> ArgumentParser:
    from cfl_lightning.kinds.events import event_forms
    from cfl_lightning.kinds.interventions import INTERVENTION_KINDS, INTERVENTIONS
    from cfl_lightning.sampling.request import METHODS

    parser = ArgumentParser(
        prog=PROG, description="Sample a corpus from an automaton (JSON Lines)."
    )
    parser.add_argument("--automaton", required=True, help="automaton JSON file")
    parser.add_argument("--num-strings", type=int, help="number of strings K (or --tokens)")
    parser.add_argument(
        "--tokens", type=int, default=None,
        help="instead of --num-strings (exact, at_least): the corpus's total of symbols T "
        "(EOS excluded, within 1%%); K is chosen and reported on standard output",
    )
    parser.add_argument("--seed", type=seed_type, required=True, help="random seed (0..2**64-1)")
    parser.add_argument(
        "--output",
        required=True,
        help="output .jsonl path (written atomically; a pipe is streamed; - for standard output)",
    )
    parser.add_argument(
        "--intervention",
        choices=tuple(INTERVENTIONS),
        default="none",
        help="; ".join(f"{k.name}: {k.description}" for k in INTERVENTION_KINDS).replace("%", "%%"),
    )
    parser.add_argument("--event", help=f"{event_forms()} (counts are recorded)")
    parser.add_argument(
        "--count",
        type=int,
        help="; ".join(f"{k.name}: {k.count_help}" for k in INTERVENTION_KINDS if k.takes_count),
    )
    parser.add_argument("--method", choices=METHODS, default="binning")
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu or cuda")
    parser.add_argument(
        "--max-tries", type=int, default=None,
        help="corpora to try: --method rejection (default 10000), or --tokens (default 1000)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="run a request whose estimated time or memory is far beyond its size (refused "
        "otherwise, before any work, with the estimate)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "sample")
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.num_strings is None) == (args.tokens is None):
        parser.error("give one of --num-strings K and --tokens T (then K is chosen)")
    if args.tokens is not None and args.method != "binning":
        parser.error("--tokens samples with --method binning (rejection is not offered)")

    def body() -> int:
        from cfl_lightning.io import check_output
        from cfl_lightning.sampling.request import check_request
        from cfl_lightning.sampling.sampler import draw

        to_stdout = args.output == STDOUT
        if not to_stdout:
            check_output(args.output, [args.automaton], what="--output")
        plain = _load_checked(args)  # cheap checks first, then the automaton
        pfsa = plain.automaton
        if args.tokens is not None:
            return _token_matched(args, pfsa, plain.device, to_stdout)
        request = check_request(  # warns on extreme lengths, refuses what won't fit or runs away
            pfsa, plain.num_strings, seed=plain.seed, intervention=plain.intervention,
            method=plain.method, device=plain.device, max_tries=plain.max_tries, write=True,
            what="this corpus", force=args.force, insist="--force",
        )
        _announce(request.estimate)
        corpus = draw(pfsa, request, progress=True)
        estimate = request.estimate
        where = "standard output" if to_stdout else args.output
        if sys.stderr.isatty() and estimate is not None and estimate.expected_tokens > 1e6:
            sys.stderr.write(f"writing {len(corpus):,} strings to {where} ...\n")
        if to_stdout and not _stream(corpus.jsonl_lines(pfsa.alphabet)):
            sys.stderr.write("standard output was closed by its reader; stopped writing\n")
            return 0
        if not to_stdout:
            corpus.write_jsonl(args.output, pfsa.alphabet)
        extra = f", {corpus.total_count} occurrences of {args.event}" if args.event else ""
        sys.stderr.write(f"wrote {len(corpus)} strings{extra} to {where}\n")
        return 0

    return run_command(body, PROG)


class _Checked:
    """The arguments checked without the automaton, then the automaton."""

    def __init__(self, plain, automaton) -> None:  # noqa: ANN001 - a SamplingRequest
        self.num_strings, self.seed, self.intervention = (
            plain.num_strings, plain.seed, plain.intervention
        )
        self.method, self.device, self.max_tries = plain.method, plain.device, plain.max_tries
        self.automaton = automaton


def _load_checked(args) -> _Checked:  # noqa: ANN001 - the parsed arguments
    """Check the flags and the event's names against the file's declared names, then build the
    automaton (for a pushdown automaton this solves its fixed point: the slow step)."""
    from cfl_lightning.automata.declared import (
        check_event_names,
        check_load_memory,
        declared_names,
    )
    from cfl_lightning.automata.loading import load_automaton, read_automaton_json
    from cfl_lightning.sampling.estimates import format_seconds
    from cfl_lightning.sampling.request import check_arguments

    plain = check_arguments(  # with --tokens T, K <= T is not yet chosen: T stands in for it
        args.num_strings if args.tokens is None else max(1, args.tokens), seed=args.seed, intervention=args.intervention, event=args.event,
        count=args.count, method=args.method, device=args.device, max_tries=args.max_tries,
        omit_count="omit --count",
    )
    data, where, kind = read_automaton_json(args.automaton)
    declared = declared_names(data, kind)
    if declared is not None:
        if plain.intervention.event is not None:
            check_event_names(declared, plain.intervention.event)
        cost = check_load_memory(declared, f"{where}: ")  # refused before it is announced
        if cost is not None and cost.seconds > ANNOUNCE_SECONDS:
            sys.stderr.write(f"{where}: {cost.what}: ~{format_seconds(cost.seconds)} estimated\n")
    return _Checked(plain, load_automaton(data, where=where))


def _announce(estimate) -> None:  # noqa: ANN001 - a MemoryEstimate
    """One line before long sampling: what it is estimated to take."""
    from cfl_lightning.sampling.estimates import format_seconds

    if estimate is not None and estimate.seconds is not None and (
        estimate.seconds > ANNOUNCE_SECONDS
    ):
        sys.stderr.write(
            f"sampling: ~{format_seconds(estimate.seconds)} and {estimate.describe()} estimated\n"
        )


def _token_matched(args, pfsa, device, to_stdout: bool) -> int:  # noqa: ANN001 - parsed args
    """``--tokens``: K chosen, the corpus written, ``{"num_strings", "tokens", ...}`` reported."""
    import json

    from cfl_lightning.sampling.token_matched import sample_token_matched

    result = sample_token_matched(
        pfsa, args.tokens, seed=args.seed, intervention=args.intervention, event=args.event,
        count=args.count, device=device, max_tries=args.max_tries, progress=True, write=True,
        what="this corpus",
    )
    corpus = result.corpus
    if to_stdout and not _stream(corpus.jsonl_lines(pfsa.alphabet)):
        return 0
    if not to_stdout:
        corpus.write_jsonl(args.output, pfsa.alphabet)
    report = {"num_strings": result.num_strings, "tokens": result.total,
              "target_tokens": args.tokens, "count": corpus.total_count, "tries": result.tries}
    line = json.dumps(report)
    where = "standard output" if to_stdout else args.output
    sys.stderr.write(
        f"wrote {result.num_strings} strings ({result.total} symbols, --tokens {args.tokens} "
        f"within 1%), {corpus.total_count} occurrences of {args.event} to {where}\n"
    )
    (sys.stderr if to_stdout else sys.stdout).write(line + "\n")
    return 0


def _stream(lines) -> bool:  # noqa: ANN001 - an iterator of str
    """Write ``lines`` to standard output; whether all were written. A reader that stops early
    (``| head``) ends the stream quietly, as for any Unix filter."""
    import os

    try:
        sys.stdout.writelines(lines)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return False
    return True
