#!/usr/bin/env bash
# Builds make targets one after another, printing a plain line per target
# ("[2/7] kube-apiserver") and keeping the build's own output (the `go:
# downloading` lines and compiler output) in a log file, which is printed
# in full only when a build fails. Used by `make demo` so that the first,
# slow run says what it is doing instead of scrolling module downloads.
#
# usage: build-with-progress.sh LOGFILE TARGET...
set -uo pipefail
log=${1:?usage: build-with-progress.sh LOGFILE TARGET...}
shift
mkdir -p "$(dirname "$log")"
: > "$log"
todo=()
for t in "$@"; do
	# Only what is not built yet counts: a second run says nothing.
	if ! make -q "$t" >/dev/null 2>&1; then
		todo+=("$t")
	fi
done
n=${#todo[@]}
[ "$n" -eq 0 ] && exit 0
echo "Building ${n} component(s) from pinned Go modules into bin/ (the first run downloads and compiles"
echo "them: expect several minutes on two cores; later runs reuse them). Build output: ${log}"
i=0
for t in "${todo[@]}"; do
	i=$((i + 1))
	start=$(date +%s)
	printf '  [%d/%d] %s ... ' "$i" "$n" "$(basename "$t")"
	if ! make "$t" >>"$log" 2>&1; then
		echo "failed"
		echo "--- ${log} (tail)"
		tail -n 60 "$log"
		exit 1
	fi
	echo "done in $(($(date +%s) - start)) s"
done
