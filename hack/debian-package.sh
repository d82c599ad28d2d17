#!/usr/bin/env bash
# debian-package.sh SUITE PACKAGE VERSION_PREFIX DEST
#
# Unpacks one amd64 package of a Debian suite into DEST, verified the way
# apt verifies it: the suite's InRelease must carry a good signature from
# the machine's Debian archive keyring, the Packages index must match the
# digest InRelease names, and the .deb the digest the index names.
#
# Why not a digest pinned here: Debian's pool keeps only a suite's current
# build of a package, so a pinned .deb disappears with the next stable
# update and CI would break on a day nobody changed anything. The version
# is pinned up to the Debian revision (VERSION_PREFIX, e.g. "2.41-12"); a
# stable update (+deb13uN) is accepted, a new upstream version is refused.
set -euo pipefail

suite=$1 package=$2 prefix=$3 dest=$4
mirror=${DEBIAN_MIRROR:-https://deb.debian.org/debian}
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { curl -fsSL --retry 3 -o "$2" "$1"; }

fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
gpgv --keyring "$keyring" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" || {
	cat "$work/gpgv.log" >&2
	echo "debian-package: $suite's InRelease is not signed by a key in $keyring" >&2
	exit 1
}

# A good signature on another suite's Release (an older one, replayed by
# a mirror in the path) must not pass for this suite's.
codename=$(sed -n 's/^Codename: //p' "$work/Release")
[ "$codename" = "$suite" ] || {
	echo "debian-package: the signed Release is for '$codename', not $suite" >&2
	exit 1
}

index=main/binary-amd64/Packages.xz
want=$(awk -v f="$index" '/^SHA256:/{s=1; next} /^[A-Za-z]/{s=0} s && $3==f {print $1}' "$work/Release")
[ -n "$want" ] || { echo "debian-package: $suite's Release names no $index" >&2; exit 1; }
# By digest where the archive offers it (Debian does): a mirror updating
# between the two fetches then cannot hand over a newer index.
if grep -qx 'Acquire-By-Hash: yes' "$work/Release"; then
	fetch "$mirror/dists/$suite/main/binary-amd64/by-hash/SHA256/$want" "$work/Packages.xz"
else
	fetch "$mirror/dists/$suite/$index" "$work/Packages.xz"
fi
echo "$want  $work/Packages.xz" | sha256sum -c --quiet -

xz -dc "$work/Packages.xz" >"$work/Packages"
stanza=$(awk -v p="$package" '$0=="Package: "p{s=1} s{print} s && /^$/{exit}' "$work/Packages")
version=$(sed -n 's/^Version: //p' <<<"$stanza")
file=$(sed -n 's/^Filename: //p' <<<"$stanza")
sum=$(sed -n 's/^SHA256: //p' <<<"$stanza")
[ -n "$file" ] || { echo "debian-package: $suite has no package $package" >&2; exit 1; }
case $version in
"$prefix" | "$prefix"+*) ;;
*)
	echo "debian-package: $suite has $package $version, not $prefix: review the new version and update the Makefile's pin" >&2
	exit 1
	;;
esac
fetch "$mirror/$file" "$work/package.deb"
echo "$sum  $work/package.deb" | sha256sum -c --quiet -
mkdir -p "$dest"
dpkg-deb -x "$work/package.deb" "$dest"
echo "$package $version" >>"$dest/.packages"
