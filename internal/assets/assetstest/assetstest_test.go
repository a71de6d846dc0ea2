package assetstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/version"
)

// fakeTB records how Require ended a test. Skip and Fatal stop the calling
// goroutine as the real ones do.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(names ...string) (*fakeTB, string) {
	f := &fakeTB{}
	var dir string
	done := make(chan struct{})
	go func() {
		defer close(done)
		dir = Require(f, names...)
	}()
	<-done
	return f, dir
}

func TestRequire(t *testing.T) {
	t.Setenv(assets.EnvDir, t.TempDir())
	dir, err := assets.Dir()
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv("CI", "")
	if f, _ := run(); !f.skipped || f.failed || !strings.Contains(f.msg, "make assets") {
		t.Errorf("missing binaries outside CI: skipped=%v failed=%v msg=%q; want a skip saying `make assets`", f.skipped, f.failed, f.msg)
	}
	t.Setenv("CI", "true")
	if f, _ := run(assets.KubeAPIServerName); !f.failed || f.skipped || !strings.Contains(f.msg, filepath.Join(dir, "kube-apiserver")) {
		t.Errorf("missing binary under CI=true: skipped=%v failed=%v msg=%q; want a failure naming the path", f.skipped, f.failed, f.msg)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, assets.KubeAPIServerName), []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if f, got := run(assets.KubeAPIServerName); f.skipped || f.failed || got != dir {
		t.Errorf("present binary: skipped=%v failed=%v msg=%q dir=%q; want dir %q", f.skipped, f.failed, f.msg, got, dir)
	}
	// The others are still missing: with no names every binary is required.
	if f, _ := run(); !f.failed {
		t.Errorf("Require() with only kube-apiserver present under CI=true: want a failure, got skipped=%v", f.skipped)
	}
}

// TestBuiltBinariesMatchPins runs the real binaries `make assets` built and
// checks they report the pinned versions, so a cache directory filled by hand
// or by an old script cannot pass for the pins.
func TestBuiltBinariesMatchPins(t *testing.T) {
	dir := Require(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{assets.KubeAPIServerName, []string{"--version"}, "Kubernetes " + version.Kubernetes},
		{assets.KubeControllerManagerName, []string{"--version"}, "Kubernetes " + version.Kubernetes},
		{assets.EtcdName(version.Etcd), []string{"--version"}, "etcd Version: " + strings.TrimPrefix(version.Etcd, "v")},
		{assets.EtcdName(version.EtcdPrevious), []string{"--version"}, "etcd Version: " + strings.TrimPrefix(version.EtcdPrevious, "v")},
		{assets.EtcdctlName, []string{"version"}, "etcdctl version: " + strings.TrimPrefix(version.Etcd, "v")},
		{assets.KubectlName, []string{"version", "--client"}, "Client Version: " + version.Kubernetes},
	} {
		cmd := strings.Join(append([]string{tc.name}, tc.args...), " ")
		out, err := exec.Command(filepath.Join(dir, tc.name), tc.args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", cmd, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s = %q, want it to contain %q", cmd, out, tc.want)
		}
	}
}
