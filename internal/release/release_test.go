package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

const root = "../.."

// members are the files every archive holds besides the binary, by their
// path in the repository.
var members = []string{"LICENSE", "NOTICE", "README.md", "CHANGELOG.md", "deploy/systemd/hone-daemon.service"}

func releaseScript(t *testing.T, dist string, env ...string) (string, int) {
	t.Helper()
	for _, tool := range []string{"make", "tar", "gzip", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("scripts/release.sh needs %s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "scripts/release.sh")
	c.Dir = root
	// Not the outer make's jobserver (make test runs this test).
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			c.Env = append(c.Env, e)
		}
	}
	c.Env = append(c.Env, append([]string{"DIST=" + dist}, env...)...)
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	return "", 0
}

// TestReleaseArchive runs scripts/release.sh (what `make release` runs) for
// the host's architecture only (a cross build of the other one compiles
// everything again) and checks what it wrote: exactly the archive, its
// SBOM and SHA256SUMS, whose lines match their digests; the archive's
// members, modes and owners; the files byte for byte; and a binary for
// linux/GOARCH, built with cgo (NVML) and -trimpath (no path of this
// checkout, the module cache or GOROOT in it), that says it is version
// test-0 at this commit; then the SBOM (checkSBOM) and the licence texts
// (checkLicences) against the binary's build info.
func TestReleaseArchive(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("release archives are linux/amd64 and linux/arm64; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	dist := t.TempDir()
	out, code := releaseScript(t, dist, "VERSION=test-0", "COMMIT=", "ARCHES="+runtime.GOARCH)
	if code != 0 {
		t.Fatalf("scripts/release.sh exited %d\n%s", code, out)
	}
	name := "hone_test-0_linux_" + runtime.GOARCH
	archive := name + ".tar.gz"
	sbom := name + ".cdx.json"
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{"SHA256SUMS", sbom, archive}; !slices.Equal(got, want) {
		t.Fatalf("dist holds %v, want %v", got, want)
	}

	wantSums := ""
	for _, f := range []string{sbom, archive} {
		b, err := os.ReadFile(filepath.Join(dist, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		wantSums += hex.EncodeToString(sum[:]) + "  " + f + "\n"
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if string(sums) != wantSums {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", sums, wantSums)
	}
	b, err := os.ReadFile(filepath.Join(dist, archive))
	if err != nil {
		t.Fatal(err)
	}

	files := readArchive(t, b)
	want := map[string]int64{name + "/": 0o755, name + "/hone": 0o755, name + "/hone.cdx.json": 0o644}
	for _, m := range members {
		want[name+"/"+filepath.Base(m)] = 0o644
	}
	// Licence texts: folders 0755, files 0644 (checkLicences checks which).
	for path, f := range files {
		if strings.HasPrefix(path, name+"/third_party/") {
			want[path] = map[bool]int64{true: 0o755, false: 0o644}[f.Typeflag == tar.TypeDir]
		}
	}
	for path, mode := range want {
		f, ok := files[path]
		if !ok {
			t.Errorf("%s: no %s", archive, path)
			continue
		}
		if f.Mode&0o777 != mode || f.Uid != 0 || f.Gid != 0 {
			t.Errorf("%s: mode %o uid %d gid %d, want %o, 0, 0", path, f.Mode&0o777, f.Uid, f.Gid, mode)
		}
	}
	for path := range files {
		if _, ok := want[path]; !ok {
			t.Errorf("%s: unexpected member %s", archive, path)
		}
	}
	for _, m := range members {
		src, err := os.ReadFile(filepath.Join(root, m))
		if err != nil {
			t.Fatal(err)
		}
		if f := files[name+"/"+filepath.Base(m)]; f != nil && !bytes.Equal(f.data, src) {
			t.Errorf("%s in the archive differs from %s", filepath.Base(m), m)
		}
	}

	if f, g := files[name+"/hone.cdx.json"], readFile(t, filepath.Join(dist, sbom)); f != nil && !bytes.Equal(f.data, g) {
		t.Errorf("hone.cdx.json in the archive differs from %s", sbom)
	}

	f := files[name+"/hone"]
	if f == nil {
		t.FailNow()
	}
	// -trimpath: no path of the build host.
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{abs, goEnv(t, "GOMODCACHE"), goEnv(t, "GOROOT")} {
		if n := bytes.Count(f.data, []byte(dir)); n > 0 {
			t.Errorf("the binary holds the build host's path %s %d times (built without -trimpath?)", dir, n)
		}
	}
	bin := filepath.Join(t.TempDir(), "hone")
	if err := os.WriteFile(bin, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if e.Machine != machine {
		t.Errorf("the binary is for %v, want %v", e.Machine, machine)
	}
	e.Close()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "1", "GOOS": "linux", "GOARCH": runtime.GOARCH, "-trimpath": "true"} {
		if settings[k] != v {
			t.Errorf("build setting %s=%q, want %q", k, settings[k], v)
		}
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	ver, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "hone test-0 (commit " + strings.TrimSpace(string(head)) + ")\n"; string(ver) != want {
		t.Errorf("hone version: %q, want %q", ver, want)
	}
	checkSBOM(t, files[name+"/hone.cdx.json"], info)
	checkLicences(t, files, name+"/third_party/licenses/", info)
}

// checkSBOM: the SBOM is CycloneDX JSON about hone at version test-0 whose
// components are exactly the modules in the binary's build info, at their
// versions, and so name every direct requirement of go.mod at its version.
func checkSBOM(t *testing.T, f *member, info *buildinfo.BuildInfo) {
	t.Helper()
	if f == nil {
		t.Error("the archive has no hone.cdx.json")
		return
	}
	type component struct{ Name, Version, Purl string }
	var bom struct {
		BOMFormat   string `json:"bomFormat"`
		SpecVersion string `json:"specVersion"`
		Metadata    struct{ Component component }
		Components  []component
	}
	if err := json.Unmarshal(f.data, &bom); err != nil {
		t.Errorf("hone.cdx.json: %v", err)
		return
	}
	if bom.BOMFormat != "CycloneDX" || !strings.HasPrefix(bom.SpecVersion, "1.") {
		t.Errorf("hone.cdx.json: bomFormat %q specVersion %q, want CycloneDX 1.x", bom.BOMFormat, bom.SpecVersion)
	}
	if c := bom.Metadata.Component; c.Name != "github.com/hone-llm/hone" || c.Version != "test-0" {
		t.Errorf("hone.cdx.json describes %s %s, want github.com/hone-llm/hone test-0", c.Name, c.Version)
	}
	got := map[string]string{}
	for _, c := range bom.Components {
		if want := "pkg:golang/" + c.Name + "@" + c.Version; !strings.HasPrefix(c.Purl, want) {
			t.Errorf("hone.cdx.json: %s %s has purl %q, want %s...", c.Name, c.Version, c.Purl, want)
		}
		got[c.Name] = c.Version
	}
	want := map[string]string{}
	for _, d := range info.Deps {
		want[d.Path] = d.Version
	}
	if !maps.Equal(got, want) {
		t.Errorf("hone.cdx.json lists %d components:\n%v\nthe binary's build info %d modules:\n%v", len(got), got, len(want), want)
	}
	c := exec.Command("go", "mod", "edit", "-json")
	c.Dir = root
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Require []struct {
			Path, Version string
			Indirect      bool
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	direct := 0
	for _, r := range mod.Require {
		if r.Indirect {
			continue
		}
		direct++
		if got[r.Path] != r.Version {
			t.Errorf("hone.cdx.json: %s at %q, go.mod requires %s", r.Path, got[r.Path], r.Version)
		}
	}
	if direct == 0 {
		t.Error("go.mod: no direct requirement")
	}
}

// licenceName is how scripts/release.sh recognises a licence text.
var licenceName = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents|unlicense)([-._][a-z0-9._-]*)?$`)

// checkLicences: under dir the archive holds, for every module in the
// binary's build info, the licence texts at its module's root, byte for
// byte (at least one), and the Go distribution's LICENSE as go/LICENSE.
func checkLicences(t *testing.T, files map[string]*member, dir string, info *buildinfo.BuildInfo) {
	t.Helper()
	args := []string{"mod", "download", "-json"}
	for _, d := range info.Deps {
		args = append(args, d.Path+"@"+d.Version)
	}
	c := exec.Command("go", args...)
	c.Dir = root
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go mod download: %v", err)
	}
	dirs := map[string]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var m struct{ Path, Dir string }
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		dirs[m.Path] = m.Dir
	}
	if len(info.Deps) == 0 {
		t.Fatal("the binary's build info names no module")
	}
	texts := 0
	for _, d := range info.Deps {
		entries, err := os.ReadDir(dirs[d.Path])
		if err != nil {
			t.Errorf("%s: %v", d.Path, err)
			continue
		}
		n := 0
		for _, e := range entries {
			if e.Type().IsRegular() && licenceName.MatchString(e.Name()) && !strings.HasSuffix(e.Name(), ".go") {
				n++
				f := files[dir+d.Path+"/"+e.Name()]
				if f == nil {
					t.Errorf("the archive has no %s%s/%s", dir, d.Path, e.Name())
				} else if !bytes.Equal(f.data, readFile(t, filepath.Join(dirs[d.Path], e.Name()))) {
					t.Errorf("%s%s/%s differs from the module's", dir, d.Path, e.Name())
				}
			}
		}
		if n == 0 {
			t.Errorf("%s %s: no licence text in %s", d.Path, d.Version, dirs[d.Path])
		}
		texts += n
	}
	if f := files[dir+"go/LICENSE"]; f == nil || !bytes.Equal(f.data, readFile(t, filepath.Join(goEnv(t, "GOROOT"), "LICENSE"))) {
		t.Errorf("the archive has no %sgo/LICENSE, or not the one of %s", dir, goEnv(t, "GOROOT"))
	}
	t.Logf("%d modules in the binary, %d licence texts at their roots, %d files under %s", len(info.Deps), texts, countPrefix(files, dir), dir)
}

func countPrefix(files map[string]*member, prefix string) int {
	n := 0
	for path, f := range files {
		if strings.HasPrefix(path, prefix) && f.Typeflag == tar.TypeReg {
			n++
		}
	}
	return n
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env %s: %q %v", key, out, err)
	}
	return strings.TrimSpace(string(out))
}

type member struct {
	*tar.Header
	data []byte
}

func readArchive(t *testing.T, b []byte) map[string]*member {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header carries name %q, time %v: want neither (gzip -n)", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	files := map[string]*member{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = &member{h, data}
	}
	return files
}

// TestReleaseRejectsBadInput: a VERSION that cannot name a file and an
// architecture hone does not release are bad input (exit 2), refused
// before anything is built or written.
func TestReleaseRejectsBadInput(t *testing.T) {
	for _, env := range [][]string{{"VERSION=1/2"}, {"VERSION=", "ARCHES= "}, {"VERSION=v1", "ARCHES=amd64 riscv64"}} {
		dist := filepath.Join(t.TempDir(), "dist")
		out, code := releaseScript(t, dist, env...)
		if code != 2 || !strings.Contains(out, "release: ") {
			t.Errorf("%v: exit %d, want 2 with a message\n%s", env, code, out)
		}
		if _, err := os.Stat(dist); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: %s was created", env, dist)
		}
	}
}

// dockerfile returns the Dockerfile's instructions, continuation lines
// joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	pending := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		out = append(out, strings.Join(strings.Fields(pending+line), " "))
		pending = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDockerfileBuildsLikeMake: the image's hone is built the way `make
// build` builds it (the build target itself, so the same -ldflags stamp
// main.version and main.commit, taken from build arguments since .git is
// not sent), with cgo on a Go of go.mod's version, on the Debian release
// the runtime stage uses (glibc), and runs as a non-root user. The image
// itself is not built here.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^BIN := bin/hone$`, `(?m)^LDFLAGS := -X main.version=\$\(VERSION\) -X main.commit=\$\(COMMIT\)$`,
		`(?m)^build:\n\t\$\(GO\) build -trimpath -ldflags "\$\(LDFLAGS\)" -o \$\(BIN\) ./cmd/hone$`} {
		if !regexp.MustCompile(re).Match(mk) {
			t.Errorf("Makefile: no match for %s (the Dockerfile and scripts/release.sh rely on it)", re)
		}
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod: no go directive")
	}

	var stages [][]string
	for _, ins := range dockerfile(t) {
		if strings.HasPrefix(ins, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], ins)
		}
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: %d stages, want 2 (build, runtime)", len(stages))
	}
	build, run := stages[0], stages[1]
	for _, want := range []string{
		"FROM golang:" + string(m[1]) + "-bookworm AS build",
		"ARG VERSION=dev", "ARG COMMIT=unknown", "ENV CGO_ENABLED=1",
	} {
		if !slices.Contains(build, want) {
			t.Errorf("Dockerfile build stage: no %q in %q", want, build)
		}
	}
	if !slices.ContainsFunc(build, func(s string) bool {
		return strings.HasPrefix(s, "RUN ") && strings.Contains(s, ` make build VERSION="$VERSION" COMMIT="$COMMIT"`)
	}) {
		t.Errorf(`Dockerfile build stage: no RUN ... make build VERSION="$VERSION" COMMIT="$COMMIT"`)
	}
	if run[0] != "FROM debian:bookworm-slim" {
		t.Errorf("Dockerfile runtime stage: %q, want FROM debian:bookworm-slim (the builder's glibc)", run[0])
	}
	if !slices.Contains(run, "COPY --from=build /src/bin/hone /usr/local/bin/hone") {
		t.Errorf("Dockerfile runtime stage does not copy the built bin/hone: %q", run)
	}
	user := ""
	for _, ins := range run {
		if u, ok := strings.CutPrefix(ins, "USER "); ok {
			user = u
		}
	}
	if user == "" || user == "root" || user == "0" {
		t.Errorf("Dockerfile runtime stage: USER %q, want a non-root user", user)
	}

	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, p := range []string{".git", "bin"} {
		if !slices.Contains(patterns, p) {
			t.Errorf(".dockerignore: %s not excluded", p)
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "Makefile", "cmd", "LICENSE", "NOTICE", "bpf"} {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, need); ok {
				t.Errorf(".dockerignore: %s excludes %s, which the build needs", p, need)
			}
		}
	}
}

// TestNoticeAttributions: NOTICE names every module linked into hone whose
// own NOTICE file asks for attribution (Apache-2.0, section 4(d)), so a
// new dependency that carries one cannot ship in a release unattributed,
// and says where a release keeps the licence texts and the SBOM.
func TestNoticeAttributions(t *testing.T) {
	notice, err := os.ReadFile(filepath.Join(root, "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	// And it points at the licence texts and the SBOM a release carries.
	for _, s := range []string{"third_party/licenses/", "hone.cdx.json"} {
		if !strings.Contains(string(notice), s) {
			t.Errorf("NOTICE does not mention %s", s)
		}
	}
	c := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}\t{{.Dir}}{{end}}{{end}}", "./cmd/hone")
	c.Dir = root
	out, err := c.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, ok := strings.Cut(line, "\t")
		if !ok || seen[path] || dir == "" {
			continue
		}
		seen[path] = true
		files, _ := filepath.Glob(filepath.Join(dir, "NOTICE*"))
		if len(files) > 0 && !strings.Contains(string(notice), "("+path+")") {
			t.Errorf("NOTICE does not attribute %s, which has %s", path, filepath.Base(files[0]))
		}
	}
	if len(seen) == 0 {
		t.Fatal("go list named no modules")
	}
}
