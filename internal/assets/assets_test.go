package assets

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/version"
)

// readPins parses the `NAME := value` lines of tools/versions.mk.
func readPins(t *testing.T, root string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, VersionsFile))
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]string{}
	re := regexp.MustCompile(`^([A-Z_]+)\s*:=\s*(\S+)\s*$`)
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s:%d: unparsable line %q (expected NAME := value)", VersionsFile, i+1, line)
		}
		pins[m[1]] = m[2]
	}
	return pins
}

// TestPinsMatchVersionsMk keeps internal/version's constants, which stratum
// runs, equal to the pins the test binaries are built from. A new pin in
// versions.mk must be added here (and to internal/version) on purpose.
func TestPinsMatchVersionsMk(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"KUBE_VERSION":     version.Kubernetes,
		"ETCD_VERSION":     version.Etcd,
		"ETCD_OLD_VERSION": version.EtcdPrevious,
	}
	got := readPins(t, root)
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: %s = %q, internal/version says %q; change both together (see docs/assets.md)", VersionsFile, name, got[name], v)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: pin %s has no internal/version constant checked here", VersionsFile, name)
		}
	}
}

// TestNamesMatchBuildScript keeps Names() equal to the binaries
// tools/build-assets.sh builds.
func TestNamesMatchBuildScript(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "tools", "build-assets.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^binaries=\((.*)\)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("tools/build-assets.sh: no `binaries=(...)` line")
	}
	pins := readPins(t, root)
	var built []string
	for _, f := range strings.Fields(string(m[1])) {
		f = strings.Trim(f, `"`)
		f = os.Expand(f, func(k string) string { return pins[k] })
		built = append(built, f)
	}
	if !slices.Equal(built, Names()) {
		t.Errorf("build-assets.sh builds %q, Names() = %q", built, Names())
	}
}

// writeTree creates files (slash paths relative to root) with the given contents.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func baseTree() map[string]string {
	return map[string]string{
		"tools/versions.mk":      "KUBE_VERSION := v1.37.2\nETCD_VERSION := v3.7.3\n",
		"tools/kube/go.sum":      "k8s.io/kubernetes v1.37.2 h1:aaa=\n",
		"tools/etcd-v3.7/go.sum": "go.etcd.io/etcd/server/v3 v3.7.3 h1:bbb=\n",
		"tools/etcd-v3.6/go.sum": "go.etcd.io/etcd/server/v3 v3.6.16 h1:ccc=\n",
	}
}

func keyOf(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	writeTree(t, root, files)
	k, err := Key(root)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(k) {
		t.Fatalf("key %q is not 16 hex digits", k)
	}
	return k
}

func TestKeyChangesWithEveryInput(t *testing.T) {
	base := keyOf(t, baseTree())
	if again := keyOf(t, baseTree()); again != base {
		t.Fatalf("same inputs in another directory: key %s, then %s; the key must not depend on where the checkout is", base, again)
	}

	edit := func(f func(m map[string]string)) map[string]string {
		m := baseTree()
		f(m)
		return m
	}
	changed := map[string]map[string]string{
		"versions.mk bumped": edit(func(m map[string]string) {
			m["tools/versions.mk"] = strings.Replace(m["tools/versions.mk"], "v1.37.2", "v1.37.3", 1)
		}),
		"versions.mk comment": edit(func(m map[string]string) { m["tools/versions.mk"] += "# note\n" }),
		"go.sum edited": edit(func(m map[string]string) {
			m["tools/kube/go.sum"] = strings.Replace(m["tools/kube/go.sum"], "aaa", "aab", 1)
		}),
		"go.sum added":   edit(func(m map[string]string) { m["tools/etcd-v3.8/go.sum"] = "x v1 h1:d=\n" }),
		"go.sum removed": edit(func(m map[string]string) { delete(m, "tools/etcd-v3.6/go.sum") }),
		"go.sum emptied": edit(func(m map[string]string) { m["tools/etcd-v3.6/go.sum"] = "" }),
		"module renamed": edit(func(m map[string]string) {
			m["tools/etcd-v3.5/go.sum"] = m["tools/etcd-v3.6/go.sum"]
			delete(m, "tools/etcd-v3.6/go.sum")
		}),
		"contents swapped": edit(func(m map[string]string) {
			m["tools/etcd-v3.6/go.sum"], m["tools/etcd-v3.7/go.sum"] = m["tools/etcd-v3.7/go.sum"], m["tools/etcd-v3.6/go.sum"]
		}),
		"bytes moved between files": edit(func(m map[string]string) {
			m["tools/etcd-v3.6/go.sum"] += "x"
			m["tools/etcd-v3.7/go.sum"] = "x" + m["tools/etcd-v3.7/go.sum"]
		}),
	}
	seen := map[string]string{base: "base"}
	for name, files := range changed {
		k := keyOf(t, files)
		if prev, dup := seen[k]; dup {
			t.Errorf("%s: key %s equals the key of %s", name, k, prev)
		}
		seen[k] = name
	}

	// Files that are not pins leave the key alone, so editing docs or scripts
	// does not cost a 7-minute rebuild.
	unrelated := edit(func(m map[string]string) {
		m["README.md"] = "readme"
		m["tools/NOTES.txt"] = "notes"
		m["tools/kube/nested/go.sum"] = "not a module go.sum at tools/*/go.sum"
	})
	if k := keyOf(t, unrelated); k != base {
		t.Errorf("files outside the pins changed the key: %s, want %s", k, base)
	}
}

