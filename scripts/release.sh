#!/usr/bin/env bash
# release.sh: versioned hone archives for Linux, with checksums (`make release`).
#
# For each architecture in ARCHES it builds hone with `make build` (so the
# binary is stamped exactly as a development build is: main.version and
# main.commit through -ldflags, and -trimpath keeps the build host's paths
# out of it) and packs
#   DIST/hone_<VERSION>_linux_<arch>.tar.gz
#     hone_<VERSION>_linux_<arch>/{hone,LICENSE,NOTICE,README.md,CHANGELOG.md,hone-daemon.service}
# then writes DIST/SHA256SUMS for the archives it built. The tar layer is
# reproducible: sorted members, owner 0, mtimes of the last commit
# (SOURCE_DATE_EPOCH overrides), gzip without a name or time.
#
# cgo: the host's own architecture is built with cgo, which NVML sampling
# needs; any other is cross-built without cgo (as .ci/run's arm64 build),
# so on an amd64 host the arm64 archive has no NVML (the daemon reports
# "nvml: unavailable (hone was built without cgo ...)"). Build on an arm64
# host for an arm64 archive with NVML.
#
# Environment: VERSION (default: git describe --tags --always --dirty),
# COMMIT (default: git rev-parse HEAD), DIST (default: dist), ARCHES
# (default: "amd64 arm64"), GO (default: go).
# Exit codes: 0 archives written; 1 a build or packing step failed; 2 bad
# input (VERSION, ARCHES, a missing file).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
DIST=${DIST:-dist}
ARCHES=${ARCHES:-amd64 arm64}

bad() { echo "release: $*" >&2; exit 2; }
[[ $VERSION =~ ^[A-Za-z0-9][A-Za-z0-9._+-]*$ ]] || bad "VERSION \"$VERSION\": want letters, digits, '.', '_', '+' or '-' (it names files)"
[[ -n ${ARCHES// /} ]] || bad "ARCHES is empty: want amd64, arm64 or both"
for arch in $ARCHES; do
	case $arch in amd64 | arm64) ;; *) bad "ARCHES: $arch: want amd64 or arm64" ;; esac
done
members=(LICENSE NOTICE README.md CHANGELOG.md deploy/systemd/hone-daemon.service)
for f in "${members[@]}"; do
	[[ -f $f ]] || bad "$f is missing"
done
if command -v sha256sum >/dev/null; then
	sha256() { sha256sum "$@"; }
else
	sha256() { shasum -a 256 "$@"; }
fi

host_os=$("$GO" env GOHOSTOS)
host_arch=$("$GO" env GOHOSTARCH)
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$DIST"

archives=()
for arch in $ARCHES; do
	name=hone_${VERSION}_linux_${arch}
	dir=$work/$name
	mkdir -p "$dir"
	cgo=0
	if [[ $host_os == linux && $arch == "$host_arch" ]]; then
		cgo=1
	fi
	GOOS=linux GOARCH=$arch CGO_ENABLED=$cgo \
		make -s build GO="$GO" BIN="$dir/hone" VERSION="$VERSION" COMMIT="$COMMIT"
	chmod 0755 "$dir/hone"
	for f in "${members[@]}"; do
		install -m 0644 "$f" "$dir/$(basename "$f")"
	done
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
		-C "$work" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
	archives+=("$name.tar.gz")
	if [[ $cgo == 1 ]]; then
		echo "release: $DIST/$name.tar.gz (cgo: NVML sampling included)"
	else
		echo "release: $DIST/$name.tar.gz (cross-built without cgo: no NVML sampling)"
	fi
done
(cd "$DIST" && sha256 "${archives[@]}" >SHA256SUMS)
echo "release: $DIST/SHA256SUMS"
