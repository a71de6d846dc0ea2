package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/sdnotify"
	"stratum.dev/stratum/internal/version"
)

// TestSingleControlPlaneGrowsIntoHA is the other way a cluster begins on
// real machines: one control plane without a VIP (its clients on its own
// address; the cis profile, so its apiserver audits the join's grant), a second joined with the command printed there (its clients on
// its own apiserver, never the server it joined through), then the VIP
// adopted and every node's clients moved onto it, as docs/cli.md tells it:
// cp1 adopts it through its running supervisor (`stratum up --vip` beside
// it: the apiserver certificate reissued to cover the VIP and the apiserver
// restarted onto it, the supervisor and etcd running on; a different VIP
// then refused, nothing changed), cp2 as it starts (its supervisor stopped,
// then `up --vip`), then `stratum repoint --vip` runs through each running
// supervisor. A third joins with a command minted after, through the VIP.
// cp3's etcd data is then lost: its supervisor stays up and the rejoin its
// refusal advises runs through it; an upgrade is refused meanwhile, on cp1
// (a member down) and on cp3 (its supervisor waiting). The VIP holder is then
// upgraded in place with `stratum upgrade node` of a next release while the
// others serve.
// Last, the VIP holder's stratum is SIGKILLed and kubectl through the VIP
// answers from a survivor within 20 s: the control planes that joined before
// the VIP existed serve it with certificates that cover it, as clients
// nobody here wrote check. The survivors are stopped with two SIGTERMs,
// the second killing what still runs at once.
func TestSingleControlPlaneGrowsIntoHA(t *testing.T) {
	t.Parallel() // its own machines; the other real-host tests run beside it
	tools, nw := installedMachines(t, 3)
	cp1, cp2, cp3 := nw.Host("cp1"), nw.Host("cp2"), nw.Host("cp3")
	vip := nw.VIP().String()
	vipURL := "https://" + vip + ":6443"
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// A single controller (the cis profile: its apiserver audits), and a
	// second joined through its own address.
	up1 := cp1.Start(tools.stratum, "up", "--profile", "cis")
	waitSupervising(t, up1, 3*time.Minute)
	join, _ := joinCommands(t, tools.run(ctx, t, cp1, "token", "create", "--control-plane"))
	if want := "--server https://" + cp1.IP().String() + ":6443"; !strings.Contains(join, want) {
		t.Fatalf("the join command printed on a control plane without a VIP does not name its address (%s): %s", want, join)
	}
	// cp2's kube-apiserver fails until the test lets it (a wrapper in
	// another --bin-dir): its start fails after its member was promoted, a
	// cluster of two voters. The supervisor keeps etcd running, so cp1
	// still takes writes, and tries the start again until it succeeds.
	heldBack := holdBackAPIServer(ctx, t, cp2)
	up2 := cp2.Start(tools.shell(join + " --bin-dir " + heldBack.dir)...)
	waitFor(t, 2*time.Minute, "cp2's supervisor keeping its voter's etcd after its apiserver failed", func() bool {
		return strings.Contains(up2.Output(), "so etcd keeps running and the start is tried again")
	}, up2)
	tools.kubectl(ctx, t, cp1, "create", "configmap", "written-while-cp2-retries", "--request-timeout=20s")
	heldBack.release(ctx, t)
	waitSupervising(t, up2, 3*time.Minute)
	if !strings.Contains(up2.Output(), "the start succeeded on attempt") {
		t.Fatalf("cp2's supervisor is up, but not through a retried start:\n%s", up2.Tail(20))
	}
	if server, own := kubeconfigServer(ctx, t, tools, cp2), "https://"+cp2.IP().String()+":6443"; server != own {
		t.Fatalf("cp2's admin kubeconfig targets %s, want its own apiserver %s: no VIP yet, and never the server it joined through", server, own)
	}
	// cp1's apiserver audited the join's grant: the bootstrap token's
	// Secret, created through it by `token create`, at Metadata level.
	audit := readMachineFiles(t, cp1, controlplane.AuditLogPath)[controlplane.AuditLogPath]
	if !auditedTokenCreate(audit) {
		t.Fatalf("cp1 (--profile cis) has no audit event of the bootstrap token's Secret in %s (%d bytes)", controlplane.AuditLogPath, len(audit))
	}

	// cp1 adopts the VIP through its running supervisor: the node state
	// records it, the apiserver certificate is reissued to cover it, and
	// the supervisor (etcd with it) keeps running.
	o, e, err := cp1.Run(ctx, tools.stratum, "up", "--vip", vip)
	if err != nil || !strings.Contains(o, "adopting the VIP "+vip+" through it") {
		t.Fatalf("stratum up --vip beside cp1's running supervisor = %v, want it adopted through the supervisor\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	t.Logf("stratum up --vip beside cp1's supervisor printed:\n%s", o)
	select {
	case <-up1.Done():
		t.Fatalf("cp1's supervisor exited when the VIP was adopted through it:\n%s", up1.Tail(20))
	default:
	}
	if st := readMachineFiles(t, cp1, nodestate.Path)[nodestate.Path]; !strings.Contains(st, `"`+vip+`"`) {
		t.Fatalf("cp1's node state after the VIP was adopted does not record it:\n%s", st)
	}
	certCoversIP(t, cp1, vip)
	// A different VIP now: refused, nothing changed.
	kept := []string{nodestate.Path, version.PKIFile("apiserver.crt")}
	before := readMachineFiles(t, cp1, kept...)
	other := cp3.IP().String() // any address but the VIP
	if o, e, err := cp1.Run(ctx, tools.stratum, "up", "--vip", other); exitCode(err) != refusedExit || !strings.Contains(e, "this cluster's VIP is "+vip) {
		t.Fatalf("stratum up --vip %s on cp1, whose VIP is %s: %v, want exit %d naming the VIP\nstdout:\n%s\nstderr:\n%s", other, vip, err, refusedExit, o, e)
	}
	if after := readMachineFiles(t, cp1, kept...); !maps.Equal(before, after) {
		t.Fatalf("a refused stratum up --vip changed %v on cp1", kept)
	}
	// `stratum up --as-supervisor` (the systemd unit's) beside the running
	// supervisor refuses, doing nothing, so systemd tries it again until
	// that supervisor stops (it once started through it and exited 0).
	if o, e, err := cp1.Run(ctx, tools.stratum, "up", "--as-supervisor"); exitCode(err) != refusedExit || !strings.Contains(e, "with --as-supervisor stratum up runs this node's supervisor or nothing") || strings.Contains(o, "starting what its node state records") {
		t.Fatalf("stratum up --as-supervisor beside cp1's running supervisor = %v, want a refusal\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	// A plain `stratum up` beside the running supervisor (what error
	// messages advise) starts through it what is not running, and exits.
	if o, e, err := cp1.Run(ctx, tools.stratum, "up"); err != nil || !strings.Contains(o, "starting what its node state records through it") || !strings.Contains(o, "control plane up: node ") {
		t.Fatalf("stratum up beside cp1's running supervisor = %v, want the start through it\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	select {
	case <-up1.Done():
		t.Fatalf("cp1's supervisor exited after a stratum up through it:\n%s", up1.Tail(20))
	default:
	}

	// cp2 adopts it as it starts: its supervisor stopped, then `up --vip`.
	supervisor := map[*host]*proc{cp1: up1}
	signalStratum(t, cp2, syscall.SIGTERM)
	waitNoServers(t, cp2)
	supervisor[cp2] = cp2.Start(tools.stratum, "up", "--vip", vip)
	waitSupervising(t, supervisor[cp2], 3*time.Minute)
	certCoversIP(t, cp2, vip)
	for _, h := range []*host{cp1, cp2} {
		out := tools.run(ctx, t, h, "repoint", "--vip", vip)
		t.Logf("stratum repoint --vip on %s printed:\n%s", h.Name(), out)
		if server := kubeconfigServer(ctx, t, tools, h); server != vipURL {
			t.Fatalf("%s's admin kubeconfig after the repoint targets %q, want the VIP", h.Name(), server)
		}
	}

	// A third control plane joins through the VIP.
	join3, _ := joinCommands(t, tools.run(ctx, t, cp2, "token", "create", "--control-plane"))
	if !strings.Contains(join3, "--server "+vipURL) {
		t.Fatalf("the join command printed after the VIP was adopted does not name it: %s", join3)
	}
	supervisor[cp3] = cp3.Start(tools.shell(join3)...)
	waitSupervising(t, supervisor[cp3], 3*time.Minute)
	waitVoters(ctx, t, tools, cp1, 3)
	tools.etcdctl(ctx, t, cp3, "endpoint", "health", "--cluster")
	for _, h := range []*host{cp1, cp2, cp3} {
		if got := tools.kubectl(ctx, t, h, "get", "--raw", "/readyz"); strings.TrimSpace(got) != "ok" {
			t.Fatalf("kubectl on %s through the VIP: /readyz = %q", h.Name(), got)
		}
	}

	// cp3's etcd disk dies and an empty one replaces it. Its supervisor,
	// started as the systemd unit runs it, refuses to start etcd there and
	// stays up with nothing started; the rejoin its refusal advises runs
	// through it (it once found no supervisor and failed after its
	// member-add), and the supervisor then starts the control plane.
	signalStratum(t, cp3, syscall.SIGTERM)
	waitNoServers(t, cp3)
	if _, e, err := cp3.Run(ctx, "rm", "-rf", version.EtcdDataDir+"/member"); err != nil {
		t.Fatalf("removing cp3's etcd data: %v: %s", err, e)
	}
	notifyPath, notified := notifySocket(t)
	lost := cp3.Start("env", sdnotify.SocketEnv+"="+notifyPath, tools.stratum, "up", "--as-supervisor")
	// Settled into its wait, it tells the service manager it is ready
	// (a unit whose start never ended would be killed at its timeout,
	// supervisor and all) and says what it waits for.
	if msg := notified(t, lost, time.Minute); !strings.HasPrefix(msg, "READY=1\nSTATUS=waiting, with nothing started, for this node's etcd data") {
		t.Fatalf("cp3's supervisor without its etcd data told the service manager %q, want READY=1 naming the wait", msg)
	}
	waitFor(t, time.Minute, "cp3's supervisor staying up without its etcd data", func() bool {
		return strings.Contains(lost.Output(), "the supervisor stays up with nothing started")
	}, lost)
	if out := lost.Output(); !strings.Contains(out, "etcd data missing") || !strings.Contains(out, "stratum etcd rejoin --server") {
		t.Fatalf("cp3's supervisor without its etcd data does not name the loss and the rejoin:\n%s", lost.Tail(20))
	}
	if o, e, err := cp3.Run(ctx, tools.stratum, "status"); exitCode(err) != 1 || !strings.Contains(e, "etcd data missing") {
		t.Fatalf("stratum status on cp3 waiting for its etcd data = %v, want exit 1 naming the missing data\nstdout:\n%s\nstderr:\n%s", err, o, e)
	}
	// No upgrade meanwhile, with nothing changed: cp1's, with cp3's member
	// down, could take the quorum; cp3's supervisor waits for its data.
	next := buildNextRelease(t)
	refuseUpgrade(ctx, t, cp1, next, "stopping this etcd member while the cluster is unhealthy could take its quorum", cp3.IP().String())
	refuseUpgrade(ctx, t, cp3, next, "is waiting for its etcd data")
	t.Logf("stratum etcd rejoin on cp3 printed:\n%s", tools.run(ctx, t, cp3, "etcd", "rejoin", "--server", cp1.IP().String()))
	if msg := notified(t, lost, 2*time.Minute); !strings.HasPrefix(msg, "READY=1\nSTATUS=supervising this control plane") {
		t.Fatalf("cp3's supervisor, its data back, told the service manager %q, want READY=1 supervising", msg)
	}
	waitSupervising(t, lost, 2*time.Minute)
	supervisor[cp3] = lost
	waitVoters(ctx, t, tools, cp1, 3)
	tools.etcdctl(ctx, t, cp3, "endpoint", "health", "--cluster")

	// The VIP holder is upgraded in place to a next release while the
	// others serve (upgradeHolderInPlace).
	upgradeHolderInPlace(ctx, t, tools, nw, next)

	// The first failover: whichever control plane held the VIP dies, and
	// the VIP answers from another, TLS verified against the cluster CA.
	holder := vipHolder(ctx, t, nw)
	t.Logf("%s holds the VIP; SIGKILL its stratum", holder.Name())
	killed := time.Now()
	signalStratum(t, holder, syscall.SIGKILL)
	waitNoServers(t, holder)
	survivor := cp1
	if holder == cp1 {
		survivor = cp2
	}
	waitVIPAnswersAfter(ctx, t, tools, nw, survivor, killed)
	// The survivors are stopped as an impatient operator does: SIGTERM,
	// then again while the shutdown runs, which kills what still runs at
	// once and says so (it was swallowed; the shutdown went on for up to
	// its services' SIGTERM grace).
	for h, p := range supervisor {
		if h == holder {
			continue
		}
		// Apart: two at once may reach Go's signal handling as one.
		signalStratumEach(t, h, 200*time.Millisecond, syscall.SIGTERM, syscall.SIGTERM)
		waitNoServers(t, h)
		if out := p.Output(); !strings.Contains(out, "stopping the control plane") || !strings.Contains(out, "second signal (terminated): killing what still runs at once") {
			t.Fatalf("%s's stratum did not stop at once on a second SIGTERM:\n%s", h.Name(), p.Tail(20))
		}
	}
}

// waitVIPAnswersAfter waits until kubectl on survivor reads /readyz through
// the VIP, and fails t unless it does within 20 s of killed, the moment the
// VIP holder died.
func waitVIPAnswersAfter(ctx context.Context, t *testing.T, tl *tools, nw *network, survivor *host, killed time.Time) {
	t.Helper()
	var last string
	for {
		o, _, err := survivor.Run(ctx, tl.kubectlArgs("get", "--raw", "/readyz", "--request-timeout=2s")...)
		if err == nil && strings.TrimSpace(o) == "ok" {
			break
		}
		last = fmt.Sprint(o, err)
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("kubectl through the VIP from %s did not answer within 20 s of the holder's death (last: %s)", survivor.Name(), last)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("kubectl through the VIP answered %s after the holder died; holder now %s", time.Since(killed).Round(100*time.Millisecond), vipHolder(ctx, t, nw).Name())
}

// auditedTokenCreate reports whether an audit log holds the Metadata-level
// create of a bootstrap token's Secret.
func auditedTokenCreate(log string) bool {
	for _, l := range strings.Split(log, "\n") {
		var e struct {
			Level, Verb string
			ObjectRef   *struct{ Resource, Name string }
		}
		if json.Unmarshal([]byte(l), &e) != nil || e.ObjectRef == nil {
			continue
		}
		if e.Verb == "create" && e.Level == "Metadata" && e.ObjectRef.Resource == "secrets" && strings.HasPrefix(e.ObjectRef.Name, "bootstrap-token-") {
			return true
		}
	}
	return false
}

// certCoversIP fails t unless h's apiserver certificate names ip.
func certCoversIP(t *testing.T, h *host, ip string) {
	t.Helper()
	p := version.PKIFile("apiserver.crt")
	block, _ := pem.Decode([]byte(readMachineFiles(t, h, p)[p]))
	if block == nil {
		t.Fatalf("%s's %s holds no PEM certificate", h.Name(), p)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.VerifyHostname(ip) != nil {
		t.Fatalf("%s's apiserver certificate does not cover %s (it names %v)", h.Name(), ip, cert.IPAddresses)
	}
}

// readMachineFiles reads each of paths on h's machine.
func readMachineFiles(t *testing.T, h *host, paths ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(h.MachinePath(p))
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	return out
}

// kubeconfigServer is the server h's admin kubeconfig targets, as kubectl
// reads it.
func kubeconfigServer(ctx context.Context, t *testing.T, tl *tools, h *host) string {
	t.Helper()
	return strings.TrimSpace(tl.kubectl(ctx, t, h, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"))
}

// heldBackAPIServer is a --bin-dir on a machine whose kube-apiserver exits
// at once, until release: its etcd is the installed one.
type heldBackAPIServer struct {
	h   *host
	dir string
}

func holdBackAPIServer(ctx context.Context, t *testing.T, h *host) heldBackAPIServer {
	t.Helper()
	dir := "/var/lib/stratum/bin-held-back"
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = --version ] || [ -e " + dir + "/released ]; then exec " + binDir + "/kube-apiserver \"$@\"; fi\n" +
		"echo 'e2e: kube-apiserver held back until " + dir + "/released exists' >&2\nexit 1\n"
	cmd := "install -d -m 0755 " + dir + " && ln -sf " + binDir + "/etcd " + dir + "/etcd && printf '%s' \"$1\" > " + dir + "/kube-apiserver && chmod 0755 " + dir + "/kube-apiserver"
	if out, errOut, err := h.Run(ctx, "sh", "-c", cmd, "sh", script); err != nil {
		t.Fatalf("hold back %s's kube-apiserver: %v\n%s%s", h.Name(), err, out, errOut)
	}
	return heldBackAPIServer{h: h, dir: dir}
}

func (b heldBackAPIServer) release(ctx context.Context, t *testing.T) {
	t.Helper()
	if out, errOut, err := b.h.Run(ctx, "touch", b.dir+"/released"); err != nil {
		t.Fatalf("release %s's kube-apiserver: %v\n%s%s", b.h.Name(), err, out, errOut)
	}
}
