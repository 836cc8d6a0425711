"""How off-policy SAAR's spliced tokens are: the IS distribution of real rollbacks of the demo's model.

Runs `scripts/demo.py` (Qwen2.5-Coder-1.5B on llama.cpp, the bundled problems, SAAR on and off) into an output
directory; the demo scores every SAAR-on trajectory with a rollback afterwards on the same llama.cpp server
(`cleaner.rollout.forced_scoring`) and writes the per-token log ratios to `offpolicy.jsonl`. This prints,
shallow and deep apart, d = log π(token | purified context) − log π(token | context it was sampled in) on
spliced tokens and on the control (model tokens SAAR did not splice), and per rollback the log IS ratio with
the share of rollbacks whose IS ratio is below 0.5 or above 2:

    python benchmarks/offpolicy.py                          # run the demo (1.5B, n = 1) and print the tables
    python benchmarks/offpolicy.py -- -n 2 --model 0.5b     # arguments after -- go to scripts/demo.py
    python benchmarks/offpolicy.py --from demo-output       # only read an existing demo run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(out_dir: Path) -> list:
    from cleaner.analysis.offpolicy import ScoredTrajectory
    from cleaner.trajectory.store import read_records

    path = out_dir / "offpolicy.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found: run the demo into {out_dir} first (without --from)")
    return [ScoredTrajectory.from_dict(row) for row in read_records(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="an existing demo output directory: only print")
    parser.add_argument("--out-dir", type=Path, default=Path("offpolicy-output"), help="where the demo run writes")
    parser.add_argument("demo_args", nargs="*", help="arguments for scripts/demo.py (after --)")
    args = parser.parse_args(argv)
    out_dir = args.source
    if out_dir is None:
        out_dir = args.out_dir
        command = [sys.executable, str(ROOT / "scripts" / "demo.py"), "--out-dir", str(out_dir), *args.demo_args]
        load_before, started = os.getloadavg(), time.perf_counter()
        code = subprocess.call(command)
        print(
            f"$ {' '.join(command[1:])}\nexit code {code}, {time.perf_counter() - started:.0f} s; load average "
            f"(1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
            "after {:.2f}/{:.2f}/{:.2f}".format(*os.getloadavg())
        )
    from cleaner.analysis.offpolicy import offpolicy_markdown

    scored = load(out_dir)
    print(f"\n{out_dir}: {len(scored)} SAAR-on trajectories with spliced tokens\n")
    print(offpolicy_markdown(scored))
    return 0


if __name__ == "__main__":
    sys.exit(main())
