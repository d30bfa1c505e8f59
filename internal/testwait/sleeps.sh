#!/bin/sh
# sleeps.sh: fail if a _test.go file holds more time.Sleep calls than
# internal/testwait/sleep-allowlist.txt allows it (`make lint`).
set -eu
allow=internal/testwait/sleep-allowlist.txt
git grep -c 'time\.Sleep(' -- '*_test.go' | awk -F: -v allow="$allow" '
BEGIN {
	while ((getline line < allow) > 0) {
		if (line ~ /^[[:space:]]*(#|$)/) continue
		split(line, f, ":"); n[f[1]]++
	}
}
{ seen[$1] = $2; if ($2 > n[$1] + 0) { printf "%s: %d time.Sleep, %d allowed by %s: wait on the event (internal/testwait)\n", $1, $2, n[$1] + 0, allow; bad = 1 } }
END {
	for (p in n) if (seen[p] + 0 < n[p]) printf "note: %s allows %d time.Sleep in %s, which has %d: drop the extra lines\n", allow, n[p], p, seen[p] + 0 > "/dev/stderr"
	exit bad
}'
