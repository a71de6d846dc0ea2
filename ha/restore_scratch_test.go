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
