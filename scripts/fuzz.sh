#!/usr/bin/env bash
# Builds glint's libFuzzer targets (clang, AddressSanitizer + UndefinedBehaviorSanitizer, CUDA
# off) into build-fuzz/ and fuzzes each one for a bounded time from its seed corpus
# (tests/fuzz/corpus/<target>/, read only; new inputs go to build-fuzz/fuzz-corpus/<target>/).
# Fails when any target crashes, leaks, times out, exceeds its memory limit or breaks one of its
# invariants; the input is then in build-fuzz/fuzz-findings/: fix the code and add the input to
# tests/fuzz/regressions/<target>/ (the test suite replays it). See docs/fuzzing.md.
#
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]   (default: 60 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(sls_header frame_assembler control_request config clust_file run_file)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
                                         -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1: libFuzzer's usual optimisation level, and a quicker build than -O2.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=None -DCMAKE_C_FLAGS=-O1 \
  -DCMAKE_CXX_FLAGS=-O1 -DGLINT_ENABLE_CUDA=OFF -DGLINT_BUILD_TESTS=OFF -DGLINT_BUILD_FUZZERS=ON \
  "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j "${GLINT_FUZZ_BUILD_JOBS:-$(nproc)}" \
  --target "${targets[@]/#/fuzz_}"

# Scratch files of the file-reading targets go to memory when possible.
if [[ -z "${TMPDIR:-}" && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
mkdir -p build-fuzz/fuzz-findings build-fuzz/fuzz-logs
failed=()
printf '%-16s %10s %8s %8s %8s  %s\n' target executions exec/s cov ft result
for t in "${targets[@]}"; do
  work=build-fuzz/fuzz-corpus/$t
  log=build-fuzz/fuzz-logs/$t.log
  mkdir -p "$work"
  rc=0
  build-fuzz/bin/fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -timeout=30 -print_final_stats=1 -artifact_prefix=build-fuzz/fuzz-findings/"$t"- \
    "$work" tests/fuzz/corpus/"$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # (|| true: a run that fails before its first status line has neither figure)
  cov=$({ grep -o 'cov: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  ft=$({ grep -o 'ft: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
  result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc; log: $log)"
    failed+=("$t")
    grep -E 'ERROR|invariant|SUMMARY' "$log" | head -5 >&2 || true
  fi
  printf '%-16s %10s %8s %8s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" \
    "$result"
done
if ((${#failed[@]})); then
  echo "fuzz: ${failed[*]} failed; inputs in build-fuzz/fuzz-findings/" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s), ${seconds} s each, no crash"
