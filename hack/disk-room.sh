#!/usr/bin/env bash
# Makes room on disk for `make test`, before it compiles anything.
#
# The tools and the control plane are built with a Go build cache of their
# own (TOOLS_GOCACHE in the Makefile): about 9.4 GiB once they are all built,
# and not read again until a pin changes. The test binaries need their own
# room (the build cache and the linker's temporary files, NEED_GIB). On a
# machine with less free room than that, the tools' cache goes first: it
# costs a cold compile on the next pin change, where running out of room
# costs the whole run (every package then fails to link, "no space left on
# device", with nothing saying why).
#
# usage: disk-room.sh TOOLS_GOCACHE NEED_GIB
set -uo pipefail
tools_cache=${1:?usage: disk-room.sh TOOLS_GOCACHE NEED_GIB}
need_gib=${2:?usage: disk-room.sh TOOLS_GOCACHE NEED_GIB}

# existing prints $1, or its nearest existing parent.
existing() {
	local d=$1
	while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
	echo "$d"
}

# free_kib prints the free KiB of the filesystem holding $1, or nothing
# when df cannot tell.
free_kib() {
	local n
	n=$(df -P -k "$(existing "$1")" 2>/dev/null | awk 'NR == 2 { print $4 }')
	case $n in '' | *[!0-9]*) return 1 ;; esac
	echo "$n"
}

need_kib=$((need_gib * 1024 * 1024))

# Where `go test` writes: its build cache, and its work folder under
# GOTMPDIR (TMPDIR when unset).
places=("$(go env GOCACHE)" "$(go env GOTMPDIR)")
[ -n "${places[1]}" ] || places[1]=${TMPDIR:-/tmp}

# short prints the first place with less room than needed.
short() {
	local p n
	for p in "${places[@]}"; do
		if n=$(free_kib "$p") && [ "$n" -lt "$need_kib" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

gib() { echo $(($1 / 1024 / 1024)); }

where=$(short) || exit 0
# Removing the tools' cache helps only where it shares the filesystem.
if [ -d "$tools_cache" ] && [ "$(stat -c %d "$(existing "$tools_cache")")" = "$(stat -c %d "$(existing "$where")")" ]; then
	echo "disk-room: $(gib "$(free_kib "$where")") GiB free where the tests build ($where), $need_gib needed:"
	echo "disk-room: removing the tools' build cache ($(du -sh "$tools_cache" | cut -f1), $tools_cache); the built tools stay."
	rm -rf "$tools_cache"
fi
where=$(short) || exit 0
# Not a failure: the figure is an estimate, and a run that fits anyway
# should not be stopped by it; the warning says why if it does not fit.
echo "disk-room: WARNING: only $(gib "$(free_kib "$where")") GiB free where the tests build ($where); they need about $need_gib GiB." \
	"A failure to write or link (\"no space left on device\") means the disk is full, not that a test failed." >&2
