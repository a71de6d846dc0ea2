package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/sdnotify"
	"stratum.dev/stratum/internal/version"
)

// TestHAControlPlaneOnThreeHosts is stratum as a platform engineer meets it:
// the real bin/stratum on three machines (network + mount namespaces on a
// bridge), the first brought up with a VIP, the other two joined by running
// the join command `token create` printed, verbatim (the second in its
// secret-file form), and everything checked with clients nobody here wrote:
// etcdctl lists three started voters, kubectl reads through the VIP with the
// admin kubeconfig and TLS verified, and `kubectl auth whoami` shows it a
// cluster admin through the stratum:cluster-admins binding, not
// system:masters. Then the VIP holder's stratum is
// SIGKILLed (after a SIGKILLed etcd child was restarted by its supervisor):
// the VIP moves, kubectl answers through it within 20 s,
// `stratum etcd health` on a survivor names the dead member, and `stratum up`
// on the killed host brings it back as a voter. A snapshot saved on cp1 is
// restored there and the others rejoin the new cluster with the command the
// restore printed (refused without --force while they keep the old
// cluster's quorum). Then a fourth machine's
// joins with bad input (a wrong certificate key, a wrong CA hash, an
// unreachable server, not root, a port in use, a missing binary) are refused
// and change neither the member list nor its files, and `stratum reset`
// takes cp2 out while its supervisor runs: two voters left, its binaries
// kept, nothing else of a control plane. Then cp1, where the join command
// was minted, is reset too, and the same command joins cp2 again through
// the VIP on cp3: a join command outlives the control planes its grant names.
// cp1's etcd data is on a disk mounted on its data directory, cp2's behind a
// link: the restore, the rejoin and the resets replace it there, and the
// disks stay.
func TestHAControlPlaneOnThreeHosts(t *testing.T) {
	t.Parallel() // its own machines; the other real-host tests run beside it
	tools, nw := installedMachines(t, 4)
	cp1, cp2, cp3, cp4 := nw.Host("cp1"), nw.Host("cp2"), nw.Host("cp3"), nw.Host("cp4")
	vip := nw.VIP().String()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The first control plane, with Secrets encrypted at rest by an
	// encryption config the operator placed, as kubeadm's users do. Its
	// etcd data is on a disk of its own, mounted on the data directory (a
	// lost+found in it); cp2's data directory is a link to another.
	writeEncryptionConfig(t, cp1)
	mountEtcdDisk(ctx, t, cp1)
	linkEtcdDisk(ctx, t, cp2)
	// Run as the Type=notify unit runs it: systemd's notify socket in its
	// environment. Its READY comes once the control plane serves, so a
	// `systemctl start` returns then, not at the fork.
	notifyPath, notified := notifySocket(t)
	up1 := cp1.Start("env", sdnotify.SocketEnv+"="+notifyPath, tools.stratum, "up", "--vip", vip)
	if msg := notified(t, up1, 3*time.Minute); !strings.HasPrefix(msg, "READY=1\nSTATUS=supervising this control plane") {
		t.Fatalf("cp1's stratum told the service manager %q, want READY=1 with its status", msg)
	}
	if got := tools.kubectl(ctx, t, cp1, "--server", "https://"+cp1.IP().String()+":6443", "get", "--raw", "/readyz"); strings.TrimSpace(got) != "ok" {
		t.Fatalf("cp1's kube-apiserver right after its stratum said READY: /readyz = %q", got)
	}
	// Its children do not see the socket: etcd would notify it itself.
	for _, child := range []string{"etcd", "kube-apiserver"} {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", serverPid(t, cp1, child)))
		if err != nil || bytes.Contains(env, []byte(sdnotify.SocketEnv+"=")) {
			t.Fatalf("cp1's %s's environment names the service manager's notify socket (%v)", child, err)
		}
	}
	waitSupervising(t, up1, 3*time.Minute)

	// The join command, as printed.
	out := tools.run(ctx, t, cp1, "token", "create", "--control-plane")
	join, secretForm := joinCommands(t, out)
	t.Logf("printed join command: %s", join)

	// cp2 runs it verbatim; cp3 runs the secret-file form verbatim, from a
	// script file so no shell's argv carries the secrets either.
	up2 := cp2.Start(tools.shell(join)...)
	waitSupervising(t, up2, 3*time.Minute)
	script := filepath.Join(t.TempDir(), "join.sh")
	if err := os.WriteFile(script, []byte("cd "+filepath.Dir(script)+"\n"+secretForm+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	up3 := cp3.Start(tools.shell("sh " + script)...)
	waitSupervising(t, up3, 3*time.Minute)
	tok, key := flagValue(join, "--token"), flagValue(join, "--certificate-key")
	checkSecretsNotInProcessList(t, tok, key)

	// etcdctl: three started voters, all healthy.
	members := waitVoters(ctx, t, tools, cp1, 3)
	for _, h := range []*host{cp1, cp2, cp3} {
		if !slices.Contains(members, h.Name()) {
			t.Fatalf("etcd members %v lack %s", members, h.Name())
		}
	}
	tools.etcdctl(ctx, t, cp2, "endpoint", "health", "--cluster")

	// kubectl through the VIP, TLS verified against the cluster CA, from
	// every control plane's admin kubeconfig.
	for _, h := range []*host{cp1, cp2, cp3} {
		if server := kubeconfigServer(ctx, t, tools, h); server != "https://"+vip+":6443" {
			t.Fatalf("%s's admin kubeconfig targets %q, want the VIP", h.Name(), server)
		}
		if got := tools.kubectl(ctx, t, h, "get", "--raw", "/readyz"); strings.TrimSpace(got) != "ok" {
			t.Fatalf("kubectl on %s through the VIP: /readyz = %q", h.Name(), got)
		}
		// The admin kubeconfig is a cluster admin through RBAC's
		// stratum:cluster-admins binding, not a system:masters superuser.
		groups := tools.kubectl(ctx, t, h, "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
		if !strings.Contains(groups, "stratum:cluster-admins") || strings.Contains(groups, "system:masters") {
			t.Fatalf("kubectl auth whoami on %s: groups %s, want stratum:cluster-admins and not system:masters", h.Name(), groups)
		}
		if got := tools.kubectl(ctx, t, h, "auth", "can-i", "*", "*"); strings.TrimSpace(got) != "yes" {
			t.Fatalf("kubectl auth can-i '*' '*' on %s: %q, want yes", h.Name(), got)
		}
	}

	// The joiners received the encryption config with the shared
	// certificates: a Secret written through the VIP is stored encrypted
	// in etcd, and every control plane's own apiserver reads it.
	checkSecretsEncryptedAtRest(ctx, t, tools, cp1, []*host{cp1, cp2, cp3})

	// The supervisor answers other commands through its control socket, and
	// one operator leads.
	// Each service is named with the version the supervisor runs.
	status := tools.run(ctx, t, cp2, "status")
	for svc, runs := range map[string]string{
		"etcd": regexp.QuoteMeta(version.Etcd), "kube-apiserver": regexp.QuoteMeta(version.Kubernetes),
		"kube-vip": `stratum \S+`, "stratum-operator": `stratum \S+`,
	} {
		if !regexp.MustCompile(`(?m)^`+svc+` +`+runs+` +running`).MatchString(status) || strings.Count(status, "running") != 4 {
			t.Fatalf("stratum status on cp2 does not say %s runs %s:\n%s", svc, runs, status)
		}
	}
	// A child that dies is restarted: SIGKILL cp2's etcd; the supervisor
	// starts a new one and the member serves again.
	oldPid := serverPid(t, cp2, "etcd")
	if err := syscall.Kill(oldPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "cp2's etcd restarted by its supervisor", func() bool {
		pid := serverPid(t, cp2, "etcd")
		if pid == 0 || pid == oldPid {
			return false
		}
		_, _, err := cp2.Run(ctx, tools.etcdctlArgs(cp2, "endpoint", "health")...)
		return err == nil
	}, up2)
	if st := tools.run(ctx, t, cp2, "status"); !strings.Contains(st, fmt.Sprintf("pid %d", serverPid(t, cp2, "etcd"))) {
		t.Fatalf("stratum status on cp2 does not name the restarted etcd:\n%s", st)
	}
	operator := tools.kubectl(ctx, t, cp1, "-n", "kube-system", "get", "lease", "stratum-operator", "-o", "jsonpath={.spec.holderIdentity}")
	if !slices.Contains([]string{"cp1", "cp2", "cp3"}, operator) {
		t.Fatalf("the stratum-operator Lease is held by %q, want a control plane", operator)
	}
	checkExpiredTokenCollected(ctx, t, tools, cp1, tok)

	// Failover: SIGKILL the VIP holder's stratum; its children die with it.
	holder := vipHolder(ctx, t, nw)
	t.Logf("%s holds the VIP; SIGKILL its stratum", holder.Name())
	killed := time.Now()
	signalStratum(t, holder, syscall.SIGKILL)
	survivor := cp2
	if holder == cp2 {
		survivor = cp3
	}
	waitNoServers(t, holder)
	waitVIPAnswersAfter(ctx, t, tools, nw, survivor, killed)

	health, herr, err := survivor.Run(ctx, tools.stratum, "etcd", "health")
	if err == nil || !strings.Contains(herr, holder.IP().String()) {
		t.Fatalf("stratum etcd health on %s with %s dead: err %v, stdout %q, stderr %q; want a failure naming %s", survivor.Name(), holder.Name(), err, health, herr, holder.IP())
	}
	table := tools.run(ctx, t, survivor, "etcd", "members")
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] == "MEMBER" {
			continue
		}
		dead := f[0] == holder.Name()
		// MEMBER PEER-URL ROLE LEADER VERSION HEALTH...: a live member says
		// its etcd version, the dead one nothing.
		wantVersion := version.Etcd
		if dead {
			wantVersion = "-"
		}
		if healthy := f[5] == "healthy"; healthy == dead || f[4] != wantVersion {
			t.Fatalf("stratum etcd members on %s, %s dead:\n%s", survivor.Name(), holder.Name(), table)
		}
	}

	// The killed control plane comes back as a voter.
	again := holder.Start(tools.stratum, "up")
	waitSupervising(t, again, 3*time.Minute)
	supervisor := map[*host]*proc{cp1: up1, cp2: up2, cp3: up3}
	supervisor[holder] = again

	// Disaster recovery, as docs/rejoin.md tells it. The restore on cp1
	// and the rejoin on cp2 replaced their data on their disks.
	recoverFromSnapshot(ctx, t, tools, cp1, cp2, cp3)
	checkEtcdDisk(ctx, t, cp1, true, true)
	checkEtcdDisk(ctx, t, cp2, false, true)
	waitVoters(ctx, t, tools, holder, 3)
	tools.run(ctx, t, holder, "etcd", "health")

	// etcd's quota and space, as an operator keeps them: 4 GiB set on the
	// VIP holder's member (its supervisor restarts its etcd process with
	// the flag rendered from the node state), seen by etcdctl beside the
	// others' default; then every member defragmented, one at a time. One
	// node's restart is the whole mechanism; each further one cost about
	// 10 s of make test's 30 minutes.
	if out := tools.run(ctx, t, holder, "etcd", "quota", "4Gi"); !strings.Contains(out, "etcd quota is 4.0 GiB: recorded") {
		t.Fatalf("stratum etcd quota 4Gi on %s:\n%s", holder.Name(), out)
	}
	var statuses []struct {
		Endpoint string
		Status   struct {
			DBSizeQuota int64 `json:"dbSizeQuota"`
		}
	}
	if out := tools.etcdctl(ctx, t, cp1, "endpoint", "status", "--cluster", "-w", "json"); json.Unmarshal([]byte(out), &statuses) != nil || len(statuses) != 3 {
		t.Fatalf("etcdctl endpoint status --cluster -w json:\n%s", out)
	}
	for _, s := range statuses {
		want := int64(2 << 30)
		if strings.Contains(s.Endpoint, "//"+holder.IP().String()+":") {
			want = 4 << 30
		}
		if s.Status.DBSizeQuota != want {
			t.Fatalf("etcdctl: %s runs with a quota of %d bytes after `stratum etcd quota 4Gi` on %s; want %d", s.Endpoint, s.Status.DBSizeQuota, holder.Name(), want)
		}
	}
	if out := tools.run(ctx, t, holder, "etcd", "defrag"); !strings.Contains(out, "etcd defragmented: 3 members") {
		t.Fatalf("stratum etcd defrag on %s:\n%s", holder.Name(), out)
	}

	// Refusals on a fourth machine change nothing.
	before := memberIDs(ctx, t, tools, cp1)
	files := hostFiles(t, cp4)
	wrongKey := strings.Replace(join, key, flipHex(key), 1)
	wrongHash := strings.Replace(join, flagValue(join, "--ca-hash"), "sha256:"+strings.Repeat("0", 64), 1)
	unreachable := strings.Replace(join, vip, nw.Subnet().Addr().Next().Next().Next().String(), 1) // .3: no host
	notRoot := "setpriv --reuid=65534 --regid=65534 --clear-groups " + join
	// The printed command run by a stratum others could replace: root would
	// run their code, at every boot under the unit.
	replaceable := filepath.Join(t.TempDir(), "stratum")
	if data, err := os.ReadFile(tools.stratum); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(replaceable, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(replaceable), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ name, cmd, want string }{
		{"wrong certificate key", wrongKey, "certificate"},
		{"wrong CA hash", wrongHash, "hash"},
		{"unreachable server", unreachable, "no route to host"},
		{"not root", notRoot, "must run as root"},
		{"a stratum others may replace", strings.Replace(join, "stratum ", replaceable+" ", 1), "is writable by its group or others"},
	} {
		o, e, err := cp4.Run(ctx, tools.shell(r.cmd)...)
		if exitCode(err) != refusedExit || !strings.Contains(strings.ToLower(e), r.want) {
			t.Fatalf("%s: join on cp4 = %v, want exit %d (refused)\nstdout:\n%s\nstderr:\n%s", r.name, err, refusedExit, o, e)
		}
		t.Logf("%s refused: %s", r.name, firstLine(e))
		checkUnchanged(ctx, t, tools, cp1, cp4, before, files, r.name)
	}
	busy := cp4.Start(helperCommand("serve", "0.0.0.0:2379")...)
	waitFor(t, 10*time.Second, "a listener on cp4's port 2379", func() bool { return strings.Contains(busy.Output(), "listening") }, busy)
	o, e, err := cp4.Run(ctx, tools.shell(join)...)
	if exitCode(err) != refusedExit || !strings.Contains(e, "port 2379 is in use") {
		t.Fatalf("join on cp4 with port 2379 taken = %v\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	t.Logf("port in use refused: %s", firstLine(e))
	checkUnchanged(ctx, t, tools, cp1, cp4, before, files, "port in use")
	if err := busy.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cp4.MachinePath(filepath.Join(binDir, "kube-apiserver"))); err != nil {
		t.Fatal(err)
	}
	files = hostFiles(t, cp4)
	o, e, err = cp4.Run(ctx, tools.shell(join)...)
	if exitCode(err) != refusedExit || !strings.Contains(e, "kube-apiserver is missing") {
		t.Fatalf("join without kube-apiserver on cp4 = %v\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	t.Logf("missing binary refused: %s", firstLine(e))
	checkUnchanged(ctx, t, tools, cp1, cp4, before, files, "missing binary")

	// stratum reset on cp2 while its supervisor runs: etcdctl lists two
	// voters without it, its etcd and apiserver are gone, nothing of a
	// control plane is left but the installed binaries, and the supervisor,
	// with nothing left to run, has exited 0, saying why.
	tools.kubectl(ctx, t, cp1, "-n", "kube-system", "get", "lease", "stratum-release-cp2") // its supervisor's record
	resetStratum(ctx, t, tools, cp2, supervisor[cp2])
	if out, errOut, err := cp1.Run(ctx, tools.kubectlArgs("-n", "kube-system", "get", "lease", "stratum-release-cp2")...); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("cp2's release record after its reset: err %v, stdout %q, stderr %q; want NotFound", err, out, errOut)
	}
	if voters := waitVoters(ctx, t, tools, cp1, 2); slices.Contains(voters, "cp2") {
		t.Fatalf("etcd voters after cp2's reset: %v", voters)
	}
	checkEtcdDisk(ctx, t, cp2, false, false)
	for f := range hostFiles(t, cp2) {
		kept := slices.Contains(privateDirs, f) || f == binDir || strings.HasPrefix(f, binDir+"/") ||
			strings.HasPrefix(f, "/run/stratum/") || strings.HasPrefix(f, "/var/log/stratum/") ||
			f == version.EtcdDataDir // the link to its etcd disk, which stays
		if !kept {
			t.Fatalf("cp2 after its reset still has %s", f)
		}
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(cp2.MachinePath(filepath.Join(binDir, bin))); err != nil {
			t.Fatalf("the reset removed the installed %s: %v", bin, err)
		}
	}
	tools.etcdctl(ctx, t, cp1, "endpoint", "health", "--cluster")

	// The join command outlives the control plane it was minted on: it was
	// printed while cp1 ran alone, so its grant names only cp1's etcd. With
	// cp1 reset too, cp2 runs the same command, verbatim, through the VIP
	// (now cp3's), and joins the members the cluster published since.
	//
	// cp1's reset is one a crash interrupted: cp1 and cp3 are two voters,
	// so with cp1's etcd down cp3 alone has no quorum and answers nothing.
	// `stratum up` at cp1's boot refuses; the reset, run again, starts
	// cp1's etcd under itself (no supervisor runs) to give the cluster its
	// quorum back, and removes cp1 through it.
	crashMidReset(ctx, t, nw, cp1, supervisor[cp1])
	if o, e, err := cp1.Run(ctx, tools.stratum, "up"); exitCode(err) != refusedExit || !strings.Contains(e, "reset of this node is under way") {
		t.Fatalf("stratum up on cp1 after its reset crashed = %v, want exit %d naming the reset\nstdout:\n%s\nstderr:\n%s", err, refusedExit, o, e)
	}
	reset := tools.run(ctx, t, cp1, "reset")
	t.Logf("stratum reset on cp1, re-run after a crash, printed:\n%s", reset)
	if !strings.Contains(reset, "starting it, so the cluster has its quorum back") || !strings.Contains(reset, "reset done") {
		t.Fatalf("stratum reset on cp1 after a crash printed:\n%s", reset)
	}
	waitNoServers(t, cp1)
	checkEtcdDisk(ctx, t, cp1, true, false)
	if voters := waitVoters(ctx, t, tools, cp3, 1); !slices.Equal(voters, []string{"cp3"}) {
		t.Fatalf("etcd voters after cp1's reset: %v", voters)
	}
	waitFor(t, 30*time.Second, "the VIP on cp3, the last control plane", func() bool { return vipHolder(ctx, t, nw) == cp3 }, supervisor[cp3])
	rejoin := cp2.Start(tools.shell(join)...)
	waitSupervising(t, rejoin, 3*time.Minute)
	if voters := waitVoters(ctx, t, tools, cp3, 2); !slices.Equal(voters, []string{"cp2", "cp3"}) {
		t.Fatalf("etcd voters after cp2 ran the first join command again: %v", voters)
	}
	if got := tools.kubectl(ctx, t, cp2, "get", "--raw", "/readyz"); strings.TrimSpace(got) != "ok" {
		t.Fatalf("kubectl on the rejoined cp2 through the VIP: /readyz = %q", got)
	}
	tools.etcdctl(ctx, t, cp2, "endpoint", "health", "--cluster")

	// SIGTERM stops a control plane and everything it runs.
	for _, c := range []struct {
		h  *host
		up *proc
	}{{cp3, supervisor[cp3]}, {cp2, rejoin}} {
		signalStratum(t, c.h, syscall.SIGTERM)
		waitNoServers(t, c.h)
		if !strings.Contains(c.up.Output(), "stopping the control plane") {
			t.Fatalf("%s's stratum did not stop cleanly on SIGTERM:\n%s", c.h.Name(), c.up.Tail(20))
		}
	}
}

// recoverFromSnapshot is disaster recovery on real machines, every control
// plane's supervisor running: `stratum snapshot save` on the seed, a
// ConfigMap written after it, `stratum snapshot restore` on the seed, then
// the rejoin command the restore printed, verbatim, on the others: refused on
// the first while it and the last keep the old cluster's quorum, then run
// with --force; on the last, alone in the old cluster, it needs none.
// etcdctl then lists three voters of the new cluster, and kubectl through the
// VIP reads the ConfigMap written before the snapshot and not the one after.
func recoverFromSnapshot(ctx context.Context, t *testing.T, tl *tools, seed, first, last *host) {
	t.Helper()
	tl.kubectl(ctx, t, seed, "create", "configmap", "before-snapshot")
	snap := filepath.Join(t.TempDir(), "etcd-backup.db")
	tl.run(ctx, t, seed, "snapshot", "save", snap)
	tl.kubectl(ctx, t, seed, "create", "configmap", "after-snapshot")
	oldIDs := memberIDs(ctx, t, tl, first)
	out := tl.run(ctx, t, seed, "snapshot", "restore", snap)
	t.Logf("stratum snapshot restore on %s printed:\n%s", seed.Name(), out)
	m := regexp.MustCompile("`(stratum etcd rejoin --server [^`]+)`").FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("stratum snapshot restore printed no rejoin command:\n%s", out)
	}
	rejoin := m[1]
	o, e, err := first.Run(ctx, tl.shell(rejoin)...)
	if exitCode(err) != refusedExit || !strings.Contains(e, "quorum") {
		t.Fatalf("%s on %s while it and %s keep the old cluster's quorum = %v, want exit %d naming the quorum\nstdout:\n%s\nstderr:\n%s", rejoin, first.Name(), last.Name(), err, refusedExit, o, e)
	}
	t.Logf("rejoin without --force refused: %s", firstLine(e))
	if got := memberIDs(ctx, t, tl, first); !slices.Equal(got, oldIDs) {
		t.Fatalf("a refused rejoin changed the old cluster's members: %v, were %v", got, oldIDs)
	}
	for _, c := range []struct {
		h    *host
		line string
	}{{first, rejoin + " --force"}, {last, rejoin}} {
		if o, e, err := c.h.Run(ctx, tl.shell(c.line)...); err != nil {
			t.Fatalf("%s on %s: %v\nstdout:\n%s\nstderr:\n%s", c.line, c.h.Name(), err, o, e)
		}
	}
	waitVoters(ctx, t, tl, seed, 3)
	tl.etcdctl(ctx, t, last, "endpoint", "health", "--cluster")
	for _, h := range []*host{seed, first, last} {
		waitFor(t, 30*time.Second, "kubectl through the VIP on "+h.Name()+" reading the snapshot's data", func() bool {
			_, _, errBefore := h.Run(ctx, tl.kubectlArgs("get", "configmap", "before-snapshot", "--request-timeout=2s")...)
			_, eAfter, errAfter := h.Run(ctx, tl.kubectlArgs("get", "configmap", "after-snapshot", "--request-timeout=2s")...)
			return errBefore == nil && errAfter != nil && strings.Contains(eAfter, "NotFound")
		}, nil)
	}
	// The restore and the rejoins stopped every control plane whole, its
	// stratum-operator with it; their start brought each back: `stratum
	// status` exits 0 and names the operator running on every node.
	operatorRuns := regexp.MustCompile(`(?m)^stratum-operator +stratum \S+ +running since `)
	for _, h := range []*host{seed, first, last} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			o, e, err := h.Run(ctx, tl.stratum, "status")
			if err == nil && operatorRuns.MatchString(o) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stratum status on %s after the recovery = %v, want exit 0 naming the stratum-operator running\nstdout:\n%s\nstderr:\n%s", h.Name(), err, o, e)
			}
		}
	}
	// Every member is new (a restored cluster, and members added to it),
	// while the supervisors ran on: each records its release under its new
	// member, so the plan knows what each control plane runs.
	var plan struct{ ControlPlanes []planControlPlane }
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(time.Second) {
		if err := json.Unmarshal([]byte(tl.run(ctx, t, seed, "upgrade", "plan", "-o", "json")), &plan); err != nil {
			t.Fatal(err)
		}
		known := 0
		for _, c := range plan.ControlPlanes {
			if c.Stratum == "dev" && c.Verdict == "up to date" {
				known++
			}
		}
		if known == 3 && len(plan.ControlPlanes) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upgrade plan after the recovery, %s later: %+v, want each of the 3 control planes on stratum dev, up to date\n%s", 45*time.Second, plan.ControlPlanes, tl.run(ctx, t, seed, "upgrade", "plan"))
		}
	}
}

