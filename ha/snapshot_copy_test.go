package ha

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"stratum.dev/stratum/internal/host"
)

// TestCopyTreeToHostStreams: a restored data directory is copied whole —
// directories 0700, files with their modes and bytes — and a large file is
// streamed, not read into memory: copying a 32 MiB database allocates far
// less than its size (os.ReadFile would allocate all of it).
func TestCopyTreeToHostStreams(t *testing.T) {
	const size = 32 << 20
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "member", "snap"), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := os.OpenFile(filepath.Join(src, "member", "snap", "db"), os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(db, sum), io.LimitReader(rand.NewChaCha8([32]byte{7}), size)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "member", "wal.0"), []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}

	d := &host.Dir{Root: t.TempDir()}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := copyTreeToHost(d, src, "/var/lib/etcd"); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("copying a %d MiB tree allocated %d KiB", size>>20, alloc>>10)
	if alloc > size/8 {
		t.Errorf("copying a %d MiB file allocated %d KiB: it was not streamed", size>>20, alloc>>10)
	}

	f, err := os.Open(d.Path("/var/lib/etcd/member/snap/db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := sha256.New()
	if n, err := io.Copy(got, f); err != nil || n != size {
		t.Fatalf("copied database: %d bytes, %v; want %d", n, err, size)
	}
	if !bytes.Equal(got.Sum(nil), sum.Sum(nil)) {
		t.Fatal("copied database differs from the source")
	}
	if wal, err := d.ReadFile("/var/lib/etcd/member/wal.0"); err != nil || string(wal) != "wal" {
		t.Fatalf("wal.0 = %q, %v", wal, err)
	}
	for p, want := range map[string]os.FileMode{
		"/var/lib/etcd/member":         0o700 | os.ModeDir,
		"/var/lib/etcd/member/snap":    0o700 | os.ModeDir,
		"/var/lib/etcd/member/snap/db": 0o640,
		"/var/lib/etcd/member/wal.0":   0o600,
	} {
		st, err := d.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, st.Mode(), want)
		}
	}
}