func TestKeyNeedsVersionsFile(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"tools/kube/go.sum": "x"})
	if _, err := Key(root); err == nil || !strings.Contains(err.Error(), VersionsFile) {
		t.Fatalf("Key without %s: err = %v, want an error naming it", VersionsFile, err)
	}
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, baseTree())
	nested := filepath.Join(root, "internal", "assets", "deep")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()

	for _, tc := range []struct {
		name   string
		starts []string
		want   string
	}{
		{"root itself", []string{root}, root},
		{"nested package dir", []string{nested}, root},
		{"first start outside, executable dir inside", []string{outside, filepath.Join(root, "internal")}, root},
		{"nowhere", []string{outside}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findRoot(tc.starts...)
			if tc.want == "" {
				if !errors.Is(err, ErrNoRoot) {
					t.Fatalf("findRoot(%q) = %q, %v; want ErrNoRoot", tc.starts, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("findRoot(%q) = %q, %v; want %q", tc.starts, got, err, tc.want)
			}
		})
	}
}

func TestBaseAndDirFor(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, baseTree())
	key, err := Key(root)
	if err != nil {
		t.Fatal(err)
	}

	override := t.TempDir()
	t.Setenv(EnvDir, override)
	if got, err := DirFor(root); err != nil || got != filepath.Join(override, key) {
		t.Errorf("with %s=%s: DirFor = %q, %v; want %q", EnvDir, override, got, err, filepath.Join(override, key))
	}

	t.Setenv(EnvDir, "")
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no user cache dir here: %v", err)
	}
	want := filepath.Join(cache, "stratum", "assets", key)
	if got, err := DirFor(root); err != nil || got != want {
		t.Errorf("without %s: DirFor = %q, %v; want %q", EnvDir, got, err, want)
	}
}

func TestPathMissingAndPresent(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}

	// Missing: the error matches ErrMissing, names the path, says what to run.
	_, err = KubeAPIServer()
	want := filepath.Join(dir, "kube-apiserver")
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("KubeAPIServer() in an empty cache: err = %v, want ErrMissing", err)
	}
	for _, s := range []string{want, "make assets"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("missing-binary error %q does not mention %q", err, s)
		}
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Present but not executable (an interrupted copy, say): still missing.
	etcdPath := filepath.Join(dir, "etcd-"+version.Etcd)
	if err := os.WriteFile(etcdPath, []byte("#!/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Etcd(version.Etcd); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("Etcd() on a non-executable file: err = %v, want ErrMissing saying not executable", err)
	}
	// A directory in the binary's place: missing.
	if err := os.Mkdir(filepath.Join(dir, "kube-controller-manager"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := KubeControllerManager(); !errors.Is(err, ErrMissing) {
		t.Errorf("KubeControllerManager() on a directory: err = %v, want ErrMissing", err)
	}

	// Present and executable.
	for _, name := range []string{"kube-apiserver", "etcd-" + version.EtcdPrevious} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := KubeAPIServer(); err != nil || got != want {
		t.Errorf("KubeAPIServer() = %q, %v; want %q", got, err, want)
	}
	if got, err := Etcd(version.EtcdPrevious); err != nil || got != filepath.Join(dir, "etcd-"+version.EtcdPrevious) {
		t.Errorf("Etcd(%s) = %q, %v", version.EtcdPrevious, got, err)
	}
}

// TestAccessors checks that each named accessor looks up its own binary:
// missing, it is an ErrMissing error naming that path; present, it is the path.
func TestAccessors(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	accessors := []struct {
		name string
		get  func() (string, error)
	}{
		{KubeAPIServerName, KubeAPIServer},
		{KubeControllerManagerName, KubeControllerManager},
		{EtcdName(version.Etcd), func() (string, error) { return Etcd(version.Etcd) }},
		{EtcdName(version.EtcdPrevious), func() (string, error) { return Etcd(version.EtcdPrevious) }},
		{EtcdctlName, Etcdctl},
		{KubectlName, Kubectl},
	}
	var names []string
	for _, a := range accessors {
		names = append(names, a.name)
	}
	if !slices.Equal(names, Names()) {
		t.Errorf("accessors cover %q, Names() = %q; give every built binary an accessor", names, Names())
	}
	for _, want := range []string{"etcdctl", "kubectl"} {
		if !slices.Contains(Names(), want) {
			t.Errorf("Names() = %q, missing %q", Names(), want)
		}
	}

	for _, a := range accessors {
		p := filepath.Join(dir, a.name)
		if _, err := a.get(); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s accessor in an empty cache: err = %v, want ErrMissing naming %s", a.name, err, p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range accessors {
		p := filepath.Join(dir, a.name)
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if got, err := a.get(); err != nil || got != p {
			t.Errorf("%s accessor = %q, %v; want %q", a.name, got, err, p)
		}
	}
}

func TestPathRejectsNonNames(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	for _, name := range []string{"", "../kube-apiserver", "bin/etcd", ".complete", ".", ".."} {
		if _, err := Path(name); err == nil || errors.Is(err, ErrMissing) {
			t.Errorf("Path(%q): err = %v, want a refusal that is not ErrMissing", name, err)
		}
	}
}
