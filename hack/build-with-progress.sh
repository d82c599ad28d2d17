#!/usr/bin/env bash
# Builds make targets, two at a time (a build waits on downloads as much
# as on the two cores), printing a plain line per finished target ("[2/7]
# kube-apiserver done in 186 s") and keeping the builds' own output (the
# `go: downloading` lines, compiler output) in a log file, whose tail is
# printed only when a build fails. Used by `make demo`, so that the first,
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
echo "Building ${n} component(s) from pinned Go modules into bin/. The first run downloads and compiles"
echo "them (about 8 minutes on two cores with empty caches); later runs reuse them. Build output: ${log}"

# label names a target for people: its file, or for a stamp its folder.
label() {
	local b
	b=$(basename "$1")
	[ "${b#.}" != "$b" ] && b=$(basename "$(dirname "$1")")
	echo "$b"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A running=() # pid of a running build → its index in todo
declare -a started=()
done_count=0
failed=""
# wait_one waits for one running build and reports it.
wait_one() {
	local pid i
	wait -n -p pid
	i=${running[$pid]}
	unset "running[$pid]"
	done_count=$((done_count + 1))
	cat "$tmp/$i.log" >>"$log"
	if [ "$(cat "$tmp/$i.rc" 2>/dev/null)" != 0 ]; then
		echo "  [${done_count}/${n}] $(label "${todo[$i]}") failed"
		failed=${todo[$i]}
		return
	fi
	echo "  [${done_count}/${n}] $(label "${todo[$i]}") done in $(($(date +%s) - started[i])) s"
}
for i in "${!todo[@]}"; do
	while [ "${#running[@]}" -ge 2 ]; do wait_one; done
	[ -n "$failed" ] && break
	started[i]=$(date +%s)
	(make "${todo[$i]}" >"$tmp/$i.log" 2>&1; echo $? >"$tmp/$i.rc") &
	running[$!]=$i
done
while [ "${#running[@]}" -gt 0 ]; do wait_one; done
if [ -n "$failed" ]; then
	echo "--- ${log} (tail)"
	tail -n 60 "$log"
	exit 1
fi
