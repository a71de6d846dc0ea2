package ha_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain sets rapid's budget for this package's properties (the disk-fault
// ones, each case of which starts real servers) unless the command line
// gives one: 3 checks instead of rapid's 100, and no shrinking (each run of
// a shrunk case starts the servers again, and rapid checks its shrink time
// only between passes, which here run past the test's timeout; a failing
// case's draws, seed and failfile are printed as always).
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.checks"] && os.Getenv("RAPID_CHECKS") == "" {
		_ = flag.Set("rapid.checks", "3")
	}
	if !set["rapid.shrinktime"] && os.Getenv("RAPID_SHRINKTIME") == "" {
		_ = flag.Set("rapid.shrinktime", "0s")
	}
	os.Exit(runInPrivateTempDir(m))
}

// runInPrivateTempDir runs the tests with TMPDIR a directory of their own,
// removed after them: a test that crashes a simulated host mid-restore
// freezes the restore for good, as a power cut would, so the scratch copy
// it made under the temporary directory is never removed by the restore
// itself.
func runInPrivateTempDir(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ha-")
	if err != nil {
		return m.Run()
	}
	defer os.RemoveAll(dir)
	os.Setenv("TMPDIR", dir)
	return m.Run()
}
