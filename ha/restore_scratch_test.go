package ha

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSweepRestoreScratchRemovesOnlyAbandonedOnes: a scratch directory no
// restore (or snapshot save, beside the file it saves) holds is removed; one
// a restore holds (its lock taken, here by this process), one just made, a
// symlink and anything not named as a scratch directory stay.
func TestSweepRestoreScratchRemovesOnlyAbandonedOnes(t *testing.T) {
	for _, family := range []struct {
		prefix string
		sweep  func(dir string)
	}{
		{restoreScratchPrefix + "4242-", func(string) { sweepRestoreScratch() }},
		{snapshotScratchPrefix, func(dir string) { sweepScratch(dir, snapshotScratchPrefix) }},
	} {
		t.Run(family.prefix, func(t *testing.T) { checkScratchSweep(t, family.prefix, family.sweep) })
	}
}

func checkScratchSweep(t *testing.T, prefix string, sweep func(dir string)) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	other := t.TempDir() // a symlink's target, outside the temporary directory
	type dir struct {
		name                string
		old, locked, marked bool
		kept                bool
	}
	dirs := []dir{
		{name: prefix + "1", old: true, marked: true, kept: false},
		{name: prefix + "2", old: true, locked: true, marked: true, kept: true},
		{name: prefix + "3", marked: true, kept: true},
		{name: "other-4242-4", old: true, marked: true, kept: true},
		// A user's own directory whose name matches (an archive of
		// snapshots beside the one being saved): not stratum's.
		{name: prefix + "archive", old: true, kept: true},
	}
	long := time.Now().Add(-2 * restoreScratchGrace)
	for _, d := range dirs {
		p := filepath.Join(tmp, d.name)
		if err := os.MkdirAll(filepath.Join(p, "etcd", "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		if d.marked {
			if err := os.WriteFile(filepath.Join(p, scratchMarker), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if d.old {
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
		if d.locked {
			held, err := lockScratch(p, syscall.LOCK_EX)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
		}
	}
	link := filepath.Join(tmp, prefix+"5")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	sweep(tmp)
	for _, d := range dirs {
		_, err := os.Stat(filepath.Join(tmp, d.name))
		if d.kept && err != nil {
			t.Errorf("%s was removed: %v", d.name, err)
		}
		if !d.kept && err == nil {
			t.Errorf("%s, a scratch directory no restore holds, was kept", d.name)
		}
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the symlink %s was removed: %v", link, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the symlink's target was removed: %v", err)
	}
}

// TestRestoreTempDirAvoidsATmpfs: a restore's scratch copies (as large as
// the cluster's data, made while etcd and the apiserver run) go to $TMPDIR
// when set, else to /tmp, or to /var/tmp when /tmp is a tmpfs, whose memory
// they would take from etcd and the apiserver.
func TestRestoreTempDirAvoidsATmpfs(t *testing.T) {
	fsType := func(t int64, err error) func(string) (int64, error) {
		return func(string) (int64, error) { return t, err }
	}
	const ext4 = 0xef53
	for _, c := range []struct {
		name, tmpdir string
		fsType       func(string) (int64, error)
		want         string
	}{
		{"TMPDIR set", "/srv/scratch", fsType(tmpfsMagic, nil), "/srv/scratch"},
		{"/tmp on disk", "", fsType(ext4, nil), "/tmp"},
		{"/tmp a tmpfs", "", fsType(tmpfsMagic, nil), "/var/tmp"},
		{"/tmp unknown", "", fsType(0, syscall.ENOENT), "/tmp"},
	} {
		if got := restoreTempDir(c.tmpdir, c.fsType); got != c.want {
			t.Errorf("%s: restoreTempDir = %s, want %s", c.name, got, c.want)
		}
	}
	// This machine's own /tmp, as statfs reads it.
	if typ, err := fsTypeOf("/tmp"); err != nil {
		t.Fatalf("statfs /tmp: %v", err)
	} else if got := restoreTempDir("", fsTypeOf); (typ == tmpfsMagic) != (got == "/var/tmp") {
		t.Errorf("with /tmp of type %#x, restoreTempDir = %s", typ, got)
	}
}
