package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/version"
)

// nextVersion is the version the next release's stratum is built as.
const nextVersion = "v0.0.0-e2e-next"

// buildNextRelease builds the stratum under test again as nextVersion, as a
// newer release's binary, into a directory of its own.
func buildNextRelease(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stratum")
	out, err := exec.Command("go", "build", "-ldflags", "-X stratum.dev/stratum/cmd/stratum/cli.Version="+nextVersion, "-o", p, "stratum.dev/stratum/cmd/stratum").CombinedOutput()
	if err != nil {
		t.Fatalf("build the next release's stratum: %v\n%s", err, out)
	}
	return p
}

// upgradeHolderInPlace upgrades the VIP holder with the next release's
// `stratum upgrade node`, its binaries in a directory of their own, while the
// other control planes serve, and judges it from outside: a bin directory
// without a kube-apiserver, one whose etcd is the previous minor (the
// cluster is at the pinned one) and a dry run first change nothing; then the
// same supervisor process (its PID, as systemd sees it) runs the next
// stratum with etcd from the new directory, the unit `stratum install`
// wrote names both, a snapshot was saved, the member is a voter of a
// healthy cluster, data written before is read through the VIP from
// another control plane, and a re-run has nothing left to do. It returns
// the holder.
func upgradeHolderInPlace(ctx context.Context, t *testing.T, tl *tools, nw *network, next string) *host {
	t.Helper()
	holder := vipHolder(ctx, t, nw)
	var other *host
	for _, h := range nw.Hosts() {
		if h != holder {
			other = h
			break
		}
	}
	const newBin, unitDir, backups = "/var/lib/stratum/releases/next/bin", "/var/lib/stratum/units", "/var/lib/stratum/backups"
	tl.installBinDirAt(t, holder.MachinePath(newBin))
	if err := os.MkdirAll(holder.MachinePath(unitDir), 0o755); err != nil {
		t.Fatal(err)
	}
	tl.run(ctx, t, holder, "install", "--unit-dir", unitDir)
	pid := stratumPID(t, holder)

	// Refused with nothing changed: the new bin directory lacks a binary.
	empty := "/var/lib/stratum/releases/empty"
	if err := os.MkdirAll(holder.MachinePath(empty), 0o755); err != nil {
		t.Fatal(err)
	}
	if o, e, err := holder.Run(ctx, next, "upgrade", "node", "--bin-dir", empty, "--unit-dir", unitDir); exitCode(err) != refusedExit || !strings.Contains(e, "nothing was changed") || !strings.Contains(e, "kube-apiserver") && !strings.Contains(e, "etcd") {
		t.Fatalf("upgrade node with an empty --bin-dir = %v, want a refusal naming the binary\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	// Refused with nothing changed: the previous minor's etcd, which the
	// cluster, at etcd 3.7, would not let start.
	older := "/var/lib/stratum/releases/older-etcd"
	prev, err := assets.Etcd(version.EtcdPrevious)
	if err != nil {
		t.Fatalf("%v (run `make assets`)", err)
	}
	if err := os.MkdirAll(holder.MachinePath(older), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"etcd": prev, "kube-apiserver": tl.apiserver} {
		if err := os.Symlink(src, holder.MachinePath(older+"/"+name)); err != nil {
			t.Fatal(err)
		}
	}
	if o, e, err := holder.Run(ctx, next, "upgrade", "node", "--bin-dir", older, "--unit-dir", unitDir); exitCode(err) != refusedExit || !strings.Contains(e, "etcd would refuse to start this member on it") || !strings.Contains(e, "nothing was changed") {
		t.Fatalf("upgrade node with etcd %s in --bin-dir = %v, want a refusal naming the cluster's etcd version\nstdout:\n%s\nstderr:\n%s", version.EtcdPrevious, err, o, e)
	}
	o := runStratum(ctx, t, holder, next, "upgrade", "node", "--bin-dir", newBin, "--unit-dir", unitDir, "--dry-run")
	if !strings.Contains(o, "steps it would take") || !strings.Contains(o, "save an etcd snapshot") {
		t.Fatalf("upgrade node --dry-run printed no plan:\n%s", o)
	}
	if _, err := os.Stat(holder.MachinePath(backups)); !os.IsNotExist(err) {
		t.Fatalf("a refused upgrade and a dry run left %s (%v)", backups, err)
	}
	if got := stratumPID(t, holder); got != pid {
		t.Fatalf("a refused upgrade and a dry run changed %s's stratum (pid %d, was %d)", holder.Name(), got, pid)
	}

	tl.kubectl(ctx, t, holder, "create", "configmap", "written-before-upgrade", "--from-literal=k=v", "--request-timeout=20s")
	began := time.Now()
	probe := probeVIP(ctx, tl, other)
	o = runStratum(ctx, t, holder, next, "upgrade", "node", "--bin-dir", newBin, "--unit-dir", unitDir)
	t.Logf("stratum upgrade node on %s (%s) printed:\n%s", holder.Name(), time.Since(began).Round(100*time.Millisecond), o)
	// Clients through the VIP are served throughout, but for the VIP's
	// move: the bound is the failover's (waitVIPAnswersAfter).
	if gap, probes := probe(); gap > 20*time.Second {
		t.Fatalf("kubectl through the VIP from %s went unanswered for %s during the upgrade of %s (%d probes)", other.Name(), gap, holder.Name(), probes)
	} else {
		t.Logf("kubectl through the VIP from %s during the upgrade: %d probes, longest unanswered stretch %s", other.Name(), probes, gap.Round(100*time.Millisecond))
	}
	if !strings.Contains(o, "upgraded to stratum "+nextVersion) {
		t.Fatalf("upgrade node did not say the node was upgraded:\n%s", o)
	}
	if got := stratumPID(t, holder); got != pid {
		t.Fatalf("%s's stratum after the upgrade is pid %d, want the same process (pid %d) replaced in place", holder.Name(), got, pid)
	}
	if argv0 := serverArgv0(t, holder, "etcd"); argv0 != newBin+"/etcd" {
		t.Fatalf("%s's etcd after the upgrade runs %q, want %s/etcd", holder.Name(), argv0, newBin)
	}
	var status struct {
		SupervisorProcess struct {
			PID                    int
			Version, BinDir, State string
		}
		Services []struct{ Name, Version string }
	}
	if err := json.Unmarshal([]byte(runStratum(ctx, t, holder, next, "status", "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if sp := status.SupervisorProcess; sp.PID != pid || sp.Version != nextVersion || sp.BinDir != newBin || sp.State != "supervising" {
		t.Fatalf("stratum status on the upgraded %s says its supervisor is %+v, want pid %d, %s, supervising from %s", holder.Name(), sp, pid, nextVersion, newBin)
	}
	for _, s := range status.Services {
		if (s.Name == "kube-vip" || s.Name == "stratum-operator") && s.Version != "stratum "+nextVersion {
			t.Fatalf("%s's %s after the upgrade runs %q, want stratum %s", holder.Name(), s.Name, s.Version, nextVersion)
		}
	}
	unit := readMachineFiles(t, holder, unitDir+"/stratum.service")[unitDir+"/stratum.service"]
	if want := "ExecStart=" + next + " up --as-supervisor --bin-dir " + newBin + "\n"; !strings.Contains(unit, want) {
		t.Fatalf("the unit after the upgrade does not run the next release (want %q):\n%s", want, unit)
	}
	if was, _ := filepath.Glob(holder.MachinePath(backups + "/stratum.service-before-upgrade-" + nextVersion + "-*")); len(was) != 1 {
		t.Fatalf("want the unit's previous text kept under %s, found %v", backups, was)
	} else if b, err := os.ReadFile(was[0]); err != nil || !strings.Contains(string(b), "ExecStart="+tl.stratum+" up --as-supervisor --bin-dir "+binDir+"\n") {
		t.Fatalf("the unit's previous text %s (%v) does not run the previous stratum:\n%s", was[0], err, b)
	}
	snaps, _ := filepath.Glob(holder.MachinePath(backups + "/etcd-before-upgrade-" + nextVersion + "-*.db"))
	if len(snaps) != 1 {
		t.Fatalf("want one snapshot saved before the upgrade under %s, found %v", backups, snaps)
	}
	if fi, err := os.Stat(snaps[0]); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Fatalf("the snapshot %s: %v, %v; want a root-only, non-empty file", snaps[0], fi, err)
	}
	waitVoters(ctx, t, tl, other, 3)
	tl.etcdctl(ctx, t, other, "endpoint", "health", "--cluster")
	if got := tl.kubectl(ctx, t, other, "get", "configmap", "written-before-upgrade", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Fatalf("the ConfigMap written before the upgrade, read through the VIP from %s: %q", other.Name(), got)
	}
	if got := tl.kubectl(ctx, t, holder, "get", "--raw", "/readyz"); strings.TrimSpace(got) != "ok" {
		t.Fatalf("kubectl on the upgraded %s through the VIP: /readyz = %q", holder.Name(), got)
	}
	// The plan, from the next release: the holder runs it, the others do
	// not yet (their supervisors recorded the stratum under test).
	var plan struct {
		ControlPlanes []planControlPlane
		Healthy       bool
		ToUpgrade     int
		Next          string
	}
	// The holder's new supervisor records its release beside its start:
	// asked again until its row says so, for a while.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if err := json.Unmarshal([]byte(runStratum(ctx, t, holder, next, "upgrade", "plan", "-o", "json")), &plan); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(plan.ControlPlanes, func(c planControlPlane) bool { return c.Node == holder.Name() && c.Stratum == nextVersion }) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("stratum upgrade plan on %s after its upgrade:\n%s", holder.Name(), runStratum(ctx, t, holder, next, "upgrade", "plan"))
	if !plan.Healthy || plan.ToUpgrade != len(nw.Hosts())-1 || len(plan.ControlPlanes) != len(nw.Hosts()) {
		t.Fatalf("upgrade plan after %s's upgrade: %+v, want a healthy cluster of %d with all but it to upgrade", holder.Name(), plan, len(nw.Hosts()))
	}
	for _, c := range plan.ControlPlanes {
		want, verdict := "dev", "to upgrade"
		if c.Node == holder.Name() {
			want, verdict = nextVersion, "up to date"
		}
		if c.Stratum != want || c.Verdict != verdict || c.Etcd != version.Etcd || c.KubeAPIServer != version.Kubernetes {
			t.Fatalf("upgrade plan's row of %s: %+v, want stratum %s, %s, etcd %s, kube-apiserver %s", c.Node, c, want, verdict, version.Etcd, version.Kubernetes)
		}
	}
	// A re-run finds it done.
	if o := runStratum(ctx, t, holder, next, "upgrade", "node", "--bin-dir", newBin, "--unit-dir", unitDir); !strings.Contains(o, "nothing to restart") {
		t.Fatalf("upgrade node again on the upgraded node:\n%s", o)
	}
	return holder
}

// probeVIP reads /readyz through the VIP with kubectl on h every 250 ms
// until the returned stop is called, which reports the longest stretch
// between two answers (or from the start, or to the stop) and the number of
// probes.
func probeVIP(ctx context.Context, tl *tools, h *host) (stop func() (time.Duration, int)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var gap time.Duration
	probes := 0
	go func() {
		defer close(done)
		last := time.Now()
		for ctx.Err() == nil {
			o, _, err := h.Run(ctx, tl.kubectlArgs("get", "--raw", "/readyz", "--request-timeout=2s")...)
			probes++
			if err == nil && strings.TrimSpace(o) == "ok" {
				gap = max(gap, time.Since(last))
				last = time.Now()
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		gap = max(gap, time.Since(last))
	}()
	return func() (time.Duration, int) {
		cancel()
		<-done
		return gap, probes
	}
}

// refuseUpgrade runs the next release's `stratum upgrade node` on h and
// fails t unless it is refused (exit 3) naming each of want, with nothing
// changed: no snapshot directory, the same stratum process.
func refuseUpgrade(ctx context.Context, t *testing.T, h *host, next string, want ...string) {
	t.Helper()
	pid := stratumPID(t, h)
	o, e, err := h.Run(ctx, next, "upgrade", "node")
	if exitCode(err) != refusedExit || !strings.Contains(e, "nothing was changed") {
		t.Fatalf("stratum upgrade node on %s = %v, want a refusal (exit %d) naming %q\nstdout:\n%s\nstderr:\n%s", h.Name(), err, refusedExit, want, o, e)
	}
	for _, w := range want {
		if !strings.Contains(e, w) {
			t.Fatalf("stratum upgrade node on %s was refused without naming %q:\n%s", h.Name(), w, e)
		}
	}
	if _, err := os.Stat(h.MachinePath("/var/lib/stratum/backups")); !os.IsNotExist(err) {
		t.Fatalf("a refused upgrade on %s left /var/lib/stratum/backups (%v)", h.Name(), err)
	}
	if got := stratumPID(t, h); got != pid {
		t.Fatalf("a refused upgrade changed %s's stratum (pid %d, was %d)", h.Name(), got, pid)
	}
	t.Logf("stratum upgrade node on %s refused:\n%s", h.Name(), e)
}

// planControlPlane is a row of `stratum upgrade plan -o json`.
type planControlPlane struct{ Node, Stratum, Etcd, KubeAPIServer, Verdict string }

// runStratum runs the stratum at path with args on h and returns its
// stdout; a failure fails t.
func runStratum(ctx context.Context, t *testing.T, h *host, path string, args ...string) string {
	t.Helper()
	out, errOut, err := h.Run(ctx, append([]string{path}, args...)...)
	if err != nil {
		t.Fatalf("%s %s on %s: %v\nstdout:\n%s\nstderr:\n%s", path, strings.Join(args, " "), h.Name(), err, out, errOut)
	}
	return out
}

// stratumPID is the one stratum process running in h.
func stratumPID(t *testing.T, h *host) int {
	t.Helper()
	pids := namedPIDs(t, h, "stratum")
	if len(pids) != 1 {
		t.Fatalf("%s runs %d stratum processes (%v), want one", h.Name(), len(pids), pids)
	}
	return pids[0]
}

// serverArgv0 is the argv[0] of the one process named name in h.
func serverArgv0(t *testing.T, h *host, name string) string {
	t.Helper()
	pids := namedPIDs(t, h, name)
	if len(pids) != 1 {
		t.Fatalf("%s runs %d %s processes (%v), want one", h.Name(), len(pids), name, pids)
	}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	return strings.SplitN(string(data), "\x00", 2)[0]
}

// namedPIDs are the live processes in h whose argv[0]'s base name is name.
func namedPIDs(t *testing.T, h *host, name string) []int {
	t.Helper()
	all, err := netnsPids(filepath.Join(netnsDir, h.NetNS()))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range all {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if st, _, ok := procState(p); ok && st != "Z" && filepath.Base(strings.SplitN(string(data), "\x00", 2)[0]) == name {
			pids = append(pids, p)
		}
	}
	return pids
}
