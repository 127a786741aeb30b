#!/usr/bin/env bash
# run.sh - what `make fuzz-run` does: runs each fuzz target for FUZZ_SECONDS
# on a scratch copy of its seed corpus (test/fuzz/corpus/NAME, which is never
# written), FUZZ_JOBS targets at a time, then prints one line per target and
# fails if any target crashed, naming the input that crashed it.
#
#   test/fuzz/run.sh BUILD_FUZZ_DIR NAME...     (NAME: fuzz_NAME binary)
#
# Scratch files: BUILD_FUZZ_DIR/run/NAME/{corpus,artifacts,log}.
set -u

out=$1
shift
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
args=${FUZZ_ARGS:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

run_one() {
  local n=$1 dir=$out/run/$1
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$here/corpus/$n/"* "$dir/corpus/" 2>/dev/null
  # -timeout: one input taking 10 s is a hang; -max_len: room for sequences.
  # shellcheck disable=SC2086
  "$out/fuzz_$n" -max_total_time="$secs" -timeout=10 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" $args \
    "$dir/corpus" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
}

echo "fuzzing $# targets for ${secs}s each, $jobs at a time (logs in $out/run/NAME/log)"
running=0
for n in "$@"; do
  if [ ! -x "$out/fuzz_$n" ]; then
    echo "fuzz-run: $out/fuzz_$n is not built (make fuzz)" >&2
    exit 1
  fi
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$n" &
  running=$((running + 1))
done
wait

printf '%-18s %10s %8s %6s %6s %6s  %s\n' target execs exec/s cov ft corpus result
failed=0
for n in "$@"; do
  dir=$out/run/$n log=$out/run/$n/log
  rc=$(cat "$dir/rc" 2>/dev/null || echo '?')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  # The last status line: "#123 DONE cov: 45 ft: 67 corp: 8/1Kb ..."
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -n 1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  if [ "$rc" = 0 ]; then result=ok; else result="FAILED (exit $rc)"; failed=$((failed + 1)); fi
  printf '%-18s %10s %8s %6s %6s %6s  %s\n' "$n" "${execs:--}" "${rate:--}" \
    "${cov:--}" "${ft:--}" "${corp:--}" "$result"
done

if [ "$failed" -ne 0 ]; then
  for n in "$@"; do
    dir=$out/run/$n
    [ "$(cat "$dir/rc" 2>/dev/null)" = 0 ] && continue
    echo "======== fuzz_$n failed; from $dir/log:"
    # The report: from its first line (sanitizer, failed check, timeout).
    awk '/ERROR: |check failed|runtime error|deadly signal|ALARM: |out-of-memory/ \
         { p = 1 } p && n++ < 40' "$dir/log"
    for a in "$dir"/artifacts/*; do
      [ -e "$a" ] || continue
      echo "crashing input: $a"
      echo "  reproduce: $out/fuzz_$n $a"
      echo "  keep as a seed: cp $a test/fuzz/corpus/$n/"
    done
  done
  echo "fuzz-run: $failed of $# targets failed"
  exit 1
fi
echo "fuzz-run: all $# targets ran ${secs}s without a crash"
