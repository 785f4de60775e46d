#!/usr/bin/env bash
# run_oshmem.sh: builds the C tests in tests/c/ against Open MPI's OSHMEM and runs each at 1, 2
# and 4 PEs, to check the tests themselves (see check.h). Prints one line per run and exits
# non-zero when any build or run failed.
#
#   tests/c/run_oshmem.sh [program ...]     (default: every tests/c/*.c)
#
# Environment: OUT (build folder, default /tmp/fsh-c-tests), NPS (default "1 2 4"),
# TIMEOUT (seconds per run, default 120).
set -u
cd "$(dirname "$0")"
out=${OUT:-/tmp/fsh-c-tests}
nps=${NPS:-1 2 4}
limit=${TIMEOUT:-120}
mkdir -p "$out"
progs=("$@")
[ ${#progs[@]} -eq 0 ] && progs=($(ls *.c | sed 's/\.c$//'))
failed=0
for p in "${progs[@]}"; do
    p=${p%.c}
    if ! oshcc -std=c11 -O1 -Wall -Wextra -o "$out/$p" "$p.c" >"$out/$p.build.log" 2>&1; then
        echo "BUILD FAIL $p (see $out/$p.build.log)"
        failed=1
        continue
    fi
    for n in $nps; do
        log="$out/$p.np$n.log"
        timeout "$limit" oshrun --allow-run-as-root --oversubscribe --mca osc ^rdma -np "$n" \
            "$out/$p" >"$log" 2>&1
        rc=$?
        if [ $rc -eq 0 ]; then
            echo "PASS $p np=$n ($(grep -c '^ok ' "$log") ok lines)"
        else
            echo "FAIL $p np=$n rc=$rc (see $log)"
            failed=1
        fi
    done
done
exit $failed
