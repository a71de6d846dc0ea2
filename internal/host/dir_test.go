package host

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/iotest"
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

// generated is size bytes of a ChaCha8 stream, made as they are read: no
// more of it is in memory than the reader's buffer asks for.
func generated(size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1}), size)
}

// TestWriteFromStreamsAtomically: WriteFrom writes what the reader yields,
// with the mode asked for, holding no more of a 64 MiB stream in memory
// than a copy buffer; a reader that fails part-way leaves the old contents
// and no temporary file.
func TestWriteFromStreamsAtomically(t *testing.T) {
	const size = 64 << 20
	d := &Dir{Root: t.TempDir()}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := d.WriteFrom("/var/lib/etcd/member/snap/db", generated(size), 0o600); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("streaming %d MiB allocated %d KiB", size>>20, alloc>>10)
	}
	want := sha256.New()
	io.Copy(want, generated(size))
	f, err := os.Open(d.Path("/var/lib/etcd/member/snap/db"))
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, f)
	f.Close()
	if err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("written file: %d bytes (%v), same bytes %t; want %d", n, err, bytes.Equal(got.Sum(nil), want.Sum(nil)), size)
	}
	if st, _ := d.Stat("/var/lib/etcd/member/snap/db"); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}

	broken := io.MultiReader(generated(1<<20), iotest.ErrReader(errors.New("disk gone")))
	if err := d.WriteFrom("/var/lib/etcd/member/snap/db", broken, 0o600); err == nil {
		t.Fatal("a failing reader was written")
	}
	if st, err := d.Stat("/var/lib/etcd/member/snap/db"); err != nil || st.Size() != size {
		t.Fatalf("after a failed write: %v, %v; want the old %d bytes", st, err, size)
	}
	entries, _ := d.ReadDir("/var/lib/etcd/member/snap")
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporaries left)", len(entries))
	}
}

// BenchmarkWriteFrom streams 16 MiB: B/op stays a copy buffer's, not the
// file's size.
func BenchmarkWriteFrom(b *testing.B) {
	const size = 16 << 20
	d := &Dir{Root: b.TempDir()}
	b.ReportAllocs()
	b.SetBytes(size)
	for b.Loop() {
		if err := d.WriteFrom("/db", generated(size), 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
