#!/usr/bin/env bash
# Runs the threaded unit tests under ThreadSanitizer (make test-tsan): BINARY is the TSan build's test
# binary, which holds only the test files that CMakeLists.txt lists for it (SLUICE_TSAN_TEST_FILES).
# Each ':'-separated pattern of FILTER must match at least one test, so a test that moves to a file the
# TSan build does not compile fails here instead of silently leaving TSan's run.
#   usage: scripts/tsan.sh BINARY FILTER
set -euo pipefail
bin=${1:?usage: scripts/tsan.sh BINARY FILTER}
filter=${2:?usage: scripts/tsan.sh BINARY FILTER}
IFS=: read -ra patterns <<< "$filter"
missing=0
for p in "${patterns[@]}"; do
  # Test names are the indented lines of --gtest_list_tests.
  if ! "$bin" --gtest_list_tests --gtest_filter="$p" | grep -q '^  '; then
    echo "tsan: the pattern '$p' matches no test in $bin (add its file to SLUICE_TSAN_TEST_FILES in CMakeLists.txt)"
    missing=1
  fi
done
((missing == 0)) || exit 1
exec "$bin" --gtest_brief=1 --gtest_filter="$filter"
