package sim

import (
	"context"
	"os"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/version"
)

// TestCloseLeavesNoProcess starts every kind of process the simulator runs and
// checks none outlives Close, also when the test using it failed.
func TestCloseLeavesNoProcess(t *testing.T) {
	assetstest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := New(ctx, Config{ControlPlanes: 1, APIServers: true, ControllerManager: true,
		EtcdVersions: map[string]string{"cp1": version.EtcdPrevious}})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.RootDir()
	if n := len(SimProcesses(dir)); n != 3 {
		t.Errorf("running processes = %d (%v), want 3 (etcd, apiserver, controller manager)", n, SimProcesses(dir))
	}
	c.Close()
	if pids := SimProcesses(dir); len(pids) != 0 {
		t.Fatalf("processes outlived Close: %v", pids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("host roots not removed: %v", err)
	}
}
