"""Tests of bench/stats.py (scripts/test.sh runs them with pytest)."""

import json
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402

STATS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stats.py")


def cli(*args, stdin=""):
    return subprocess.run([sys.executable, STATS, *args], input=stdin, capture_output=True, text=True, check=True).stdout


def test_median_odd_and_even_counts():
    assert stats.median([5, 1, 3]) == 3
    # An even count: the mean of the two middle values, not the lower one.
    assert stats.median([4, 1, 3, 2]) == 2.5
    assert stats.median(iter([10.0, 30.0])) == 20.0
    with pytest.raises(ValueError):
        stats.median([])


def test_paired_is_the_geometric_mean_of_per_round_ratios():
    # Rounds where a is 2x, 8x and 1x b: ratios 2, 8, 1, geometric mean (16)^(1/3).
    p = stats.paired([2.0, 80.0, 5.0], [1.0, 10.0, 5.0])
    assert p.ratios == [2.0, 8.0, 1.0]
    assert p.gm == pytest.approx(16 ** (1 / 3))
    assert (p.min, p.max, p.median) == (1.0, 8.0, 2.0)
    # Not the quotient of the medians (5/5 = 1).
    assert p.gm != pytest.approx(stats.median([2.0, 80.0, 5.0]) / stats.median([1.0, 10.0, 5.0]))
    # The 95% interval: exp(mean of logs -+ 2 standard errors).
    logs = [math.log(r) for r in p.ratios]
    se = (sum((x - sum(logs) / 3) ** 2 for x in logs) / 2) ** 0.5 / 3 ** 0.5
    assert p.lo == pytest.approx(math.exp(sum(logs) / 3 - 2 * se))
    assert p.hi == pytest.approx(math.exp(sum(logs) / 3 + 2 * se))
    assert p.lo < p.gm < p.hi


def test_paired_of_one_round_has_no_interval():
    p = stats.paired([3.0], [2.0])
    assert p.gm == p.lo == p.hi == pytest.approx(1.5)


def test_paired_needs_as_many_values_on_both_sides():
    with pytest.raises(ValueError):
        stats.paired([1.0, 2.0], [1.0])


def test_jsonl_and_json_round_trip(tmp_path):
    path = tmp_path / "rounds.json"
    rows = [{"round": 1, "way": "new", "result": {"x": 1.5}}, {"round": 2, "way": "old", "result": None}]
    for r in rows:
        stats.append_jsonl(path, r)
    with open(path, "a") as f:
        f.write("\n")  # a blank line is skipped
    assert stats.read_jsonl(path) == rows
    stats.write_json(tmp_path / "r.json", {"phases": [1, 2.5]})
    assert stats.read_json(tmp_path / "r.json") == {"phases": [1, 2.5]}


def test_record_writes_strings_and_json_values(tmp_path):
    path = tmp_path / "out.json"
    result = json.dumps({"phases": [{"phase": "create", "gust": {"median_rate": 10.5}}]}, indent=2)
    cli("record", str(path), "round:=3", "variant=new, --no-excl", "label=7", f"result:={result}")
    cli("record", str(path), "round:=4", "cpu:=null")
    rows = stats.read_jsonl(path)
    assert rows[0] == {"round": 3, "variant": "new, --no-excl", "label": "7",
                       "result": {"phases": [{"phase": "create", "gust": {"median_rate": 10.5}}]}}
    assert rows[1] == {"round": 4, "cpu": None}
    # One line per row, keys in the order given.
    assert open(path).read().splitlines()[0].startswith('{"round": 3, "variant": "new, --no-excl"')


def bench_result():
    # The shape of `gust bench md --target preload --baseline DIR --json`.
    def ph(name, g, l):
        return {"phase": name, "posix:/dev/shm/l": {"median_rate": l}, "preload": {"median_rate": g},
                "ratio": g / l}
    return {"phases": [ph("create", 10.0, 40.0), ph("stat", 30.0, 20.0)], "unit": "ops/s"}


