#!/usr/bin/env python3
"""Adds to fuzz/corpus/TARGET the few small inputs of fuzz/work/TARGET that cover the most new edges.

`cargo fuzz cmin` keeps every input that adds a feature: thousands after a few minutes, too
many to replay on every CI run. This keeps the committed corpus small instead: libFuzzer's
merge (edges only, no hit counters) records which edges each scratch input reaches beyond
the committed corpus, then a greedy pass picks the inputs with the most new edges per byte.

    RUSTC_BOOTSTRAP=1 cargo fuzz build                    # once, from the repository root
    python3 fuzz/merge_seeds.py envelope --rounds 3 --per-round 40

Each round re-measures against the corpus as grown by the previous one. Picked files keep
libFuzzer's hash names. Nothing is removed.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import tempfile

FUZZ = pathlib.Path(__file__).resolve().parent
BIN = FUZZ / "target" / "x86_64-unknown-linux-gnu" / "release"


def edges_by_file(target):
    """Runs a merge of work/ into a copy of corpus/; returns (paths, first, {index: edges})."""
    with tempfile.TemporaryDirectory() as tmp:
        into = pathlib.Path(tmp) / "into"
        shutil.copytree(FUZZ / "corpus" / target, into)
        control = pathlib.Path(tmp) / "control"
        env = dict(os.environ, ASAN_OPTIONS="detect_odr_violation=0")
        subprocess.run(
            [BIN / target, "-merge=1", "-use_counters=0", "-use_cmp=0",
             f"-merge_control_file={control}", into, FUZZ / "work" / target],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lines = control.read_text().split("\n")
    n, first = int(lines[0]), int(lines[1])
    paths = lines[2:2 + n]
    cov = {}
    for line in lines[2 + n:]:
        if line.startswith("COV "):
            parts = line.split()
            cov[int(parts[1])] = set(map(int, parts[2:]))
    return paths, first, cov


def pick(target, count):
    paths, first, cov = edges_by_file(target)
    # The control file lists each edge once, under the first file that reached it; the
    # committed corpus is run first, so what the others list is new.
    base = set().union(*(cov.get(i, set()) for i in range(first)))
    candidates = [i for i in range(first, len(paths)) if cov.get(i)]
    picked, covered = [], set()
    while len(picked) < count:
        best, best_score = None, 0.0
        for i in candidates:
            gain = len(cov[i] - base - covered)
            if gain < 2:
                continue
            score = gain / (os.path.getsize(paths[i]) + 64)
            if score > best_score:
                best, best_score = i, score
        if best is None:
            break
        picked.append(best)
        covered |= cov[best]
    for i in picked:
        shutil.copy(paths[i], FUZZ / "corpus" / target / os.path.basename(paths[i]))
    print(f"{target}: {len(base)} edges committed, +{len(picked)} files reaching {len(covered)} more")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("target", choices=["envelope", "card", "policy"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=40)
    args = ap.parse_args()
    for _ in range(args.rounds):
        pick(args.target, args.per_round)


if __name__ == "__main__":
    main()
