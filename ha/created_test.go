package ha

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// TestCreatedFilesUndoRemovesWhatItCreatedOnly: a refused join's undo
// removes the files and the directories it created (a file's missing
// parents too), puts back the contents of a file it overwrote, and keeps a
// directory something else wrote into.
func TestCreatedFilesUndoRemovesWhatItCreatedOnly(t *testing.T) {
	root := t.TempDir()
	local := &host.Local{Dir: host.Dir{Root: root}}
	mustWrite := func(p string) {
		t.Helper()
		if err := local.WriteFile(p, []byte("before"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite("/etc/stratum/kept.conf")
	if err := local.MkdirAll("/var/log/stratum", 0o755); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, root)

	c := &createdFiles{Host: local}
	for _, p := range []string{"/etc/stratum/bootstrap.conf", "/etc/stratum/kept.conf"} {
		if err := c.WriteFile(p, []byte("join"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A streamed write is recorded as a whole one is.
	if err := c.WriteFrom("/etc/stratum/pki/etcd/ca.crt", strings.NewReader("join"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{version.PKIDir, version.EtcdPKIDir, version.StateDir, "/var/log/stratum"} {
		if err := c.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.MkdirAll("/var/lib/other/deep", 0o700); err != nil {
		t.Fatal(err)
	}
	// Something else writes into a directory the join created: it stays.
	if err := os.WriteFile(filepath.Join(root, "var/lib/other/deep/theirs"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.undo(); err != nil {
		t.Fatal(err)
	}
	want := append(before, "/var/lib", "/var/lib/other", "/var/lib/other/deep", "/var/lib/other/deep/theirs")
	sort.Strings(want)
	if diff := cmp.Diff(want, listTree(t, root)); diff != "" {
		t.Fatalf("after undo (-want +got):\n%s", diff)
	}
	if data, _ := local.ReadFile("/etc/stratum/kept.conf"); string(data) != "before" {
		t.Fatalf("a file that existed before, overwritten by the join, after the undo: %q, want its contents from before", data)
	}
	if fi, err := local.Stat("/etc/stratum/kept.conf"); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the file put back: %v, %v; want its mode from before, 0644", fi, err)
	}
}

// listTree lists every path under root, as host paths.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			out = append(out, "/"+mustRel(t, root, p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func mustRel(t *testing.T, root, p string) string {
	t.Helper()
	r, err := filepath.Rel(root, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
