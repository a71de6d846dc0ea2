package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/nodestate"
)

// TestControlPlaneUnderSystemd runs the unit `stratum install` writes under a
// real systemd: a machine booted into systemd (systemd-nspawn, PID 1 its
// own) on which a control plane is brought up by hand, then handed to the
// unit with the two lines docs/real-hosts.md gives ("At boot"), and judged
// from outside with systemctl, kubectl through the VIP and the processes
// themselves:
//
//   - `systemctl enable --now stratum` returns once the control plane
//     serves (Type=notify): kubectl through the VIP answers at once, and
//     systemd's status text is the supervisor's;
//   - the supervisor SIGKILLed: the etcd and kube-apiserver it ran end with
//     it (their parent-death signal; systemd kills whatever else is left of
//     the unit), systemd starts it again (Restart=always), and it brings the
//     control plane back over its own stale control socket;
//   - `stratum upgrade node` of a next release: the same main PID runs it
//     (execve), the unit is active throughout with no restart counted, the
//     new stratum's READY comes back over the notify socket, and the unit
//     rewritten to run it is loaded (daemon-reload, no reload pending);
//   - `systemctl stop` stops every service and releases the VIP;
//   - a power-off and a boot: systemd starts the control plane from the
//     enabled unit, the data written before served again;
//   - `stratum reset`: the supervisor ends, and the unit's condition (no
//     node state) skips systemd's restart of it, so nothing starts again.
func TestControlPlaneUnderSystemd(t *testing.T) {
	t.Parallel() // its own machine; the other real-host tests run beside it
	requireMachines(t)
	tl := buildTools(t)
	next := buildNextRelease(t)
	nw := newNetworkNamed(t, "cp1")
	cp1 := nw.Host("cp1")
	vip := nw.VIP().String()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	assetDir := filepath.Dir(tl.etcd)
	for _, p := range []string{tl.apiserver, tl.etcdctlPath, tl.kubectlPath} {
		if filepath.Dir(p) != assetDir {
			t.Fatalf("the pinned binaries are not in one directory (%s, %s): the machine binds only %s", tl.etcd, p, assetDir)
		}
	}
	cp1.Boot(ctx, t, tl.stratumDir, filepath.Dir(next), assetDir)
	tl.installBinDir(t, cp1)
	t.Cleanup(func() {
		if t.Failed() && cp1.machine.initPid() != 0 {
			out, _, _ := cp1.Run(context.Background(), "journalctl", "--no-pager", "-n", "80", "-u", "stratum")
			t.Logf("cp1's journal of stratum.service:\n%s", out)
		}
	})

	// By hand first, as the unit starts only on a node with saved state.
	up := cp1.Start(tl.stratum, "up", "--vip", vip)
	waitSupervising(t, up, 3*time.Minute)
	o := tl.run(ctx, t, cp1, "install")
	if !strings.Contains(o, "systemctl daemon-reload") || strings.Contains(o, "not running") {
		t.Fatalf("stratum install on a machine that systemd runs does not say how to enable the unit:\n%s", o)
	}
	if err := up.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := up.Wait(); err != nil {
		t.Fatalf("the supervisor started by hand did not stop cleanly on SIGTERM: %v\n%s", err, up.Tail(20))
	}
	waitNoServers(t, cp1)

	// The two lines of docs/real-hosts.md. systemctl start returns once
	// the supervisor says READY, so the VIP answers at once.
	began := time.Now()
	if o, e, err := cp1.Run(ctx, "sh", "-c", "systemctl daemon-reload && systemctl enable --now stratum"); err != nil {
		t.Fatalf("systemctl enable --now stratum: %v\n%s%s", err, o, e)
	}
	t.Logf("systemctl enable --now stratum returned after %s", time.Since(began).Round(100*time.Millisecond))
	machineKubectl(ctx, t, tl, cp1, "get", "--raw", "/readyz")
	unit := unitState(ctx, t, cp1)
	if unit["ActiveState"] != "active" || unit["SubState"] != "running" || unit["Type"] != "notify" || !strings.HasPrefix(unit["StatusText"], "supervising this control plane") {
		t.Fatalf("stratum.service after systemctl start: %v, want active, running, Type=notify, the supervisor's status text", unit)
	}
	mainPID := checkMainPID(t, cp1, unit)
	machineKubectl(ctx, t, tl, cp1, "create", "configmap", "written-under-systemd", "--from-literal=k=v")

	// The supervisor dies: what it ran ends with it, and systemd starts it
	// again.
	etcdBefore := namedPIDs(t, cp1, "etcd")
	apiBefore := namedPIDs(t, cp1, "kube-apiserver")
	if err := syscall.Kill(stratumPID(t, cp1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	unit = waitUnit(ctx, t, cp1, 2*time.Minute, "restarted after its SIGKILL", func(u map[string]string) bool {
		return u["NRestarts"] == "1" && u["ActiveState"] == "active" && u["SubState"] == "running" && u["MainPID"] != strconv.Itoa(mainPID)
	})
	t.Logf("stratum.service active again %s after its supervisor was SIGKILLed (RestartSec=5)", time.Since(killed).Round(100*time.Millisecond))

	for _, pid := range append(etcdBefore, apiBefore...) {
		if st, _, ok := procState(pid); ok && st != "Z" {
			t.Fatalf("pid %d (etcd or kube-apiserver of the killed supervisor) still runs after systemd restarted the unit", pid)
		}
	}
	mainPID = checkMainPID(t, cp1, unit)
	machineKubectl(ctx, t, tl, cp1, "get", "--raw", "/readyz")

	// The next release, in place: the same process, as systemd sees it.
	const newBin = "/var/lib/stratum/releases/next/bin"
	tl.installBinDirAt(t, cp1.MachinePath(newBin))
	o = runStratum(ctx, t, cp1, next, "upgrade", "node", "--bin-dir", newBin)
	if !strings.Contains(o, "upgraded to stratum "+nextVersion) {
		t.Fatalf("upgrade node under systemd did not say the node was upgraded:\n%s", o)
	}
	unit = waitUnit(ctx, t, cp1, 30*time.Second, "running the next release, READY again", func(u map[string]string) bool {
		return strings.HasPrefix(u["StatusText"], "supervising this control plane")
	})
	if unit["MainPID"] != strconv.Itoa(mainPID) || unit["NRestarts"] != "1" || unit["ActiveState"] != "active" {
		t.Fatalf("stratum.service after upgrade node: %v, want main PID %d kept, no further restart, active", unit, mainPID)
	}
	if unit["NeedDaemonReload"] != "no" || !strings.Contains(unit["ExecStart"], "path="+next+" ") || !strings.Contains(unit["ExecStart"], "--bin-dir "+newBin) {
		t.Fatalf("stratum.service after upgrade node: ExecStart %q, NeedDaemonReload %s; want the next release's stratum and bin directory, loaded", unit["ExecStart"], unit["NeedDaemonReload"])
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", stratumPID(t, cp1))); err != nil || filepath.Base(exe) != "stratum" || exe == tl.stratum {
		t.Fatalf("the unit's main process runs %q (%v), want the next release's stratum", exe, err)
	}
	var status struct {
		SupervisorProcess struct{ Version, State string }
	}
	if err := json.Unmarshal([]byte(runStratum(ctx, t, cp1, next, "status", "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if sp := status.SupervisorProcess; sp.Version != nextVersion || sp.State != "supervising" {
		t.Fatalf("stratum status after the upgrade under systemd: %+v, want %s supervising", sp, nextVersion)
	}

	// Stopped: nothing left, the VIP released.
	if o, e, err := cp1.Run(ctx, "systemctl", "stop", "stratum"); err != nil {
		t.Fatalf("systemctl stop stratum: %v\n%s%s", err, o, e)
	}
	if unit = unitState(ctx, t, cp1); unit["ActiveState"] != "inactive" || unit["Result"] != "success" {
		t.Fatalf("stratum.service after systemctl stop: %v, want inactive with result success", unit)
	}
	waitNoServers(t, cp1)
	if addrs, err := ipOut(ctx, "-n", cp1.NetNS(), "-o", "addr", "show", "dev", hostIf); err != nil || strings.Contains(addrs, " "+vip+"/") {
		t.Fatalf("the VIP %s is still on cp1 after systemctl stop (%v):\n%s", vip, err, addrs)
	}

	// A power-off and a boot: the enabled unit brings the control plane back.
	cp1.PowerOff(ctx, t)
	if _, err := os.Stat(cp1.MachinePath(nodestate.Path)); err != nil {
		t.Fatalf("the node state is gone after the power-off: %v", err)
	}
	booted := time.Now()
	cp1.Boot(ctx, t, tl.stratumDir, filepath.Dir(next), assetDir)
	unit = waitUnit(ctx, t, cp1, 3*time.Minute, "started at boot", func(u map[string]string) bool {
		return u["ActiveState"] == "active" && strings.HasPrefix(u["StatusText"], "supervising this control plane")
	})
	t.Logf("stratum.service active %s after the boot began", time.Since(booted).Round(100*time.Millisecond))
	checkMainPID(t, cp1, unit)
	if got := machineKubectl(ctx, t, tl, cp1, "get", "configmap", "written-under-systemd", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Fatalf("the ConfigMap written before the power-off reads %q after the boot, want v", got)
	}

	// Reset: the supervisor ends, nothing left to run, and the restart
	// systemd then makes is skipped by the unit's condition (no node
	// state): no loop of starts.
	if o = tl.run(ctx, t, cp1, "reset", "--force"); !strings.Contains(o, "the stratum supervisor on this node ended") {
		t.Fatalf("stratum reset --force under the unit did not end the supervisor:\n%s", o)
	}
	unit = waitUnit(ctx, t, cp1, time.Minute, "skipped by its condition after the reset", func(u map[string]string) bool {
		return u["ActiveState"] == "inactive" && u["ConditionResult"] == "no"
	})
	waitNoServers(t, cp1)
	t.Logf("stratum.service after stratum reset --force: %v", unit)
}

// unitProperties are what the test reads of stratum.service.
var unitProperties = []string{"ActiveState", "SubState", "Result", "Type", "MainPID", "NRestarts", "StatusText", "NeedDaemonReload", "ExecStart", "ConditionResult"}

// unitState is `systemctl show stratum` of unitProperties.
func unitState(ctx context.Context, t *testing.T, h *host) map[string]string {
	t.Helper()
	args := []string{"systemctl", "show", "stratum"}
	for _, p := range unitProperties {
		args = append(args, "-p", p)
	}
	out, errOut, err := h.Run(ctx, args...)
	if err != nil {
		t.Fatalf("systemctl show stratum on %s: %v\n%s", h.Name(), err, errOut)
	}
	props := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		props[k] = v
	}
	return props
}

// waitUnit waits until stratum.service's properties satisfy ok, failing t
// after within.
func waitUnit(ctx context.Context, t *testing.T, h *host, within time.Duration, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		u := unitState(ctx, t, h)
		if ok(u) {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("stratum.service on %s not %s within %s: %v", h.Name(), what, within, u)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkMainPID checks that the unit's main process is the one stratum
// running in h, and returns its pid as the machine sees it.
func checkMainPID(t *testing.T, h *host, unit map[string]string) int {
	t.Helper()
	inMachine, err := pidInMachine(stratumPID(t, h))
	if err != nil {
		t.Fatal(err)
	}
	if unit["MainPID"] != strconv.Itoa(inMachine) {
		t.Fatalf("stratum.service's main PID is %s, but the stratum running on %s is pid %d there", unit["MainPID"], h.Name(), inMachine)
	}
	return inMachine
}

// machineKubectl runs kubectl on a booted host with the admin kubeconfig
// (its server the VIP), its cache in the machine's own /root.
func machineKubectl(ctx context.Context, t *testing.T, tl *tools, h *host, args ...string) string {
	t.Helper()
	full := append([]string{tl.kubectlPath, "--kubeconfig=/etc/stratum/admin.conf", "--cache-dir=/root/.kube/cache", "--request-timeout=10s"}, args...)
	out, errOut, err := h.Run(ctx, full...)
	if err != nil {
		t.Fatalf("kubectl %s on %s: %v\n%s%s", strings.Join(args, " "), h.Name(), err, out, errOut)
	}
	return out
}
