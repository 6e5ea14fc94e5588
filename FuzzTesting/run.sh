#!/usr/bin/env bash
# Builds the fuzz targets (release, libFuzzer and AddressSanitizer) and runs
# each for a bounded time on a copy of its seed corpus in a temporary
# directory, so nothing new lands in the repository. Prints one line per
# target; exits non-zero when any target crashed (or failed to run).
#
#   FuzzTesting/run.sh [SECONDS] [TARGET ...]     (default: 30 s, every target)
#   FuzzTesting/run.sh --regressions [TARGET ...] (replay Regressions/<Target>/)
#
# Regressions/ keeps the inputs of findings reported and not yet fixed; they
# are replayed in strict mode (COURIER_FUZZ_STRICT=1, where the targets stop
# letting those known differences through), so --regressions fails until
# they are fixed.
#
# A crashing input is kept in FuzzTesting/.build/fuzz-artifacts/<Target>/
# (ignored by git) and shown as hex.
set -euo pipefail
cd "$(dirname "$0")"

all_targets=(FuzzBinaryProvider FuzzFeedback FuzzDeviceMessage FuzzHTTP2Request FuzzProviderToken FuzzPayload FuzzTopicsExtension FuzzClusterMessage)

mode=fuzz
seconds=30
if [[ $# -gt 0 && "$1" == "--regressions" ]]; then
  mode=regressions
  shift
elif [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=("${all_targets[@]}"); fi

build=(swift build -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library)
echo "building: ${build[*]}"
"${build[@]}"
bin=$("${build[@]}" --show-bin-path)

artifacts=$PWD/.build/fuzz-artifacts
work=$(mktemp -d "${TMPDIR:-/tmp}/courier-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The Swift runtime's own crash backtracer is slow and would hide
# libFuzzer's report; libFuzzer and ASan print the stack.
export SWIFT_BACKTRACE=enable=no

failed=0
passed=0
summary=()
for target in "${targets[@]}"; do
  if [[ ! -x "$bin/$target" ]]; then
    summary+=("$target: not built")
    failed=1
    continue
  fi
  dir=$work/$target
  mkdir -p "$dir/corpus" "$dir/artifacts"
  log=$dir/log

  if [[ $mode == regressions ]]; then
    shopt -s nullglob
    inputs=(Regressions/"$target"/*)
    shopt -u nullglob
    if [[ ${#inputs[@]} -eq 0 ]]; then
      summary+=("$target: no regression inputs")
      passed=$((passed + 1))
      continue
    fi
    passing=0
    for input in "${inputs[@]}"; do
      set +e
      COURIER_FUZZ_STRICT=1 "$bin/$target" -runs=1 "$input" >"$log" 2>&1
      status=$?
      set -e
      if [[ $status -eq 0 ]]; then
        passing=$((passing + 1))
      else
        summary+=("$target: $input crashes (exit $status): $(grep -m1 -E 'Fatal error|ERROR: AddressSanitizer|ERROR: libFuzzer' "$log" | cut -c1-300 || true)")
        failed=1
      fi
    done
    summary+=("$target: $passing of ${#inputs[@]} regression inputs pass")
    if [[ $passing -eq ${#inputs[@]} ]]; then passed=$((passed + 1)); fi
    continue
  fi

  if [[ -d Corpus/$target ]]; then cp Corpus/"$target"/* "$dir/corpus/" 2>/dev/null || true; fi
  # -timeout is wall time: generous, as a loaded machine can stall a run
  # for many seconds (every input here takes milliseconds).
  options=(-max_total_time="$seconds" -timeout=60 -print_final_stats=1 -artifact_prefix="$dir/artifacts/")
  if [[ -f Dictionaries/$target.dict ]]; then options+=(-dict="Dictionaries/$target.dict"); fi

  set +e
  "$bin/$target" "${options[@]}" "$dir/corpus" >"$log" 2>&1
  status=$?
  set -e

  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  # After a crash libFuzzer prints no final stats: its last status line counts.
  if [[ -z "$runs" ]]; then runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true); fi
  runs=${runs:-?}
  rate=${rate:-?}
  # slow-unit-* files are inputs that took over 10 s, which on a loaded
  # machine is the scheduler's doing as often as the target's: noted, not a
  # failure. crash-, timeout-, leak- and oom- files are failures.
  shopt -s nullglob
  slow=("$dir"/artifacts/slow-unit-*)
  found=()
  for file in "$dir"/artifacts/*; do [[ $file == */slow-unit-* ]] || found+=("$file"); done
  shopt -u nullglob
  note=""
  if [[ ${#slow[@]} -gt 0 ]]; then
    mkdir -p "$artifacts/$target"
    cp "${slow[@]}" "$artifacts/$target/"
    note=" (${#slow[@]} slow input(s) kept in .build/fuzz-artifacts/$target/; slowest $(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log" | tail -1) s)"
  fi
  if [[ $status -eq 0 && ${#found[@]} -eq 0 ]]; then
    summary+=("$target: $runs executions ($rate/s) in ${seconds} s: ok$note")
    passed=$((passed + 1))
  else
    failed=1
    mkdir -p "$artifacts/$target"
    kept=""
    for file in "${found[@]}"; do
      cp "$file" "$artifacts/$target/"
      kept+=" $(basename "$file")"
    done
    reason=$(grep -m1 -E 'Fatal error|ERROR: AddressSanitizer|ERROR: libFuzzer|SUMMARY' "$log" || echo "exit $status")
    summary+=("$target: $runs executions ($rate/s): CRASH: $reason; input kept in .build/fuzz-artifacts/$target/:$kept")
    echo "---- $target (last lines of its log) ----"
    tail -n 40 "$log"
    for file in "${found[@]}"; do
      echo "input $(basename "$file") (hex): $(od -An -v -tx1 "$file" | tr -d ' \n' | head -c 4096)"
    done
  fi
done

echo "---- fuzzing summary ----"
printf '%s\n' "${summary[@]}"
echo "fuzz: $passed passed, $((${#targets[@]} - passed)) failed"
exit $failed