// crashMidReset leaves h as a crash right after its reset began would: every
// process of the host killed, as when its power is lost (its supervisor up
// with them), the VIP address gone from its interfaces as a reboot drops it,
// and the reset's journal written, which a reset writes before its first
// change.
func crashMidReset(ctx context.Context, t *testing.T, nw *network, h *host, up *proc) {
	t.Helper()
	var st nodestate.NodeState
	if err := json.Unmarshal([]byte(readMachineFiles(t, h, nodestate.Path)[nodestate.Path]), &st); err != nil {
		t.Fatalf("%s's node state: %v", h.Name(), err)
	}
	if err := h.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	<-up.Done()
	waitNoServers(t, h)
	out, _, err := h.Run(ctx, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[3] == nw.VIP().String()+"/32" {
			if _, e, err := h.Run(ctx, "ip", "addr", "del", f[3], "dev", f[1]); err != nil {
				t.Fatalf("drop the VIP from %s's %s: %v: %s", h.Name(), f[1], err, e)
			}
		}
	}
	journal, err := json.Marshal(map[string]any{"name": st.Etcd.Name, "peerURL": st.Etcd.PeerURL, "started": time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.MachinePath(ha.ResetJournalPath()), journal, 0o600); err != nil {
		t.Fatal(err)
	}
}

// resetStratum runs `stratum reset` on h while its supervisor (up) runs, and
// checks what an operator sees: the reset says it is done and that it ended
// the supervisor, which then exits 0 by itself, saying why.
func resetStratum(ctx context.Context, t *testing.T, tl *tools, h *host, up *proc) {
	t.Helper()
	reset := tl.run(ctx, t, h, "reset")
	t.Logf("stratum reset on %s printed:\n%s", h.Name(), reset)
	if !strings.Contains(reset, "reset done") || !strings.Contains(reset, "supervisor on this node ended") {
		t.Fatalf("stratum reset on %s printed:\n%s", h.Name(), reset)
	}
	select {
	case <-up.Done():
		if err := up.Wait(); err != nil || !strings.Contains(up.Output(), "nothing is left to run on this node") {
			t.Fatalf("%s's supervisor after the reset: %v\n%s", h.Name(), err, up.Tail(20))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's supervisor still runs 30 s after the reset:\n%s", h.Name(), up.Tail(20))
	}
	waitNoServers(t, h)
}

// serverPid is the pid of the process named name (etcd, kube-apiserver)
// running in h, 0 when none runs.
func serverPid(t *testing.T, h *host, name string) int {
	t.Helper()
	pids, err := netnsPids(filepath.Join(netnsDir, h.NetNS()))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if filepath.Base(strings.SplitN(string(data), "\x00", 2)[0]) != name {
			continue
		}
		if st, _, ok := procState(pid); ok && st != "Z" {
			return pid
		}
	}
	return 0
}

// signalStratum sends sig to the stratum process running in h (not to the
// shell that started it) and waits until it has exited.
func signalStratum(t *testing.T, h *host, sig syscall.Signal) {
	t.Helper()
	signalStratumEach(t, h, 0, sig)
}

// signalStratumEach sends each of sigs in turn, apart, to the stratum
// process running in h, then waits until it has exited. One that exited
// before the last signal fails t: the test asked for the signals to reach
// it while it ran.
func signalStratumEach(t *testing.T, h *host, apart time.Duration, sigs ...syscall.Signal) {
	t.Helper()
	pid := stratumPID(t, h)
	for i, sig := range sigs {
		if i > 0 {
			time.Sleep(apart)
			if st, _, ok := procState(pid); !ok || st == "Z" {
				t.Fatalf("stratum (pid %d) on %s exited before its %v number %d", pid, h.Name(), sig, i+1)
			}
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		st, _, ok := procState(pid)
		if !ok || st == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stratum (pid %d) on %s still runs a minute after %v", pid, h.Name(), sigs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// binDir is the control-plane binaries' directory on each host (stratum's default).
const binDir = "/var/lib/stratum/bin"

// tools are the binaries the test runs: the stratum under test and the
// clients (etcdctl, kubectl) built with the pinned assets.
type tools struct {
	stratum, stratumDir      string
	etcd, apiserver          string
	etcdctlPath, kubectlPath string
}

func buildTools(t *testing.T) *tools {
	t.Helper()
	requireNamespaces(t)
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "stratum"), "stratum.dev/stratum/cmd/stratum").CombinedOutput()
	if err != nil {
		t.Fatalf("build stratum: %v\n%s", err, out)
	}
	tl := &tools{stratum: filepath.Join(dir, "stratum"), stratumDir: dir}
	for _, b := range []struct {
		dst  *string
		find func() (string, error)
	}{
		{&tl.etcd, func() (string, error) { return assets.Etcd(version.Etcd) }},
		{&tl.apiserver, assets.KubeAPIServer},
		{&tl.etcdctlPath, assets.Etcdctl},
		{&tl.kubectlPath, assets.Kubectl},
	} {
		p, err := b.find()
		if err != nil {
			t.Fatalf("%v (run `make assets`)", err)
		}
		*b.dst = p
	}
	return tl
}

// installedMachines builds the tools and n machines (cp1, cp2, ...), each
// with the pinned binaries installed where stratum looks for them.
func installedMachines(t *testing.T, n int) (*tools, *network) {
	t.Helper()
	tl := buildTools(t)
	nw := newNetwork(t, n)
	for _, h := range nw.Hosts() {
		tl.installBinDir(t, h)
	}
	return tl, nw
}

// installBinDir puts the pinned etcd and kube-apiserver in h's bin directory,
// as `make dist`'s bin/ is installed on a machine.
func (tl *tools) installBinDir(t *testing.T, h *host) {
	t.Helper()
	tl.installBinDirAt(t, h.MachinePath(binDir))
}

// installBinDirAt puts the pinned etcd and kube-apiserver in dir.
func (tl *tools) installBinDirAt(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"etcd": tl.etcd, "kube-apiserver": tl.apiserver} {
		if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// shell runs line through sh with the stratum under test first on PATH, so a
// printed command line that starts with "stratum" runs as printed.
func (tl *tools) shell(line string) []string {
	return []string{"env", "PATH=" + tl.stratumDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "sh", "-c", line}
}

// run runs stratum with args on h and returns its stdout; a failure fails t.
func (tl *tools) run(ctx context.Context, t *testing.T, h *host, args ...string) string {
	t.Helper()
	out, errOut, err := h.Run(ctx, append([]string{tl.stratum}, args...)...)
	if err != nil {
		t.Fatalf("stratum %s on %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), h.Name(), err, out, errOut)
	}
	return out
}

// checkExpiredTokenCollected: with no kube-controller-manager on these
// hosts, a control-plane grant minted for 5 s is gone once an operator pass
// has run after its expiry (this one, or the elected operator's), and the
// shared certificates keep the join's token, still live, as their only
// owner. kubectl judges both.
func checkExpiredTokenCollected(ctx context.Context, t *testing.T, tools *tools, h *host, joinToken string) {
	t.Helper()
	short, _ := joinCommands(t, tools.run(ctx, t, h, "token", "create", "--control-plane", "--ttl", "5s"))
	id, _, _ := strings.Cut(flagValue(short, "--token"), ".")
	time.Sleep(5 * time.Second)
	t.Logf("stratum operator pass after token %s expired:\n%s", id, tools.run(ctx, t, h, "operator", "pass"))
	if out, errOut, err := h.Run(ctx, tools.kubectlArgs("-n", "kube-system", "get", "secret", "bootstrap-token-"+id)...); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Fatalf("kubectl get secret bootstrap-token-%s after its expiry and an operator pass: err %v, stdout %q, stderr %q; want NotFound", id, err, out, errOut)
	}
	joinID, _, _ := strings.Cut(joinToken, ".")
	owners := tools.kubectl(ctx, t, h, "-n", "kube-system", "get", "secret", "stratum-certs", "-o", "jsonpath={.metadata.ownerReferences[*].name}")
	if strings.TrimSpace(owners) != "bootstrap-token-"+joinID {
		t.Fatalf("stratum-certs' owners after token %s was collected: %q, want only the join's bootstrap-token-%s", id, owners, joinID)
	}
}

func (tl *tools) etcdctlArgs(h *host, args ...string) []string {
	return append([]string{tl.etcdctlPath,
		"--endpoints=https://" + h.IP().String() + ":2379",
		"--cacert=/etc/stratum/pki/etcd/ca.crt",
		"--cert=/etc/stratum/pki/apiserver-etcd-client.crt",
		"--key=/etc/stratum/pki/apiserver-etcd-client.key",
		"--command-timeout=5s",
	}, args...)
}

func (tl *tools) etcdctl(ctx context.Context, t *testing.T, h *host, args ...string) string {
	t.Helper()
	out, errOut, err := h.Run(ctx, tl.etcdctlArgs(h, args...)...)
	if err != nil {
		t.Fatalf("etcdctl %s on %s: %v\n%s%s", strings.Join(args, " "), h.Name(), err, out, errOut)
	}
	return out
}

func (tl *tools) kubectlArgs(args ...string) []string {
	// Its discovery cache goes to the test's directory, not the machine's ~/.kube.
	return append([]string{tl.kubectlPath, "--kubeconfig=/etc/stratum/admin.conf", "--cache-dir=" + filepath.Join(tl.stratumDir, "kube-cache")}, args...)
}

func (tl *tools) kubectl(ctx context.Context, t *testing.T, h *host, args ...string) string {
	t.Helper()
	out, errOut, err := h.Run(ctx, tl.kubectlArgs(args...)...)
	if err != nil {
		t.Fatalf("kubectl %s on %s: %v\n%s%s", strings.Join(args, " "), h.Name(), err, out, errOut)
	}
	return out
}

// notifySocket is a service manager's notify socket, as systemd gives a
// Type=notify unit: its path (in the test's temporary directory, which the
// hosts share) for NOTIFY_SOCKET, and the next datagram sent to it, which
// fails t if p exits first or nothing comes within the bound.
func notifySocket(t *testing.T) (string, func(t *testing.T, p *proc, within time.Duration) string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return path, func(t *testing.T, p *proc, within time.Duration) string {
		t.Helper()
		select {
		case msg := <-got:
			return msg
		case <-p.Done():
			t.Fatalf("%s exited before it notified the service manager: %v\n%s", p, p.Wait(), p.Tail(30))
		case <-time.After(within):
			t.Fatalf("%s did not notify the service manager within %s:\n%s", p, within, p.Tail(30))
		}
		return ""
	}
}

// waitSupervising waits until p (stratum up or server) says it supervises
// its control plane; it fails t if p exits first or the wait times out.
func waitSupervising(t *testing.T, p *proc, within time.Duration) {
	t.Helper()
	began := time.Now()
	deadline := time.After(within)
	defer func() {
		if !t.Failed() {
			t.Logf("%s supervising its control plane after %s; its steps:\n%s", p, time.Since(began).Round(100*time.Millisecond), stepLines(p.Output()))
		}
	}()
	for !strings.Contains(p.Output(), "supervising this control plane") {
		select {
		case <-p.Done():
			t.Fatalf("%s exited before its control plane was up: %v\n%s", p, p.Wait(), p.Tail(30))
		case <-deadline:
			t.Fatalf("%s not up within %s:\n%s", p, within, p.Tail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stepLines are the progress lines of a bring-up or join's output: each
// step with its duration, and what a step restarted or waited for.
func stepLines(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "done in") || strings.Contains(l, "restarting") || strings.Contains(l, "waiting") {
			keep = append(keep, "  "+strings.TrimSpace(l))
		}
	}
	return strings.Join(keep, "\n")
}

// joinCommands are the two join commands `token create --control-plane`
// printed: the flag form (one line) and the secret-file form (two lines).
func joinCommands(t *testing.T, out string) (join, secretFiles string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "stratum server ") && strings.Contains(l, "--token "):
			join = l
		case strings.HasPrefix(l, "(umask 077;") && i+1 < len(lines):
			secretFiles = l + "\n" + strings.TrimSpace(lines[i+1])
		}
	}
	if join == "" || secretFiles == "" {
		t.Fatalf("token create printed no join command in both forms:\n%s", out)
	}
	return join, secretFiles
}

// flagValue is the value after flag in a printed command line.
func flagValue(cmdline, flag string) string {
	f := strings.Fields(cmdline)
	for i := range f[:len(f)-1] {
		if f[i] == flag {
			return f[i+1]
		}
	}
	return ""
}

func flipHex(s string) string {
	last := s[len(s)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return s[:len(s)-1] + string(repl)
}

// checkSecretsNotInProcessList fails t if any process's command line holds
// the token's secret or the certificate-key while cp2 (joined with the
// printed flag form) and cp3 (the secret-file form) run: cp2's stratum ran
// itself again with its secrets in its environment before it changed
// anything. The harness's own wrappers of cp2's join (env, then sh -c; a
// shell the command is typed into has no such argv) are not judged.
func checkSecretsNotInProcessList(t *testing.T, tok, key string) {
	t.Helper()
	_, secret, _ := strings.Cut(tok, ".")
	entries, _ := os.ReadDir("/proc")
	sawFileForm, sawFlagForm := false, false
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) > 2 && (filepath.Base(args[0]) == "env" || filepath.Base(args[0]) == "sh" && args[1] == "-c") {
			continue
		}
		cmdline := strings.Join(args, " ")
		if filepath.Base(args[0]) == "stratum" && slices.Contains(args, "server") {
			if slices.Contains(args, "--token-file") {
				sawFileForm = true
			} else {
				sawFlagForm = true
			}
		}
		if strings.Contains(cmdline, secret) || strings.Contains(cmdline, key) {
			t.Fatalf("process %s's command line carries a join secret: %s", e.Name(), cmdline)
		}
	}
	if !sawFileForm || !sawFlagForm {
		t.Fatalf("running stratum servers: one joined with --token-file %v, one with the flag form %v; want both (cp3's and cp2's)", sawFileForm, sawFlagForm)
	}
}

type memberList struct {
	Members []struct {
		ID         uint64   `json:"ID"`
		Name       string   `json:"name"`
		ClientURLs []string `json:"clientURLs"`
		IsLearner  bool     `json:"isLearner"`
	} `json:"members"`
}

func listMembers(ctx context.Context, t *testing.T, tl *tools, h *host) memberList {
	t.Helper()
	var ml memberList
	out := tl.etcdctl(ctx, t, h, "member", "list", "-w", "json")
	if err := json.Unmarshal([]byte(out), &ml); err != nil {
		t.Fatalf("etcdctl member list -w json: %v\n%s", err, out)
	}
	return ml
}

// waitVoters waits until etcdctl through h lists n started voters, and
// returns their names.
func waitVoters(ctx context.Context, t *testing.T, tl *tools, h *host, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ml := listMembers(ctx, t, tl, h)
		var names []string
		for _, m := range ml.Members {
			if !m.IsLearner && m.Name != "" && len(m.ClientURLs) > 0 {
				names = append(names, m.Name)
			}
		}
		if len(names) == n && len(ml.Members) == n {
			slices.Sort(names)
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd through %s: %+v, want %d started voters", h.Name(), ml.Members, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func memberIDs(ctx context.Context, t *testing.T, tl *tools, h *host) []uint64 {
	var ids []uint64
	for _, m := range listMembers(ctx, t, tl, h).Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// vipHolder is the host whose interface carries the VIP, waiting for one.
func vipHolder(ctx context.Context, t *testing.T, nw *network) *host {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var holders []*host
		for _, h := range nw.Hosts() {
			out, _, err := h.Run(ctx, "ip", "-4", "-o", "addr", "show")
			if err == nil && strings.Contains(out, " "+nw.VIP().String()+"/32 ") {
				holders = append(holders, h)
			}
		}
		if len(holders) == 1 {
			return holders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("VIP %s is on %d hosts, want exactly one", nw.VIP(), len(holders))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNoServers waits until no etcd or kube-apiserver runs in h's network
// namespace and nothing listens on their ports: a stopped or killed stratum
// leaves no child behind. A killed server's thread-group leader shows as a
// zombie while its other threads still exit, holding its sockets: a start
// right then met "port 6443 is in use", so the ports are waited for too.
func waitNoServers(t *testing.T, h *host) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids, err := netnsPids(filepath.Join(netnsDir, h.NetNS()))
		if err != nil {
			t.Fatal(err)
		}
		var servers []string
		for _, pid := range pids {
			data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			name := filepath.Base(strings.SplitN(string(data), "\x00", 2)[0])
			if st, _, ok := procState(pid); ok && st != "Z" && (name == "etcd" || name == "kube-apiserver" || strings.HasPrefix(name, "etcd-")) {
				servers = append(servers, fmt.Sprintf("%s (pid %d)", name, pid))
			}
		}
		servers = append(servers, listeners(h, 2379, 2380, 6443)...)
		if len(servers) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs %v after its stratum ended", h.Name(), servers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listeners names each of ports something listens on in h's network
// namespace (its TCP tables, read through its holder process).
func listeners(h *host, ports ...int) []string {
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", h.holder.Process.Pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" { // LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err == nil && slices.Contains(ports, int(port)) {
				out = append(out, fmt.Sprintf("a listener on port %d (%s)", port, table))
			}
		}
	}
	return out
}

// hostFiles lists every file under h's stratum directories with its size
// and mode (the bin directory's links included), but the empty lock files
// under /run/stratum: flock(2) locks live on files that are kept after
// release (removing one would let two holders lock different inodes), on a
// tmpfs a reboot clears.
func hostFiles(t *testing.T, h *host) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range privateDirs {
		root := h.MachinePath(d)
		err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			if d == "/run/stratum" && strings.HasSuffix(p, ".lock") && fi.Size() == 0 {
				return nil
			}
			out[strings.TrimPrefix(p, h.Root())] = fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkUnchanged fails t unless etcd's members (through via) and target's
// files are what they were before a refused join.
func checkUnchanged(ctx context.Context, t *testing.T, tl *tools, via, target *host, members []uint64, files map[string]string, what string) {
	t.Helper()
	if got := memberIDs(ctx, t, tl, via); !slices.Equal(got, members) {
		t.Fatalf("%s: etcd members %x, were %x", what, got, members)
	}
	got := hostFiles(t, target)
	for p, v := range got {
		if files[p] != v {
			t.Errorf("%s: %s on %s is new or changed (%s)", what, p, target.Name(), v)
		}
	}
	for p := range files {
		if _, ok := got[p]; !ok {
			t.Errorf("%s: %s on %s was removed", what, p, target.Name())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// refusedExit is stratum's exit code for a command refused before it
// changed anything (cli.ExitRefused, docs/cli.md).
const refusedExit = 3

// exitCode is the exit status err reports, -1 when it is not a command's
// exit (nil included: 0 is not a refusal either).
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// TestStratumOutlivesAClosedOutput: stratum writing to a stdout whose reader
// is gone (a `stratum up | tee up.log` whose tee died with the terminal)
// gets EPIPE and goes on, instead of being killed by SIGPIPE, which for a
// supervisor skipped its whole shutdown (etcd and the apiserver killed by
// their parent-death signal, the VIP and the operator's leases never
// released).
func TestStratumOutlivesAClosedOutput(t *testing.T) {
	tl := buildTools(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // no reader
	cmd := exec.Command(tl.stratum, "--help")
	cmd.Stdout = w
	err = cmd.Run()
	w.Close()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("stratum --help with its stdout's reader gone was killed by %v (%v)", ws.Signal(), err)
	}
}

// TestInstallRefusesAStratumOthersCanReplace: `stratum install` writes a
// unit that systemd runs as root at every boot, so it refuses (exit 3,
// nothing written) a stratum binary another user could replace: one in a
// directory group- or world-writable without the sticky bit. The same
// binary in a directory of root's alone installs (--dry-run prints the unit).
func TestInstallRefusesAStratumOthersCanReplace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the check applies to root, which systemd runs the unit as")
	}
	tl := buildTools(t)
	data, err := os.ReadFile(tl.stratum)
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir() // the pinned binaries' directory, for the unit's check
	tl.installBinDirAt(t, binDir)
	unitDir := t.TempDir()
	for _, c := range []struct {
		mode   os.FileMode
		exit   int
		reason string
	}{
		{0o777, refusedExit, "is writable by its group or others"},
		{0o775, refusedExit, "is writable by its group or others"},
		{0o755, 0, ""},
	} {
		dir := filepath.Join(t.TempDir(), "bin")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		self := filepath.Join(dir, "stratum")
		if err := os.WriteFile(self, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(self, "install", "--dry-run", "--bin-dir", binDir, "--unit-dir", unitDir).CombinedOutput()
		if got := exitCode(err); got != c.exit || c.reason != "" && !strings.Contains(string(out), c.reason) {
			t.Errorf("stratum install from a directory of mode %#o: exit %d, want %d (%q)\n%s", c.mode, got, c.exit, c.reason, out)
		}
		if c.exit == 0 && !strings.Contains(string(out), "ExecStart="+self+" up --as-supervisor") {
			t.Errorf("stratum install --dry-run from a directory of root's alone printed no unit running it:\n%s", out)
		}
	}
}

// writeEncryptionConfig places an at-rest encryption config (aescbc for
// Secrets, a fresh key) where stratum's apiserver reads it and its uploads
// carry it to joiners.
func writeEncryptionConfig(t *testing.T, h *host) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: e2e\n              secret: " +
		base64.StdEncoding.EncodeToString(key) + "\n      - identity: {}\n"
	p := h.MachinePath(certbundle.EncryptionConfigPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkSecretsEncryptedAtRest writes a Secret with kubectl through the VIP
// (on via), reads it back through each of readers' own apiservers, and reads
// its etcd key with etcdctl: stored under the aescbc provider, never in
// the clear.
func checkSecretsEncryptedAtRest(ctx context.Context, t *testing.T, tl *tools, via *host, readers []*host) {
	t.Helper()
	tl.kubectl(ctx, t, via, "create", "secret", "generic", "at-rest", "--from-literal=word=plaintext-marker")
	raw := tl.etcdctl(ctx, t, via, "get", "/registry/secrets/default/at-rest", "--print-value-only")
	if !strings.HasPrefix(raw, "k8s:enc:aescbc:v1:e2e:") || strings.Contains(raw, "plaintext-marker") {
		t.Fatalf("the Secret in etcd is not encrypted by the placed config (starts %q)", raw[:min(len(raw), 40)])
	}
	for _, h := range readers {
		got := tl.kubectl(ctx, t, h, "--server=https://"+h.IP().String()+":6443", "get", "secret", "at-rest", "-o", "jsonpath={.data.word}")
		if want := base64.StdEncoding.EncodeToString([]byte("plaintext-marker")); strings.TrimSpace(got) != want {
			t.Fatalf("%s's own apiserver reads the encrypted Secret as %q, want %q", h.Name(), got, want)
		}
	}
}