def test_rates_of_a_gust_bench_result():
    r = bench_result()
    assert stats.targets(r["phases"][0]) == ["posix:/dev/shm/l", "preload"]
    assert stats.phase_rates(r, "preload") == {"create": 10.0, "stat": 30.0}
    assert stats.local_rate(r["phases"][0]) == 40.0
    assert stats.local_rate(r["phases"][1], "/dev/shm/l") == 20.0
    out = cli("rates", "--target", "preload", "--format", "{phase}:{rate:.1f}", "--sep", ",", stdin=json.dumps(r))
    assert out == "create:10.0,stat:30.0\n"
    assert cli("rates", stdin=json.dumps(r)) == "40.0 20.0\n"  # the first target


def test_cli_median_and_paired():
    assert cli("median", "3", "1", "2") == "2\n"
    assert cli("median", stdin="1.5\n0.5\n2.5\n3.5\n") == "2.0\n"
    gm, lo, hi = map(float, cli("paired", stdin="2 1\n8 1\n1 1\n").split())
    assert gm == pytest.approx(16 ** (1 / 3)) and (lo, hi) == (1.0, 8.0)


def test_results_path_is_utc_and_named():
    # 2026-11-26 14:11:30 UTC
    assert stats.results_path("grants", when=1795702290) == os.path.join("bench", "results", "grants-20261126-1411.json")
    assert stats.results_path("find", "-1000.txt", when=1795702290).endswith("find-20261126-1411-1000.txt")


# --- bench/lib.sh ------------------------------------------------------------------

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib.sh")


def bash(script, env=None, check=True):
    return subprocess.run(["bash", "-c", f'set -euo pipefail; . "{LIB}"\n{script}'], capture_output=True, text=True,
                          check=check, env={**os.environ, **(env or {})})


def test_lib_round_orders():
    out = bash('bench_abba 1 old new; bench_abba 2 old new; bench_abba 4 a b c; bench_rotate 1 a b c; '
               'bench_rotate 3 a b c; bench_rotate 5 a b c').stdout.splitlines()
    assert out == ["old new", "new old", "c b a", "b c a", "a b c", "c a b"]


def test_lib_elapsed_keeps_nanoseconds():
    out = bash("bench_elapsed 1000000000 3500000007; bench_elapsed 5 5; "
               "t=$(bench_time true); [[ $t =~ ^0\\.[0-9]{9}$ ]] && echo ok").stdout.splitlines()
    assert out == ["2.500000007", "0.000000000", "ok"]


def test_lib_result_name():
    out = bash("bench_result grants; bench_result find -1000.txt").stdout.split()
    assert out[0].startswith("bench/results/grants-") and out[0].endswith(".json") and len(out[0]) == len(
        "bench/results/grants-20261126-1411.json")
    assert out[1].startswith("bench/results/find-") and out[1].endswith("-1000.txt")


@pytest.mark.parametrize("ending", ["exit 0", "exit 3", "kill -TERM $$; sleep 5"])
def test_lib_exit_trap_takes_down_what_the_script_started(tmp_path, ending):
    # A stand-in for gust that logs its commands.
    log = tmp_path / "log"
    fake = tmp_path / "gust"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    r = bash(f'''
base=${{BENCH_DIR}}/gust-test.$$
bench_scratch "$base"
mkdir -p "$base/x"
echo "$base" > {tmp_path}/base
bench_on_exit 'echo hook >> {log}'
bench_start {fake} 4 "$base/a" --replicas 2
bench_start {fake} 2 "$base/b"
bench_stop {fake} "$base/b"
{ending}''', env={"BENCH_DIR": str(tmp_path)}, check=False)
    base = (tmp_path / "base").read_text().strip()
    lines = log.read_text().splitlines()
    assert lines == [f"start --local 4 --rootdir {base}/a --replicas 2", f"start --local 2 --rootdir {base}/b",
                     f"stop --rootdir {base}/b", "hook", f"stop --rootdir {base}/a"]
    assert not os.path.exists(base)
    assert r.returncode == {"exit 0": 0, "exit 3": 3}.get(ending, 143)
