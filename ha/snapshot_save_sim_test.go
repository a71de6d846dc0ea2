package ha_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"
)

// TestSnapshotSaveThroughASwappedPrivateDir: `stratum snapshot save` into a
// directory another user may write (not sticky: their own backup directory)
// makes its private directory there, and that user renames it away the
// moment it appears and puts a link to a directory of theirs under its name,
// holding a snapshot.db.part of mode 0666 for clientv3 to write through. The
// save goes on in the directory it made, through its open descriptor: the
// trap is untouched, and the snapshot is root's file, mode 0600, with the
// data.
func TestSnapshotSaveThroughASwappedPrivateDir(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	putMany(t, ctx, cp1, "saved", 20)
	dir, theirs := t.TempDir(), t.TempDir()
	trap := filepath.Join(theirs, "snapshot.db.part")
	if err := os.WriteFile(trap, []byte("trap"), 0o666); err != nil {
		t.Fatal(err)
	}
	swapped := false
	ha.OnSnapshotPrivateDir(t, func(private string) {
		if !strings.HasPrefix(private, dir+string(filepath.Separator)) {
			return // another test's save
		}
		if err := os.Rename(private, private+".moved"); err != nil {
			t.Errorf("moving the private directory away: %v", err)
			return
		}
		if err := os.Symlink(theirs, private); err != nil {
			t.Errorf("linking theirs in its place: %v", err)
			return
		}
		swapped = true
	})
	snap := filepath.Join(dir, "etcd.db")
	ss, err := joinNodeOn(cp1).SnapshotSave(ctx, snap)
	if err != nil {
		t.Fatalf("snapshot save through a swapped private directory: %v", err)
	}
	if !swapped {
		t.Fatal("the private directory was never swapped: the test tested nothing")
	}
	if b, err := os.ReadFile(trap); err != nil || string(b) != "trap" {
		t.Fatalf("the save wrote through the link into the other user's %s: %q, %v", trap, b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(theirs, "snapshot.db*")); len(left) != 1 {
		t.Fatalf("the other user's directory holds %v after the save, want only their trap", left)
	}
	if fi, err := os.Lstat(snap); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the saved snapshot %s: %v, %v; want a regular file of mode 0600", snap, fi, err)
	}
	if ss.Revision <= 1 || ss.TotalKeys < 20 {
		t.Fatalf("the saved snapshot's status: %+v, want the 20 keys written", ss)
	}
}
