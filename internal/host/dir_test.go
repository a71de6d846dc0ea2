package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileIsUnderRootAndAtomic(t *testing.T) {
	root := t.TempDir()
	d := &Dir{Root: root}
	if err := d.WriteFile("/etc/stratum/pki/ca.key", []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("/etc/stratum/pki/ca.key", []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(root, "etc/stratum/pki/ca.key")
	got, err := os.ReadFile(real)
	if err != nil || string(got) != "two" {
		t.Fatalf("file under root = %q, %v; want \"two\"", got, err)
	}
	st, _ := os.Stat(real)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(real))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporaries left)", len(entries))
	}
}

func TestPathCannotEscapeRoot(t *testing.T) {
	d := &Dir{Root: "/srv/host1"}
	for _, p := range []string{"/../../etc/passwd", "../x", "/a/../../b"} {
		got := d.Path(p)
		if rel, err := filepath.Rel("/srv/host1", got); err != nil || rel == ".." || filepath.IsAbs(rel) || len(rel) >= 2 && rel[:2] == ".." {
			t.Errorf("Path(%q) = %q escapes the root", p, got)
		}
	}
}

func TestRemoveMissingIsFine(t *testing.T) {
	d := &Dir{Root: t.TempDir()}
	if err := d.Remove("/nope"); err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveAll("/"); err == nil {
		t.Fatal("RemoveAll of the host root was allowed")
	}
}

func TestLockNamesHolderAndReleases(t *testing.T) {
	root := t.TempDir()
	a := &Dir{Root: root}
	b := &Dir{Root: root} // another process on the same machine
	release, err := a.Lock("maintenance", "stratum etcd rejoin (pid 42)")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Lock("maintenance", "stratum server")
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.Holder != "stratum etcd rejoin (pid 42)" {
		t.Fatalf("second lock = %v, want a LockedError naming the holder", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	r2, err := b.Lock("maintenance", "stratum server")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	r2()
}

func TestDropLocksReleasesLikeADeadProcess(t *testing.T) {
	root := t.TempDir()
	a := &Dir{Root: root}
	if _, err := a.Lock("etcd-data", "join"); err != nil {
		t.Fatal(err)
	}
	a.DropLocks()
	b := &Dir{Root: root}
	r, err := b.Lock("etcd-data", "rejoin")
	if err != nil {
		t.Fatalf("lock after DropLocks: %v", err)
	}
	r()
}

func TestReadMissingMatchesNotExist(t *testing.T) {
	d := &Dir{Root: t.TempDir()}
	if _, err := d.ReadFile("/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file = %v", err)
	}
}
