#!/usr/bin/env python3
"""Numbers for the bench scripts (bench/*.sh), standard library only.

As a module (report code in the scripts runs with bench/ on its path: `bench_py` in
bench/lib.sh): medians, paired ratios (the geometric mean of per-round ratios with a
95% interval and min-max), JSON and JSON lines result files, the rates in a `gust bench
--json` result, CPU time and request counts of processes, markdown tables.

As a command:
  stats.py median [X ...]        the median of the numbers (arguments, else stdin)
  stats.py paired [A B ...]      per-round pairs (arguments, else "a b" lines on stdin):
                                 prints the geometric mean of a/b, then min and max
  stats.py rates [--target T] [--format F] [--sep S]
                                 the phases of a `gust bench --json` result on stdin, each
                                 as F (default "{rate}": str of the median rate) with the
                                 fields phase and rate, joined by S (default " ")
  stats.py record FILE K=V K:=JSON ...
                                 appends a JSON line to FILE: K=V a string, K:=JSON any
                                 JSON value (a number, an object, a whole result)
  stats.py results NAME [SUFFIX] bench/results/NAME-YYYYMMDD-HHMM SUFFIX (UTC; .json)
"""

import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import NamedTuple


# --- statistics ------------------------------------------------------------------


def median(xs):
    """The median (the mean of the two middle values of an even count)."""
    xs = list(xs)
    if not xs:
        raise ValueError("median of no values")
    return statistics.median(xs)


def geomean(xs):
    xs = list(xs)
    return math.exp(statistics.fmean(math.log(x) for x in xs))


class Paired(NamedTuple):
    """Per-round ratios a/b and what the scripts report of them."""

    ratios: list
    gm: float  # geometric mean of the ratios
    lo: float  # 95% interval of the geometric mean: exp(mean(log) -+ 2 standard errors)
    hi: float
    min: float
    max: float
    median: float  # median of the ratios


def paired(a, b):
    """Ratios a[i]/b[i] of values measured in the same round i."""
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError(f"paired: {len(a)} and {len(b)} values")
    ratios = [x / y for x, y in zip(a, b)]
    logs = [math.log(r) for r in ratios]
    m = statistics.fmean(logs)
    se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
    return Paired(ratios, math.exp(m), math.exp(m - 2 * se), math.exp(m + 2 * se), min(ratios), max(ratios),
                  statistics.median(ratios))


def number(s):
    """An int if s is one, else a float."""
    try:
        return int(s)
    except ValueError:
        return float(s)


# --- result files ----------------------------------------------------------------


def results_path(name, suffix=".json", when=None):
    """bench/results/NAME-YYYYMMDD-HHMM SUFFIX, UTC (as bench_result in lib.sh)."""
    return os.path.join("bench", "results", f"{name}-{time.strftime('%Y%m%d-%H%M', time.gmtime(when))}{suffix}")


def read_jsonl(path):
    """The rows of a JSON lines file (blank lines skipped)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def append_jsonl(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def read_json(path):
    with open(path) as f:
        return json.load(f)


# --- `gust bench --json` results --------------------------------------------------


def targets(phase):
    """The targets measured in a phase (gust, preload, posix:DIR...), in the result's order."""
    return [k for k in phase if k != "phase" and not k.startswith("ratio")]


def rate(phase, target=None):
    """A target's median rate in a phase (default: the first target)."""
    return phase[target if target is not None else targets(phase)[0]]["median_rate"]


def local_rate(phase, path=None):
    """The local file system's median rate (`--baseline DIR`, or a posix: target): the
    target posix:PATH, or without PATH the first posix: target."""
    key = f"posix:{path}" if path is not None else next(k for k in phase if k.startswith("posix:"))
    return phase[key]["median_rate"]


def phase_rates(result, target=None):
    """{phase: median rate of the target} of one result."""
    return {ph["phase"]: rate(ph, target) for ph in result["phases"]}


# --- processes -------------------------------------------------------------------


def proc_cpu_seconds(pids):
    """User + system CPU seconds of the processes (threads that exited included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def gust_requests(gust, hosts):
    """Requests the instance's daemons served so far (`gust status`: one row per daemon,
    id host address pid state requests ...). The call itself costs one per daemon."""
    out = subprocess.run([gust, "status", "--hosts-file", hosts], capture_output=True, text=True, check=True).stdout
    return sum(int(l.split()[5]) for l in out.splitlines() if l.split()[:1] and l.split()[0].isdigit())


# --- tables ----------------------------------------------------------------------


def md_header(*columns, left=1):
    """Prints a markdown table's header: the first LEFT columns left-aligned, the rest
    right-aligned (numbers)."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * left + "---:|" * (len(columns) - left))


# --- command line ----------------------------------------------------------------


def _values(args):
    return args if args else sys.stdin.read().split()


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("As a command:\n", 1)[1], end="")
        return 0 if argv else 2
    cmd, args = argv[0], argv[1:]
    if cmd == "median":
        print(median(number(x) for x in _values(args)))
    elif cmd == "paired":
        v = [number(x) for x in _values(args)]
        if len(v) % 2:
            raise SystemExit("paired: an odd count of values")
        p = paired(v[0::2], v[1::2])
        print(p.gm, p.min, p.max)
    elif cmd == "rates":
        opts = {"--target": None, "--format": "{rate}", "--sep": " "}
        while args:
            if args[0] not in opts or len(args) < 2:
                raise SystemExit(f"rates: unknown option {args[0]}")
            opts[args[0]] = args[1]
            args = args[2:]
        result = json.load(sys.stdin)
        print(opts["--sep"].join(opts["--format"].format(phase=ph["phase"], rate=rate(ph, opts["--target"]))
                                 for ph in result["phases"]))
    elif cmd == "record":
        if not args:
            raise SystemExit("record: FILE K=V K:=JSON ...")
        row = {}
        for kv in args[1:]:
            k, sep, v = kv.partition("=")
            if not sep:
                raise SystemExit(f"record: {kv}: not K=V or K:=JSON")
            if k.endswith(":"):
                row[k[:-1]] = json.loads(v)
            else:
                row[k] = v
        append_jsonl(args[0], row)
    elif cmd == "results":
        print(results_path(args[0], *args[1:2]))
    else:
        raise SystemExit(f"stats.py: unknown command {cmd} (median, paired, rates, record, results)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
