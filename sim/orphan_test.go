package sim

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/version"
)

// orphanChildEnv switches TestNoServerOutlivesKilledTestProcess, re-run as a
// child, into the test process that gets killed; its value is the directory
// the child's simulation lives in.
const orphanChildEnv = "STRATUM_SIM_ORPHAN_CHILD"

// TestNoServerOutlivesKilledTestProcess runs a simulation with every kind of
// server process (kube-apiserver, kube-controller-manager, an etcd process) in
// a child test process, SIGKILLs that process, and checks that none of its
// servers survives it: no Close, no cleanup, no ReapOrphans sweep runs. The
// simulation lives outside any stratum-sim-* directory, so that the sweep other
// test binaries on the machine run at every New cannot reap a survivor and
// hide it.
func TestNoServerOutlivesKilledTestProcess(t *testing.T) {
	if dir := os.Getenv(orphanChildEnv); dir != "" {
		runKilledChild(t, dir)
		return
	}
	assetstest.Require(t)
	simDir := filepath.Join(t.TempDir(), "killed-child")
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoServerOutlivesKilledTestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanChildEnv+"="+simDir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir := readRootDir(t, cmd, out)
	if dir != simDir {
		t.Fatalf("child simulation in %s, want %s", dir, simDir)
	}
	t.Cleanup(func() { cleanUpAfterChild(dir) })
	if n := len(SimProcesses(dir)); n != 3 {
		t.Errorf("child runs %d server processes (%v), want 3 (etcd, kube-apiserver, kube-controller-manager)", n, SimProcesses(dir))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(SimProcesses(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if pids := SimProcesses(dir); len(pids) > 0 {
		t.Fatalf("server processes outlived the SIGKILLed test process by 10 s: %v", pids)
	}
}

// runKilledChild is the child: it starts the simulation, prints its root
// directory and waits to be killed.
func runKilledChild(t *testing.T, dir string) {
	c := Start(t, Config{ControlPlanes: 1, APIServers: true, ControllerManager: true, Dir: dir,
		EtcdVersions: map[string]string{"cp1": version.EtcdPrevious}})
	os.Stdout.WriteString("ROOTDIR=" + c.RootDir() + "\n")
	time.Sleep(2 * time.Minute)
	t.Fatal("the parent test did not kill this child")
}

// readRootDir reads the child's output until it names its simulation's root
// directory; a child that ends or takes over 3 minutes first is killed and
// fails the test.
func readRootDir(t *testing.T, cmd *exec.Cmd, out interface{ Read([]byte) (int, error) }) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if dir, ok := strings.CutPrefix(sc.Text(), "ROOTDIR="); ok {
				found <- dir
			}
		}
		close(found)
	}()
	select {
	case dir, ok := <-found:
		if ok {
			return dir
		}
	case <-time.After(3 * time.Minute):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	t.Fatal("the child test process never reported its simulation directory")
	return ""
}

// cleanUpAfterChild kills what the child left (only processes naming its own
// directory) and removes the directory, so a failing run leaves nothing.
func cleanUpAfterChild(dir string) {
	for _, pid := range SimProcesses(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(200 * time.Millisecond)
	_ = os.RemoveAll(dir)
}
