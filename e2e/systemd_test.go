package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/nodestate"
)

// TestControlPlaneUnderSystemd runs the unit `stratum install` writes under a
// real systemd, on three machines booted into systemd (systemd-nspawn, PID 1
// their own), as docs/real-hosts.md tells it ("At boot", "Upgrading"), judged
// from outside with systemctl, kubectl through the VIP, etcdctl and the
// processes themselves:
//
//   - cp1 brought up by hand, then handed to the unit with the two lines
//     `systemctl daemon-reload && systemctl enable --now stratum`, which
//     return once the control plane serves (Type=notify): kubectl through
//     the VIP answers at once, and systemd's status text is the supervisor's;
//   - its supervisor SIGKILLed: the etcd and kube-apiserver it ran end with
//     it, systemd starts it again (Restart=always), and it brings the control
//     plane back over its own stale control socket;
//   - cp2 joined as automation would, the printed command with --install:
//     it returns once systemd's unit serves (two voters: said); cp3 joined
//     by hand and handed over with `stratum install --now`: first refused
//     with nothing changed while cp2's unit is stopped
//     (a member down: its restart could take the quorum), then a dry run
//     changing nothing, then done while the VIP answers (no gap of 10 s);
//     run again on cp2, it finds nothing to hand over;
//   - `stratum upgrade node` of a next release rolled across the three units,
//     one at a time: each unit's main PID runs it (execve), active with no
//     restart counted, the new stratum's READY back over the notify socket,
//     the rewritten unit loaded; `upgrade plan` then finds all three up to
//     date; then cp3 is rolled back the same way, by the release under
//     test's stratum;
//   - `systemctl stop` on the VIP holder stops every service and releases the
//     VIP, which another control plane takes; then `stratum install --now`,
//     with nothing running, starts the unit again;
//   - the power fails on all three, two releases among them, at once (every
//     process killed, nothing stopped in order), and they boot together:
//     each enabled unit starts, each stratum waits for the others' members,
//     and the cluster serves the data written before, three healthy voters;
//   - `stratum reset --force` on cp3: its supervisor ends, the unit's
//     condition (no node state) skips systemd's restart, and the other two
//     serve on;
//   - cp2 reset too, then cp1, the last member; then a cluster built again
//     as automation builds one: `stratum up --vip --install` on cp1, which
//     returns with its unit serving, then cp2 and cp3 joined at once, the
//     printed command with --install on each: both return with their units
//     serving, three healthy voters;
//   - the VIP holder powered off in order (`systemctl poweroff`): its
//     services stopped, the VIP released and taken by another while
//     kubectl through it answers, and powered on, its unit serves again.
func TestControlPlaneUnderSystemd(t *testing.T) {
	t.Parallel() // its own machines; the other real-host tests run beside it
	requireMachines(t)
	tl := buildTools(t)
	next := buildNextRelease(t)
	nw := newNetworkNamed(t, "cp1", "cp2", "cp3")
	cp1, cp2, cp3 := nw.Host("cp1"), nw.Host("cp2"), nw.Host("cp3")
	machines := nw.Hosts()
	vip := nw.VIP().String()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	assetDir := filepath.Dir(tl.etcd)
	for _, p := range []string{tl.apiserver, tl.etcdctlPath, tl.kubectlPath} {
		if filepath.Dir(p) != assetDir {
			t.Fatalf("the pinned binaries are not in one directory (%s, %s): the machines bind only %s", tl.etcd, p, assetDir)
		}
	}
	shared := []string{tl.stratumDir, filepath.Dir(next), assetDir}
	for _, h := range machines {
		h.Boot(ctx, t, shared...)
		tl.installBinDir(t, h)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, h := range machines {
			if h.machine.initPid() != 0 {
				out, _, _ := h.Run(context.Background(), "journalctl", "--no-pager", "-n", "60", "-u", "stratum")
				t.Logf("%s's journal of stratum.service:\n%s", h.Name(), out)
			}
		}
	})

	// cp1 by hand first, as the unit starts only on a node with saved state,
	// then the two lines of docs/real-hosts.md. systemctl start returns once
	// the supervisor says READY, so the VIP answers at once.
	up := cp1.Start(tl.stratum, "up", "--vip", vip)
	waitSupervising(t, up, 3*time.Minute)
	o := tl.run(ctx, t, cp1, "install")
	if !strings.Contains(o, "systemctl daemon-reload") || !strings.Contains(o, "stratum install --now") || strings.Contains(o, "not running") {
		t.Fatalf("stratum install on a machine that systemd runs does not say how to enable the unit:\n%s", o)
	}
	if err := up.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := up.Wait(); err != nil {
		t.Fatalf("the supervisor started by hand did not stop cleanly on SIGTERM: %v\n%s", err, up.Tail(20))
	}
	waitNoServers(t, cp1)
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
	checkMainPID(t, cp1, unit)
	machineKubectl(ctx, t, tl, cp1, "get", "--raw", "/readyz")

	// cp2 and cp3 join by hand with the command as printed, and each is
	// handed to its unit with `stratum install --now`.
	join, _ := joinCommands(t, tl.run(ctx, t, cp1, "token", "create", "--control-plane"))
	// cp2 as automation joins: the printed command with --install, which
	// returns once systemd's unit serves the control plane.
	began = time.Now()
	installCtx, installDone := context.WithTimeout(ctx, 3*time.Minute)
	o, e, err := cp2.Run(installCtx, tl.shell(join+" --install")...)
	installDone()
	if err != nil || !strings.Contains(o, "note: the cluster has 2 etcd voters") || !strings.Contains(o, "handing this control plane to systemd's stratum.service") ||
		!strings.Contains(o, "stratum.service runs this control plane") || strings.Contains(o, handOverHint(tl)) {
		t.Fatalf("the join command with --install on cp2, the second of two voters: %v, want exit 0 within 3 minutes noting the quorum, handing over (no hint to) and the unit serving\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	t.Logf("the join command with --install on cp2 returned after %s; its last lines:\n%s", time.Since(began).Round(100*time.Millisecond), tail(o, 12))
	checkUnitServes(ctx, t, tl, cp2)
	hand3 := cp3.Start(tl.shell(join)...)
	waitSupervising(t, hand3, 3*time.Minute)
	// Refused, nothing written or stopped, while a member is down: cp2's
	// unit stopped.
	if o, e, err := cp2.Run(ctx, "systemctl", "stop", "stratum"); err != nil {
		t.Fatalf("systemctl stop stratum on cp2: %v\n%s%s", err, o, e)
	}
	pid3 := stratumPID(t, cp3)
	if o, e, err := cp3.Run(ctx, tl.stratum, "install", "--now"); exitCode(err) != refusedExit || !strings.Contains(e, "could take its quorum") || !strings.Contains(e, "nothing was written or changed") {
		t.Fatalf("stratum install --now on cp3 with cp2's member down = %v, want a refusal (exit %d) naming the quorum\nstdout:\n%s\nstderr:\n%s", err, refusedExit, o, e)
	} else {
		t.Logf("stratum install --now on cp3 with cp2 stopped, refused: %s", firstLine(e))
	}
	if _, err := os.Stat(cp3.MachinePath("/etc/systemd/system/stratum.service")); err == nil || stratumPID(t, cp3) != pid3 {
		t.Fatalf("a refused install --now on cp3 wrote the unit (%v) or stopped the supervisor (pid %d, was %d)", err, stratumPID(t, cp3), pid3)
	}
	if o, e, err := cp2.Run(ctx, "systemctl", "start", "stratum"); err != nil {
		t.Fatalf("systemctl start stratum on cp2: %v\n%s%s", err, o, e)
	}
	waitVoters(ctx, t, tl, cp1, 3)
	waitHealthy(ctx, t, tl, cp3)
	if o := runStratum(ctx, t, cp3, tl.stratum, "install", "--now", "--dry-run"); !strings.Contains(o, "ExecStart=") || !strings.Contains(o, fmt.Sprintf("stop the supervisor started by hand (pid %d", pidIn(t, pid3))) {
		t.Fatalf("stratum install --now --dry-run on cp3 does not print the unit and the steps:\n%s", o)
	}
	if _, err := os.Stat(cp3.MachinePath("/etc/systemd/system/stratum.service")); err == nil || stratumPID(t, cp3) != pid3 {
		t.Fatalf("install --now --dry-run on cp3 wrote the unit (%v) or stopped the supervisor (pid %d, was %d)", err, stratumPID(t, cp3), pid3)
	}
	probe := probeVIP(ctx, tl, cp1)
	if o = handToUnit(ctx, t, tl, cp3, hand3); strings.Contains(o, "etcd voters") {
		t.Fatalf("stratum install --now on the third of three healthy voters noted the quorum:\n%s", o)
	}
	checkVIPGap(t, "cp3's handover", probe)
	// Run again where the unit runs the supervisor: nothing to hand over.
	unit = unitState(ctx, t, cp2)
	if o = runStratum(ctx, t, cp2, tl.stratum, "install", "--now"); !strings.Contains(o, "nothing to hand over") || !strings.Contains(o, "stratum.service runs this control plane") {
		t.Fatalf("stratum install --now again on cp2, whose unit runs its supervisor:\n%s", o)
	}
	if again := unitState(ctx, t, cp2); again["MainPID"] != unit["MainPID"] || again["NRestarts"] != unit["NRestarts"] {
		t.Fatalf("stratum install --now again on cp2 restarted its unit: %v, was %v", again, unit)
	}
	tl.etcdctl(ctx, t, cp1, "endpoint", "health", "--cluster")

	// The next release, rolled one unit at a time while the others serve.
	const newBin = "/var/lib/stratum/releases/next/bin"
	probe = probeVIP(ctx, tl, cp1)
	for _, h := range machines {
		upgradeUnderUnit(ctx, t, tl, h, next, nextVersion, newBin)
	}
	checkVIPGap(t, "the roll of three upgrades", probe)
	var plan struct{ ControlPlanes []planControlPlane }
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(time.Second) {
		if err := json.Unmarshal([]byte(runStratum(ctx, t, cp2, next, "upgrade", "plan", "-o", "json")), &plan); err != nil {
			t.Fatal(err)
		}
		upToDate := 0
		for _, c := range plan.ControlPlanes {
			if c.Stratum == nextVersion && c.Verdict == "up to date" {
				upToDate++
			}
		}
		if upToDate == 3 && len(plan.ControlPlanes) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upgrade plan after the roll: %+v, want the 3 control planes on stratum %s, up to date", plan.ControlPlanes, nextVersion)
		}
	}

	// Rolled back: cp3 to the release under test, with the same command
	// run by that release's stratum and its bin directory. The cluster
	// then runs two releases, through the power failure below.
	upgradeUnderUnit(ctx, t, tl, cp3, tl.stratum, "dev", binDir)
	waitHealthy(ctx, t, tl, cp3)

	// Stopped: nothing left, the VIP released and taken by another.
	holder := vipHolder(ctx, t, nw)
	if o, e, err := holder.Run(ctx, "systemctl", "stop", "stratum"); err != nil {
		t.Fatalf("systemctl stop stratum on %s: %v\n%s%s", holder.Name(), err, o, e)
	}
	if unit = unitState(ctx, t, holder); unit["ActiveState"] != "inactive" || unit["Result"] != "success" {
		t.Fatalf("stratum.service after systemctl stop: %v, want inactive with result success", unit)
	}
	waitNoServers(t, holder)
	if now := vipHolder(ctx, t, nw); now == holder {
		t.Fatalf("the VIP %s is still on %s after systemctl stop", vip, holder.Name())
	}
	// Started again with `stratum install --now`, nothing running: it
	// writes the unit as it is, and starts it.
	release, releaseBin := next, newBin
	if holder == cp3 {
		release, releaseBin = tl.stratum, binDir
	}
	if o = runStratum(ctx, t, holder, release, "install", "--now", "--bin-dir", releaseBin); !strings.Contains(o, "no supervisor runs here") || !strings.Contains(o, "stratum.service runs this control plane") {
		t.Fatalf("stratum install --now on %s, its unit stopped:\n%s", holder.Name(), o)
	}
	waitVoters(ctx, t, tl, cp1, 3)
	waitHealthy(ctx, t, tl, cp1)

	// The power fails everywhere at once, and the machines boot together:
	// each enabled unit starts its control plane from the node state.
	powerCut(ctx, t, machines...)
	for _, h := range machines {
		if _, err := os.Stat(h.MachinePath(nodestate.Path)); err != nil {
			t.Fatalf("%s's node state is gone after the power failure: %v", h.Name(), err)
		}
	}
	booted := time.Now()
	for _, h := range machines {
		h.PowerOn(ctx, t, shared...)
	}
	for _, h := range machines {
		waitStartedAtBoot(ctx, t, h, booted)
	}
	waitVoters(ctx, t, tl, cp2, 3)
	tl.etcdctl(ctx, t, cp2, "endpoint", "health", "--cluster")
	for _, h := range machines {
		if got := machineKubectl(ctx, t, tl, h, "get", "configmap", "written-under-systemd", "-o", "jsonpath={.data.k}"); got != "v" {
			t.Fatalf("the ConfigMap written before the power failure reads %q through the VIP on %s, want v", got, h.Name())
		}
	}

	// Reset: the supervisor ends, nothing left to run, and the restart
	// systemd then makes is skipped by the unit's condition (no node
	// state): no loop of starts. The others serve on.
	if o = runStratum(ctx, t, cp3, next, "reset", "--force"); !strings.Contains(o, "the stratum supervisor on this node ended") {
		t.Fatalf("stratum reset --force under the unit did not end the supervisor:\n%s", o)
	}
	unit = waitUnit(ctx, t, cp3, time.Minute, "skipped by its condition after the reset", func(u map[string]string) bool {
		return u["ActiveState"] == "inactive" && u["ConditionResult"] == "no"
	})
	waitNoServers(t, cp3)
	t.Logf("cp3's stratum.service after stratum reset --force: %v", unit)
	if voters := waitVoters(ctx, t, tl, cp1, 2); !slices.Equal(voters, []string{"cp1", "cp2"}) {
		t.Fatalf("etcd voters after cp3's reset: %v", voters)
	}
	machineKubectl(ctx, t, tl, cp1, "get", "--raw", "/readyz")

	// Built again from nothing as automation builds a cluster: cp2 reset
	// too, then cp1, the last member; cp1 brought up with `stratum up
	// --vip --install`, which returns once its unit serves; then the
	// printed join command with --install run on cp2 and cp3 at once.
	// etcd admits one learner at a time, and a new member only once every
	// voter has been connected 5 s, so one join's add waits while the
	// other joins and hands its control plane to its unit.
	for _, h := range []*host{cp2, cp1} {
		if o = runStratum(ctx, t, h, next, "reset", "--force"); !strings.Contains(o, "the stratum supervisor on this node ended") {
			t.Fatalf("stratum reset --force under %s's unit did not end the supervisor:\n%s", h.Name(), o)
		}
		waitUnit(ctx, t, h, time.Minute, "skipped by its condition after the reset", func(u map[string]string) bool {
			return u["ActiveState"] == "inactive" && u["ConditionResult"] == "no"
		})
		waitNoServers(t, h)
	}
	began = time.Now()
	installCtx, installDone = context.WithTimeout(ctx, 3*time.Minute)
	o, e, err = cp1.Run(installCtx, tl.shell("stratum up --vip "+vip+" --install")...)
	installDone()
	if err != nil || !strings.Contains(o, "note: this is the cluster's only control plane") || !strings.Contains(o, "stratum.service runs this control plane") {
		t.Fatalf("stratum up --vip --install on cp1: %v, want exit 0 within 3 minutes noting the one control plane and the unit serving\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	t.Logf("stratum up --vip --install on cp1 returned after %s", time.Since(began).Round(100*time.Millisecond))
	checkUnitServes(ctx, t, tl, cp1)
	machineKubectl(ctx, t, tl, cp1, "create", "configmap", "written-after-the-rebuild", "--from-literal=k=v")
	join, _ = joinCommands(t, tl.run(ctx, t, cp1, "token", "create", "--control-plane"))
	type joined struct {
		h    *host
		o, e string
		err  error
		took time.Duration
	}
	results := make(chan joined, 2)
	began = time.Now()
	for _, h := range []*host{cp2, cp3} {
		go func() {
			jctx, done := context.WithTimeout(ctx, 3*time.Minute)
			defer done()
			o, e, err := h.Run(jctx, tl.shell(join+" --install")...)
			results <- joined{h, o, e, err, time.Since(began)}
		}()
	}
	for range 2 {
		r := <-results
		if exitCode(r.err) == refusedExit && strings.Contains(r.e, "maintenance fence") {
			// A join whose fence the other took over before its add is
			// refused with nothing added (docs/cli.md); a playbook runs it
			// again. Any other refusal fails the test.
			t.Logf("%s: the join command with --install, run at once with the other's, was refused (exit 3): %s; run again", r.h.Name(), firstLine(r.e))
			jctx, done := context.WithTimeout(ctx, 3*time.Minute)
			r.o, r.e, r.err = r.h.Run(jctx, tl.shell(join+" --install")...)
			done()
			r.took = time.Since(began)
		}
		if r.err != nil || !strings.Contains(r.o, "stratum.service runs this control plane") {
			t.Fatalf("the join command with --install on %s, run at once with another's: %v, want exit 0 within 3 minutes with the unit serving\nstdout:\n%s\nstderr:\n%s", r.h.Name(), r.err, r.o, r.e)
		}
		waited := []string{}
		for _, l := range strings.Split(r.o+r.e, "\n") {
			if strings.Contains(l, "waiting for etcd to accept the member add") || strings.Contains(l, "not yet handed to systemd") {
				waited = append(waited, strings.TrimSpace(l))
			}
		}
		t.Logf("%s: the join command with --install, run at once with the other's, returned after %s; its waits: %q", r.h.Name(), r.took.Round(100*time.Millisecond), waited)
	}
	for _, h := range []*host{cp2, cp3} {
		checkUnitServes(ctx, t, tl, h)
	}
	if voters := waitVoters(ctx, t, tl, cp1, 3); !slices.Equal(voters, []string{"cp1", "cp2", "cp3"}) {
		t.Fatalf("etcd voters after the joins at once: %v", voters)
	}
	tl.etcdctl(ctx, t, cp1, "endpoint", "health", "--cluster")
	for _, h := range []*host{cp2, cp3} {
		if got := machineKubectl(ctx, t, tl, h, "get", "configmap", "written-after-the-rebuild", "-o", "jsonpath={.data.k}"); got != "v" {
			t.Fatalf("the ConfigMap written on cp1 reads %q through the VIP on %s after its join, want v", got, h.Name())
		}
	}

	// The VIP holder powered off in order (a kernel update's reboot):
	// systemd stops the unit, whose supervisor stops its services and
	// releases the VIP, which another control plane takes while the
	// cluster keeps answering; powered on, the unit brings it back.
	holder = vipHolder(ctx, t, nw)
	prober := cp1
	if holder == cp1 {
		prober = cp2
	}
	probe = probeVIP(ctx, tl, prober)
	off := time.Now()
	holder.shutDown(ctx, t, 2*time.Minute)
	t.Logf("%s, the VIP holder, powered off in order in %s", holder.Name(), time.Since(off).Round(100*time.Millisecond))
	waitNoServers(t, holder)
	if out, err := ipOut(ctx, "-n", holder.ns, "-o", "addr", "show", "dev", hostIf); err != nil || strings.Contains(out, " "+vip+"/") {
		t.Fatalf("%s's interface after its orderly power-off (%v): the VIP %s was not released:\n%s", holder.Name(), err, vip, out)
	}
	if now := vipHolder(ctx, t, nw); now == holder {
		t.Fatalf("the VIP %s is on %s, powered off", vip, holder.Name())
	}
	checkVIPGap(t, holder.Name()+"'s orderly power-off", probe)
	booted = time.Now()
	holder.PowerOn(ctx, t, shared...)
	waitStartedAtBoot(ctx, t, holder, booted)
	waitVoters(ctx, t, tl, cp1, 3)
	tl.etcdctl(ctx, t, cp1, "endpoint", "health", "--cluster")
	machineKubectl(ctx, t, tl, holder, "get", "--raw", "/readyz")
}

// waitStartedAtBoot waits for h's stratum.service, enabled, to be started
// by the boot that began at poweredOn: active, its supervisor supervising
// as the unit's main process.
func waitStartedAtBoot(ctx context.Context, t *testing.T, h *host, poweredOn time.Time) {
	t.Helper()
	unit := waitUnit(ctx, t, h, 3*time.Minute, "started at boot", func(u map[string]string) bool {
		return u["ActiveState"] == "active" && strings.HasPrefix(u["StatusText"], "supervising this control plane")
	})
	t.Logf("%s: stratum.service active %s after the power came on", h.Name(), time.Since(poweredOn).Round(100*time.Millisecond))
	checkMainPID(t, h, unit)
}

// handToUnit runs `stratum install --now` on h, whose supervisor hand runs
// (started by hand), and checks it from outside: the hand-run supervisor
// stopped cleanly, stratum.service active and running with the supervisor
// serving as its main process, enabled for the next boot, and kubectl
// through the VIP answering on h. It returns the command's output.
func handToUnit(ctx context.Context, t *testing.T, tl *tools, h *host, hand *proc) string {
	t.Helper()
	if !strings.Contains(hand.Output(), handOverHint(tl)) {
		t.Fatalf("the supervisor started by hand on %s, a machine systemd runs, does not say how to hand it to systemd:\n%s", h.Name(), hand.Tail(10))
	}
	began := time.Now()
	o := runStratum(ctx, t, h, tl.stratum, "install", "--now")
	t.Logf("stratum install --now on %s took %s:\n%s", h.Name(), time.Since(began).Round(100*time.Millisecond), o)
	if !strings.Contains(o, "stratum.service runs this control plane") {
		t.Fatalf("stratum install --now on %s did not say the unit runs the control plane:\n%s", h.Name(), o)
	}
	select {
	case <-hand.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the supervisor started by hand on %s still runs after stratum install --now returned", h.Name())
	}
	if err := hand.Wait(); err != nil || !strings.Contains(hand.Output(), "stopping the control plane") {
		t.Fatalf("the supervisor started by hand on %s did not stop cleanly: %v\n%s", h.Name(), err, hand.Tail(20))
	}
	checkUnitServes(ctx, t, tl, h)
	return o
}

// handOverHint is what a supervisor started by hand on a machine systemd
// runs says once it is up, and the unit's own must not.
func handOverHint(tl *tools) string {
	return tl.stratum + " install --now`, from another shell, hands it over"
}

// checkUnitServes checks a control plane handed to systemd's unit on h:
// stratum.service active and running with the supervisor's status text, its
// main process the supervisor, enabled for the next boot, kubectl through
// the VIP answering, and the unit's journal with the supervising line and
// without the hint to hand the supervisor over.
func checkUnitServes(ctx context.Context, t *testing.T, tl *tools, h *host) {
	t.Helper()
	hint := handOverHint(tl)
	unit := unitState(ctx, t, h)
	if unit["ActiveState"] != "active" || unit["SubState"] != "running" || !strings.HasPrefix(unit["StatusText"], "supervising this control plane") {
		t.Fatalf("stratum.service on %s after the handover: %v, want active, running, the supervisor's status text", h.Name(), unit)
	}
	checkMainPID(t, h, unit)
	if o, _, err := h.Run(ctx, "systemctl", "is-enabled", "stratum"); err != nil || strings.TrimSpace(o) != "enabled" {
		t.Fatalf("stratum.service on %s after the handover is %q (%v), want enabled", h.Name(), strings.TrimSpace(o), err)
	}
	machineKubectl(ctx, t, tl, h, "get", "--raw", "/readyz")
	// The supervising line follows READY: the journal is read until it
	// has it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		journal, _, err := h.Run(ctx, "journalctl", "--no-pager", "-u", "stratum")
		if strings.Contains(journal, hint) {
			t.Fatalf("stratum.service's journal on %s tells the unit's supervisor to hand itself to systemd:\n%s", h.Name(), journal)
		}
		if err == nil && strings.Contains(journal, "supervising this control plane (logs in") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stratum.service's journal on %s (%v) lacks the supervisor's supervising line after 10 s:\n%s", h.Name(), err, journal)
		}
	}
}

