#!/bin/bash
# Benchmark: `make test` (and `make demo`) of a fresh clone, as a newcomer runs them (issue 26).
# Clones this repository's HEAD into DIR, prints the commit, the load average and a fixed pure-Python
# workload's CPU seconds (how fast the shared host runs just then), runs `/usr/bin/time -v make test`
# and `make demo` there, and prints their wall and CPU times, the suite's summary and `git status`.
# The logs go beside DIR (DIR.test.log, DIR.time.log, DIR.demo.log), so that the clone stays clean.
# Usage: bench/fresh_clone.sh DIR   (DIR must not exist; `../shared` beside it makes the tau tests run)
set -u
dir=${1:?usage: bench/fresh_clone.sh DIR}
[ -e "$dir" ] && { echo "$dir exists: give a new directory" >&2; exit 2; }
git clone -q "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" "$dir" && cd "$dir" || exit 2
log=../$(basename "$dir")
reference() { python3.11 -c "import time; t = time.process_time(); sum(i * i for i in range(3 * 10**7)); print(f'reference workload: {time.process_time() - t:.2f} s of CPU')"; }
echo "commit $(git rev-parse --short HEAD)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
reference
/usr/bin/time -v make test > "$log.test.log" 2> "$log.time.log"
echo "make test: exit $?"
grep -E "Elapsed|User time|System time" "$log.time.log"
grep -E "passed|failed" "$log.test.log" | tail -1
/usr/bin/time -f "make demo: %e s wall, %U + %S s of CPU" make demo > "$log.demo.log" 2>&1
echo "make demo: exit $?; $(tail -1 "$log.demo.log")"
echo "git status --porcelain: [$(git status --porcelain)]"
reference
