#!/usr/bin/env python3
"""measure.py - run a command, report its wall time and peak summed PSS.

    bench/measure.py [--label L] -- CMD ARGS...

Samples /proc/PID/smaps_rollup of the command and all its descendants every
20 ms and reports the largest sum (PSS counts shared pages once across the
processes that share them, so it is the honest total for a multi-process
job). The command's own output passes through unchanged; the measurement is
one line on stderr:  measure: label=L wall_s=… peak_pss_mib=… rc=…
"""
import os
import subprocess
import sys
import time


def children_of():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
            ppid = int(s[s.rindex(")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError):
            pass
    return kids


def tree(root):
    kids = children_of()
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    args = sys.argv[1:]
    label = "run"
    if args[:1] == ["--label"]:
        label, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    t0 = time.monotonic()
    env = dict(os.environ, DDPC_BENCH_T0=repr(time.time()))
    p = subprocess.Popen(args, env=env)
    peak = 0
    while p.poll() is None:
        peak = max(peak, sum(pss_kib(q) for q in tree(p.pid)))
        time.sleep(0.02)
    wall = time.monotonic() - t0
    print(f"measure: label={label} wall_s={wall:.3f} peak_pss_mib={peak / 1024:.1f} "
          f"rc={p.returncode}", file=sys.stderr)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