// upgradeUnderUnit runs `stratum upgrade node --bin-dir binDir` on h, whose
// control plane stratum.service runs, with the stratum at path (version
// ver: the next release's to upgrade, the previous one's to roll back), and
// judges it as systemd sees it: the same main PID, no restart counted,
// active throughout, READY again as that stratum, the rewritten unit loaded
// (NeedDaemonReload=no, ExecStart naming path and binDir), and `stratum
// status` naming ver.
func upgradeUnderUnit(ctx context.Context, t *testing.T, tl *tools, h *host, path, ver, binDir string) {
	t.Helper()
	before := unitState(ctx, t, h)
	mainPID := checkMainPID(t, h, before)
	if _, err := os.Stat(h.MachinePath(binDir)); err != nil {
		tl.installBinDirAt(t, h.MachinePath(binDir))
	}
	began := time.Now()
	o := runStratum(ctx, t, h, path, "upgrade", "node", "--bin-dir", binDir)
	if !strings.Contains(o, "upgraded to stratum "+ver) {
		t.Fatalf("upgrade node to %s under systemd on %s did not say the node was upgraded:\n%s", ver, h.Name(), o)
	}
	t.Logf("stratum upgrade node to %s on %s under its unit took %s", ver, h.Name(), time.Since(began).Round(100*time.Millisecond))
	unit := waitUnit(ctx, t, h, 30*time.Second, "running "+ver+", READY again", func(u map[string]string) bool {
		return strings.HasPrefix(u["StatusText"], "supervising this control plane")
	})
	if unit["MainPID"] != strconv.Itoa(mainPID) || unit["NRestarts"] != before["NRestarts"] || unit["ActiveState"] != "active" {
		t.Fatalf("stratum.service on %s after upgrade node to %s: %v, want main PID %d kept, no further restart (%s), active", h.Name(), ver, unit, mainPID, before["NRestarts"])
	}
	if unit["NeedDaemonReload"] != "no" || !strings.Contains(unit["ExecStart"], "path="+path+" ") || !strings.Contains(unit["ExecStart"], "--bin-dir "+binDir+" ") {
		t.Fatalf("stratum.service on %s after upgrade node to %s: ExecStart %q, NeedDaemonReload %s; want %s and %s, loaded", h.Name(), ver, unit["ExecStart"], unit["NeedDaemonReload"], path, binDir)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", stratumPID(t, h))); err != nil || exe != path {
		t.Fatalf("the unit's main process on %s runs %q (%v), want %s", h.Name(), exe, err, path)
	}
	var status struct {
		SupervisorProcess struct{ Version, State, BinDir string }
	}
	if err := json.Unmarshal([]byte(runStratum(ctx, t, h, path, "status", "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if sp := status.SupervisorProcess; sp.Version != ver || sp.State != "supervising" || sp.BinDir != binDir {
		t.Fatalf("stratum status on %s after the upgrade to %s under systemd: %+v, want %s supervising from %s", h.Name(), ver, sp, ver, binDir)
	}
}

// checkVIPGap stops probe (probeVIP) and fails t when kubectl through the
// VIP went unanswered for 10 s or more during what: the VIP moves within
// about a second of its holder stopping, and the other control planes serve.
func checkVIPGap(t *testing.T, what string, probe func() (time.Duration, int)) {
	t.Helper()
	gap, probes := probe()
	t.Logf("kubectl through the VIP during %s: longest gap %s over %d probes", what, gap.Round(10*time.Millisecond), probes)
	if gap >= 10*time.Second {
		t.Fatalf("kubectl through the VIP went unanswered for %s during %s", gap.Round(10*time.Millisecond), what)
	}
}

// waitHealthy waits until `stratum etcd health` on h exits 0.
func waitHealthy(ctx context.Context, t *testing.T, tl *tools, h *host) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		o, e, err := h.Run(ctx, tl.stratum, "etcd", "health")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stratum etcd health on %s not passing within a minute: %v\n%s%s", h.Name(), err, o, e)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// pidIn is pid as the machines' own processes see it (pidInMachine),
// failing t when it cannot be read.
func pidIn(t *testing.T, pid int) int {
	t.Helper()
	in, err := pidInMachine(pid)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// unitProperties are what the test reads of stratum.service.
var unitProperties = []string{"ActiveState", "SubState", "Result", "Type", "MainPID", "NRestarts", "StatusText", "NeedDaemonReload", "ExecStart", "ConditionResult"}

// unitState is `systemctl show stratum` of unitProperties; a failure fails
// t.
func unitState(ctx context.Context, t *testing.T, h *host) map[string]string {
	t.Helper()
	props, err := readUnitState(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	return props
}

// readUnitState is `systemctl show stratum` of unitProperties.
func readUnitState(ctx context.Context, h *host) (map[string]string, error) {
	args := []string{"systemctl", "show", "stratum"}
	for _, p := range unitProperties {
		args = append(args, "-p", p)
	}
	out, errOut, err := h.Run(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("systemctl show stratum on %s: %w\n%s", h.Name(), err, errOut)
	}
	props := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		props[k] = v
	}
	return props, nil
}

// waitUnit waits until stratum.service's properties satisfy ok, failing t
// after within. A machine whose systemd does not answer yet (booting) is
// asked again.
func waitUnit(ctx context.Context, t *testing.T, h *host, within time.Duration, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		u, err := readUnitState(ctx, h)
		if err == nil && ok(u) {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("stratum.service on %s not %s within %s: %v (%v)", h.Name(), what, within, u, err)
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
