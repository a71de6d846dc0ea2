package ha

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepRestoreScratchRemovesOnlyDeadRestores: a scratch directory whose
// restore process is gone is removed; one of a running process (pid 1, this
// test's own) and anything not named as a scratch directory stay.
func TestSweepRestoreScratchRemovesOnlyDeadRestores(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{ // name: kept
		fmt.Sprintf("%s%d-123", restoreScratchPrefix, gone.Process.Pid): false,
		fmt.Sprintf("%s%d-456", restoreScratchPrefix, os.Getpid()):      true,
		fmt.Sprintf("%s1-789", restoreScratchPrefix):                    true,
		restoreScratchPrefix + "12345678":                               true, // an older stratum's, no pid
		fmt.Sprintf("other-%d-123", gone.Process.Pid):                   true,
	}
	for d := range dirs {
		if err := os.MkdirAll(filepath.Join(tmp, d, "etcd", "member"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepRestoreScratch()
	for d, kept := range dirs {
		_, err := os.Stat(filepath.Join(tmp, d))
		if kept && err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
		if !kept && err == nil {
			t.Errorf("%s, the scratch of a restore whose process is gone, was kept", d)
		}
	}
}
