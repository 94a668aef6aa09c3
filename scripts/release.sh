#!/usr/bin/env bash
# release.sh: versioned hone archives for Linux, with checksums (`make release`).
#
# For each architecture in ARCHES it builds hone with `make build` (so the
# binary is stamped exactly as a development build is: main.version and
# main.commit through -ldflags, and -trimpath keeps the build host's paths
# out of it) and packs
#   DIST/hone_<VERSION>_linux_<arch>.tar.gz
#     hone_<VERSION>_linux_<arch>/{hone,LICENSE,NOTICE,README.md,CHANGELOG.md,hone-daemon.service}
#     hone_<VERSION>_linux_<arch>/hone.cdx.json
#     hone_<VERSION>_linux_<arch>/third_party/licenses/<module path>/...
# beside DIST/hone_<VERSION>_linux_<arch>.cdx.json (the same SBOM), then
# writes DIST/SHA256SUMS for the archives and SBOMs it built.
#
# hone.cdx.json is a CycloneDX 1.6 SBOM of the binary: every module its
# build info lists, with version, go.sum hash and detected licence (as
# evidence), made by cyclonedx-gomod (CYCLONEDX_GOMOD, pinned below; built
# from the Go module proxy on first use, then from the build cache).
# third_party/licenses/ holds the licence texts (LICENSE, COPYING, NOTICE,
# PATENTS and the like) of every module in the binary's build info, from
# the module cache: each module's own, and those in the directories between
# a linked package and its module's root (third-party code a module
# carries); go/ holds the Go distribution's, whose runtime and standard
# library every Go binary links. A module without one stops the release.
#
# The tar layer is reproducible: sorted members, owner 0, mtimes of the
# last commit (SOURCE_DATE_EPOCH overrides), gzip without a name or time;
# the SBOM has no serial number or timestamp for the same reason.
#
# cgo: the host's own architecture is built with cgo, which NVML sampling
# needs; any other is cross-built without cgo (as .ci/run's arm64 build),
# so on an amd64 host the arm64 archive has no NVML (the daemon reports
# "nvml: unavailable (hone was built without cgo ...)"). Build on an arm64
# host for an arm64 archive with NVML.
#
# Environment: VERSION (default: git describe --tags --always --dirty),
# COMMIT (default: git rev-parse HEAD), DIST (default: dist), ARCHES
# (default: "amd64 arm64"), GO (default: go), CYCLONEDX_GOMOD (default:
# github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0).
# Exit codes: 0 archives written; 1 a build or packing step failed; 2 bad
# input (VERSION, ARCHES, a missing file).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
DIST=${DIST:-dist}
ARCHES=${ARCHES:-amd64 arm64}
CYCLONEDX_GOMOD=${CYCLONEDX_GOMOD:-github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0}

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

fail() { echo "release: $*" >&2; exit 1; }

# The SBOM tool, built once for the host.
GOBIN=$work GOOS=$host_os GOARCH=$host_arch "$GO" install "$CYCLONEDX_GOMOD" ||
	fail "building $CYCLONEDX_GOMOD failed"

# copy_licences SRC DEST: SRC's licence files (and the files of a
# licenses/ folder beside them) into DEST, mode 0644; prints how many.
licence_re='^(licen[cs]e|copying|notice|patents|unlicense)([-._][a-z0-9._-]*)?$'
copy_licences() {
	local src=$1 dest=$2 n=0 f b
	for f in "$src"/* "$src"/licen[cs]es/*; do
		b=${f##*/}
		[[ -f $f && $b != *.go ]] || continue
		[[ ${b,,} =~ $licence_re || $f == "$src"/licen[cs]es/* ]] || continue
		install -D -m 0644 "$f" "$dest/${f#"$src"/}" || return 1
		n=$((n + 1))
	done
	echo "$n"
}

# licences BIN DEST GOARCH CGO: third_party/licenses for BIN, as the header
# says. Module and package folders come from go list for BIN's platform;
# which modules are linked comes from BIN's own build info.
licences() {
	local bin=$1 dest=$2 goarch=$3 cgo=$4 goroot mod ver dir pkg n
	local -A moddir=() seen=()
	goroot=$("$GO" env GOROOT)
	n=$(copy_licences "$goroot" "$dest/go") || fail "copying $goroot's licence failed"
	[[ $n != 0 ]] || fail "no LICENSE in $goroot"
	GOOS=linux GOARCH=$goarch CGO_ENABLED=$cgo "$GO" list -deps \
		-f '{{with .Module}}{{if not .Main}}{{.Path}}{{"\t"}}{{.Dir}}{{"\t"}}{{$.Dir}}{{end}}{{end}}' ./cmd/hone >"$work/packages" ||
		fail "go list -deps ./cmd/hone (linux/$goarch) failed"
	while IFS=$'\t' read -r mod dir pkg; do
		moddir[$mod]=$dir
		# Licences of code a module carries, below its root, on the way
		# from a linked package up to it.
		while [[ $pkg == "$dir"/* && -z ${seen[$pkg]:-} ]]; do
			seen[$pkg]=1
			copy_licences "$pkg" "$dest/$mod/${pkg#"$dir"/}" >/dev/null
			pkg=${pkg%/*}
		done
	done <"$work/packages"
	"$GO" version -m "$bin" | awk '$1 == "dep" { print $2, $3 }' >"$work/deps"
	[[ -s $work/deps ]] || fail "$bin: no modules in its build info"
	while read -r mod ver; do
		[[ -n ${moddir[$mod]:-} ]] || fail "$mod $ver is linked into $bin, but go list does not name its folder"
		n=$(copy_licences "${moddir[$mod]}" "$dest/$mod") || fail "copying $mod's licence failed"
		[[ $n != 0 ]] || fail "$mod $ver is linked into $bin but has no licence file in ${moddir[$mod]}"
	done <"$work/deps"
	find "$dest" -type d -exec chmod 0755 {} +
}

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
	licences "$dir/hone" "$dir/third_party/licenses" "$arch" "$cgo"
	# GOPROXY=off: every module is in the module cache (the build just
	# used them); hone's own version is on no proxy, which the tool only
	# warns about (its log goes to the terminal on failure).
	GOPROXY=off "$work/cyclonedx-gomod" bin -json -licenses -noserial -notimestamp \
		-version "$VERSION" -output "$dir/hone.cdx.json" "$dir/hone" 2>"$work/sbom.log" ||
		{ cat "$work/sbom.log" >&2; fail "cyclonedx-gomod: no SBOM for $dir/hone"; }
	chmod 0644 "$dir/hone.cdx.json"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
		-C "$work" -cf - "$name" | gzip -n -9 >"$DIST/$name.tar.gz"
	install -m 0644 "$dir/hone.cdx.json" "$DIST/$name.cdx.json"
	archives+=("$name.cdx.json" "$name.tar.gz")
	if [[ $cgo == 1 ]]; then
		echo "release: $DIST/$name.tar.gz (cgo: NVML sampling included)"
	else
		echo "release: $DIST/$name.tar.gz (cross-built without cgo: no NVML sampling)"
	fi
done
(cd "$DIST" && sha256 "${archives[@]}" >SHA256SUMS)
echo "release: $DIST/SHA256SUMS"
