package ha_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/clusteradmins"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// The tests of issue 11: a cluster that survives losing any control plane as
// a client sees it, join refusals that can never hurt the cluster, and
// bring-ups and joins that converge on every re-run.

// vipClient is what a user of the cluster has: a client built from the admin
// kubeconfig exactly as the node wrote it (the VIP as its server, only the
// cluster CA to verify it), nothing else.
func vipClient(t *testing.T, h *sim.Host) kubernetes.Interface {
	t.Helper()
	kc, err := h.Files().ReadFile(version.Kubeconfig("admin"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Fatalf("%s's admin kubeconfig does not verify the server with the cluster CA", h.Name())
	}
	cfg.Timeout = 3 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}

// readyThroughVIP polls /readyz through cs until it answers ok, within d.
func readyThroughVIP(ctx context.Context, cs kubernetes.Interface, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = fmt.Errorf("readyz %q: %v", body, err)
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// TestEveryControlPlaneServesTheVIPAfterFailover joins two control planes
// with the join command as minted (no --vip), then kills the VIP holder's
// apiserver twice: each time a client with only the cluster CA must read
// through the VIP within 20 s, so every control plane that can win the VIP
// serves it with a certificate that covers it.
func TestEveryControlPlaneServesTheVIPAfterFailover(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	for _, name := range []string{"cp2", "cp3"} {
		o := j.mint(time.Hour)
		if o.VIP.Address != "" {
			t.Fatal("the minted join options carry a VIP; the test must join without one")
		}
		if err := j.join(name, o); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
		crt, err := j.c.Host(name).Files().ReadFile(version.PKIFile("apiserver.crt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.CheckLeafCovers(crt, net.IP(j.c.VIPAddress().AsSlice())); err != nil {
			t.Errorf("%s joined without --vip: %v", name, err)
		}
	}
	cs := vipClient(t, j.c.Host("cp2"))
	if err := readyThroughVIP(j.ctx, cs, 20*time.Second); err != nil {
		t.Fatalf("through the VIP before any failover: %v", err)
	}
	for round := 1; round <= 2; round++ {
		holder, err := j.c.WaitVIP(j.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := readyThroughVIP(j.ctx, cs, 20*time.Second); err != nil {
			t.Fatalf("failover %d: %s's apiserver killed; through the VIP (now held by %v) a client with only the cluster CA got: %v", round, holder.Name(), j.c.VIPHolder(), err)
		}
	}
}

// TestStartReissuesAnAPIServerCertificateLackingTheVIP: a control plane whose
// apiserver certificate does not cover the VIP (joined by an older stratum)
// gets one that does on its next `stratum up`, and serves it.
func TestStartReissuesAnAPIServerCertificateLackingTheVIP(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	if err := j.join("cp2", j.mint(time.Hour)); err != nil {
		t.Fatal(err)
	}
	h := j.c.Host("cp2")
	shared := j.c.Shared()
	crt, key, err := pki.APIServerLeafFor(shared.Cluster, "cp2", net.IP(h.IP().AsSlice()), &pki.APISANs{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"apiserver.key": key, "apiserver.crt": crt} {
		if err := h.Files().WriteFile(version.PKIFile(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := joinNodeOn(h).Up(j.ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up on cp2: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(shared.Cluster.CertPEM)
	conn, err := tls.Dial("tcp", net.JoinHostPort(h.IP().String(), "6443"), &tls.Config{RootCAs: pool, ServerName: j.c.VIPAddress().String()})
	if err != nil {
		t.Fatalf("cp2's apiserver, verified as the VIP %s: %v", j.c.VIPAddress(), err)
	}
	conn.Close()
}

// addressHost is a host that claims an address that is not its own: the
// only way a join reaches the member-add with another member's peer URL now
// that --node-ip must be the host's.
type addressHost struct {
	*sim.Handle
	extra netip.Addr
}

func (a addressHost) Addresses() ([]netip.Addr, error) {
	own, err := a.Handle.Addresses()
	return append(own, a.extra), err
}

// TestJoinOnAnotherMembersAddressNeverHarmsIt: a join whose node IP is a
// member's own address is refused before anything changes; and should such
// a join reach the member-add anyway (a host claiming the address), its
// refusal removes nothing, and says nothing was added.
func TestJoinOnAnotherMembersAddressNeverHarmsIt(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	if err := j.join("cp2", j.mint(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cp2 := j.c.Host("cp2").IP().String()
	o := j.mint(time.Hour)
	o.NodeIP = cp2
	j.joinRefused("cp3", o, nil, "not an address of this host")

	before := j.members()
	h := j.c.Host("cp3")
	d := h.Handle()
	n := ha.NewNode(ha.Env{Host: addressHost{Handle: d, extra: j.c.Host("cp2").IP()}, Checkpoint: d.Checkpoint})
	_, err := n.PrepareControlPlaneJoin(j.ctx, o)
	if err == nil || !strings.Contains(err.Error(), "already has that peer URL") || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("join with cp2's address: %v", err)
	}
	time.Sleep(time.Second) // a rollback would have removed cp2 by now
	if after := j.members(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("a refused join changed the members: %v -> %v", before, after)
	}
	if hasFile(h, ha.JoinIntentPath()) {
		t.Fatal("a refused member-add left its journal behind")
	}
}

func hasFile(h *sim.Host, p string) bool {
	_, err := h.Files().ReadFile(p)
	return err == nil
}

// brokenServices is a host whose service manager cannot start anything.
type brokenServices struct{ *sim.Handle }

var errNoManager = errors.New("no service manager on this host")

func (brokenServices) CheckServices(context.Context, []string) error { return errNoManager }
func (brokenServices) StartService(context.Context, string) error    { return errNoManager }

// TestJoinRefusedBeforeTheAddWhenTheHostCannotStartServices: a host that
// could not start its etcd after the member-add is refused before the
// journal and the add, with nothing changed.
func TestJoinRefusedBeforeTheAddWhenTheHostCannotStartServices(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	d := h.Handle()
	n := ha.NewNode(ha.Env{Host: brokenServices{d}, Checkpoint: d.Checkpoint})
	err := j.joinChangingNothing(h, n, o)
	if !errors.Is(err, errNoManager) || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("join on a host that cannot start services: %v", err)
	}
}

// joinChangingNothing runs the join with n on h, and checks that it changed
// nothing: it never reached the intent journal, and the members and h's
// files are as they were. It returns the join's error.
func (j *joinCluster) joinChangingNothing(h *sim.Host, n *ha.Node, o ha.JoinOptions) error {
	t := j.t
	t.Helper()
	before := j.members()
	filesBefore := snapshotFiles(t, h.Root())
	intents := j.c.CheckpointsSeen()[ha.CheckpointBeforeIntent]
	_, err := n.PrepareControlPlaneJoin(j.ctx, o)
	if after := j.members(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("members changed: %v -> %v", before, after)
	}
	if seen := j.c.CheckpointsSeen()[ha.CheckpointBeforeIntent]; seen != intents {
		t.Fatalf("the join reached %s (%d times)", ha.CheckpointBeforeIntent, seen-intents)
	}
	checkFilesAsBefore(t, filesBefore, snapshotFiles(t, h.Root()))
	return err
}

// TestJoinRefusedWhenItsEtcdIsOlderThanTheCluster: a joiner whose etcd is
// the previous minor release (an older stratum on it) is refused before the
// member-add, naming both versions, and leaves nothing behind: etcd would
// refuse to start it after the add, and the unstarted learner left would
// block every later join. The same host on the cluster's etcd then joins.
func TestJoinRefusedWhenItsEtcdIsOlderThanTheCluster(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	h.SetEtcdVersion(version.EtcdPrevious)
	err := j.joinChangingNothing(h, joinNodeOn(h), o)
	if !errors.Is(err, ha.ErrEtcdVersionSkew) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), strings.TrimPrefix(version.EtcdPrevious, "v")) {
		t.Fatalf("join of a host on etcd %s into a cluster on %s: %v; want a refusal with ErrEtcdVersionSkew naming the versions", version.EtcdPrevious, version.Etcd, err)
	}
	h.SetEtcdVersion("")
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("the join on the cluster's etcd after the refusal: %v", err)
	}
}

// crashDuring runs op on h until h crashes at checkpoint cp (armed here),
// and fails the test if op returns instead. The crash is complete (services
// stopped, locks dropped) when it returns.
func crashDuring(t *testing.T, c *sim.Cluster, h *sim.Host, cp string, op func() error) {
	t.Helper()
	armed := c.CrashAt(h.Name(), cp)
	returned := make(chan error, 1)
	go func() { returned <- op() }()
	select {
	case <-armed.Reached():
	case err := <-returned:
		t.Fatalf("%s returned (%v) without reaching %s", h.Name(), err, cp)
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s never reached %s", h.Name(), cp)
	}
}

// TestResumedJournalIsKeptUntilTheStateIsSaved: a join crashed after its
// member-add leaves the journal; `stratum up` refuses over it; a re-run that
// is stopped before its add keeps it (the member exists); the next re-run
// finishes the join with that member.
func TestResumedJournalIsKeptUntilTheStateIsSaved(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	crashDuring(t, j.c, h, ha.CheckpointAfterMemberAdd, func() error {
		_, err := joinNodeOn(h).PrepareControlPlaneJoin(j.ctx, o)
		return err
	})
	if !hasFile(h, ha.JoinIntentPath()) {
		t.Fatal("no journal after a crash past the member-add")
	}
	if _, err := joinNodeOn(h).Up(j.ctx, ha.BootstrapOptions{}); !errors.Is(err, ha.ErrIntentSurvives) {
		t.Fatalf("stratum up over the journal: %v, want ErrIntentSurvives", err)
	}
	stop := errors.New("stopped by the test")
	j.c.FailAt("cp2", ha.CheckpointAfterIntent, stop)
	if _, err := joinNodeOn(h).PrepareControlPlaneJoin(j.ctx, o); !errors.Is(err, stop) {
		t.Fatalf("re-run stopped before the add: %v", err)
	}
	if !hasFile(h, ha.JoinIntentPath()) {
		t.Fatalf("the re-run stopped before its add dropped the journal while the member exists (members %v)", j.members())
	}
	if _, err := joinNodeOn(h).Up(j.ctx, ha.BootstrapOptions{}); !errors.Is(err, ha.ErrIntentSurvives) {
		t.Fatalf("stratum up over the kept journal: %v, want ErrIntentSurvives", err)
	}
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("final re-run: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members: %s", got)
	}
	if hasFile(h, ha.JoinIntentPath()) {
		t.Fatal("the journal survives a finished join")
	}
}

// TestUpPromotesALearnerLeftBetweenEtcdStartAndPromotion: a joined node that
// crashed after its etcd started, before the promotion, is promoted by the
// next `stratum up`. Until then its member is a started learner, which only
// its own node may take up: a member-add with its peer URL (a machine
// re-imaged under the same address) is refused, not taken as that add, and a
// rollback that lost its add's answer (no member ID) leaves it, while it does
// remove an unstarted learner with its peer URL, also when the member ID it
// holds is of a member gone.
func TestUpPromotesALearnerLeftBetweenEtcdStartAndPromotion(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	if _, err := joinNodeOn(h).PrepareControlPlaneJoin(j.ctx, o); err != nil {
		t.Fatal(err)
	}
	crashDuring(t, j.c, h, ha.CheckpointStartAfterEtcd, func() error {
		_, err := joinNodeOn(h).StartControlPlane(j.ctx)
		return err
	})
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:learner" {
		t.Fatalf("members after the crash: %s", got)
	}

	st, err := nodestate.Load(h.Files())
	if err != nil {
		t.Fatal(err)
	}
	etcdIPs := []string{j.c.Host("cp1").IP().String()}
	_, err = j.cp1.MemberAdd(j.ctx, etcdIPs, "cp2-reimaged", st.Etcd.PeerURL)
	if err == nil || !strings.Contains(err.Error(), "already has that peer URL") || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("a member-add with the started learner's peer URL: %v", err)
	}
	if err := j.cp1.RemoveOwnMember(j.ctx, etcdIPs, 0, st.Etcd.PeerURL); err != nil {
		t.Fatalf("a rollback without a member ID: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:learner" {
		t.Fatalf("members after the add and the rollback with cp2's peer URL: %s", got)
	}

	if _, err := joinNodeOn(h).Up(j.ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up after the crash: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members after stratum up: %s", got)
	}
	if hasFile(h, ha.JoinIntentPath()) {
		t.Fatal("the journal survives the start that promoted the member")
	}

	cp3URL := "https://" + net.JoinHostPort(j.c.Host("cp3").IP().String(), strconv.Itoa(version.EtcdPeerPort))
	if _, err := j.cp1.MemberAdd(j.ctx, etcdIPs, "cp3", cp3URL); err != nil {
		t.Fatalf("add an unstarted learner: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != ":learner cp1:voter cp2:voter" {
		t.Fatalf("members after the learner's add: %s", got)
	}
	if err := j.cp1.RemoveOwnMember(j.ctx, etcdIPs, 0, cp3URL); err != nil {
		t.Fatalf("a rollback without a member ID of an unstarted learner: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members after the rollback of the unstarted learner: %s", got)
	}
	// A resumed join's rollback holds the ID its journal recorded, of a
	// member an earlier rollback removed, while its own add landed with its
	// answer lost: the unstarted learner with its peer URL goes all the same.
	if _, err := j.cp1.MemberAdd(j.ctx, etcdIPs, "cp3", cp3URL); err != nil {
		t.Fatalf("add an unstarted learner: %v", err)
	}
	if err := j.cp1.RemoveOwnMember(j.ctx, etcdIPs, 0xdead, cp3URL); err != nil {
		t.Fatalf("a rollback with the ID of a member gone: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members after a rollback whose recorded member was gone: %s (an orphan learner)", got)
	}
}

// TestUpWhoseStartIsRefusedAfterItsWritesFailsMidway: a first `stratum up`
// whose control-plane start refuses (here a reset begun meanwhile) after
// the bring-up wrote the node's files is a failure (exit 1) that says the
// node is set up and to run `stratum up` again, never a refusal claiming
// nothing changed; and that re-run, the reset's journal gone, starts it.
func TestUpWhoseStartIsRefusedAfterItsWritesFailsMidway(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := c.Hosts()[0]
	d := h.Handle()
	n := ha.NewNode(ha.Env{Host: d, Checkpoint: func(ctx context.Context, name string) error {
		if name == ha.CheckpointUpAfterStateSave {
			if err := d.WriteFile(ha.ResetJournalPath(), []byte("{}"), 0o600); err != nil {
				return err
			}
		}
		return d.Checkpoint(ctx, name)
	}})
	_, err := n.Up(ctx, ha.BootstrapOptions{})
	if err == nil || ha.IsRefusal(err) || !errors.Is(err, ha.ErrResetUnderWay) || !strings.Contains(err.Error(), "set up the node") || !strings.Contains(err.Error(), "run `stratum up` again") {
		t.Fatalf("up whose start a reset refused: %v; want a failure naming what was set up", err)
	}
	if _, err := nodestate.Load(h.Files()); err != nil {
		t.Fatalf("the node state the bring-up saved: %v", err)
	}
	if err := h.Files().Remove(ha.ResetJournalPath()); err != nil {
		t.Fatal(err)
	}
	if _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up again: %v", err)
	}
}

// TestUpCrashAtEveryCheckpointThenJoin crashes a first `stratum up` at each of
// its checkpoints, runs `stratum up` again, and joins a second control plane:
// every re-run must leave a cluster that can be joined.
func TestUpCrashAtEveryCheckpointThenJoin(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 2 * len(ha.UpCheckpoints), APIServers: true})
	hosts := c.Hosts()
	for i, cp := range ha.UpCheckpoints {
		first, joiner := hosts[2*i], hosts[2*i+1]
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own pair of hosts, a cluster of its own
			// Bounded from when it runs: parallel subtests wait for a slot
			// after this function returns.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			defer first.Crash()
			defer joiner.Crash()
			crashDuring(t, c, first, cp, func() error {
				_, err := joinNodeOn(first).Up(ctx, ha.BootstrapOptions{})
				return err
			})
			n := joinNodeOn(first)
			if _, err := n.Up(ctx, ha.BootstrapOptions{}); err != nil {
				t.Fatalf("stratum up after a crash at %s: %v", cp, err)
			}
			o, err := mintOn(ctx, first, n)
			if err != nil {
				t.Fatalf("token create on %s after the re-run: %v", first.Name(), err)
			}
			jn := joinNodeOn(joiner)
			if _, err := jn.PrepareControlPlaneJoin(ctx, o); err != nil {
				t.Fatalf("join after a bring-up crashed at %s and re-run: %v", cp, err)
			}
			if _, err := jn.StartControlPlane(ctx); err != nil {
				t.Fatalf("start the joined node: %v", err)
			}
			checkFileModes(t, first)
			checkFileModes(t, joiner)
		})
	}
}

// mintOn mints a control-plane grant on h (no VIP: its own apiserver), as
// `stratum token create --control-plane` does there.
func mintOn(ctx context.Context, h *sim.Host, n *ha.Node) (ha.JoinOptions, error) {
	admin, err := h.Admin()
	if err != nil {
		return ha.JoinOptions{}, err
	}
	ca, err := h.Files().ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return ha.JoinOptions{}, err
	}
	m, err := token.MintControlPlane(ctx, admin, token.ControlPlaneOptions{
		Server: h.APIServerURL(), CACertPEM: ca, TTL: time.Hour, NewCertKey: ha.NewCertKey,
		Upload: func(ctx context.Context, key string, owner *metav1.OwnerReference) error {
			return n.UploadCerts(ctx, key, owner, nil)
		},
		NarrowReaders: func(ctx context.Context) error { return n.NarrowCertsReaderBinding(ctx, admin) },
	})
	if err != nil {
		return ha.JoinOptions{}, err
	}
	return ha.JoinOptions{Server: h.APIServerURL(), Token: m.Token, CAHash: m.CAHash, CertKey: m.CertKey}, nil
}

// checkFileModes walks h's files: every private key, kubeconfig, node state
// and journal is 0600, and every directory holding one is 0700.
func checkFileModes(t *testing.T, h *sim.Host) {
	t.Helper()
	root := h.Root()
	secret := func(p string) bool {
		base := filepath.Base(p)
		return strings.HasSuffix(base, ".key") || strings.HasSuffix(base, ".conf") ||
			p == nodestate.Path || p == ha.JoinIntentPath() || strings.HasSuffix(p, "encryption-config.yaml")
	}
	err := filepath.WalkDir(root, func(real string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		p := "/" + filepath.ToSlash(strings.TrimPrefix(real, root+string(os.PathSeparator)))
		if !secret(p) || strings.HasPrefix(p, version.EtcdDataDir) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %s is %v, want 0600", h.Name(), p, info.Mode().Perm())
		}
		dir, err := os.Stat(filepath.Dir(real))
		if err != nil {
			return err
		}
		if dir.Mode().Perm() != 0o700 {
			t.Errorf("%s: %s (holding %s) is %v, want 0700", h.Name(), filepath.Dir(p), filepath.Base(p), dir.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemberAddRefusalIsReturnedAfterOneAttempt: an add etcd refuses for
// good (the peer URL of a started member) is not retried.
func TestMemberAddRefusalIsReturnedAfterOneAttempt(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, logs := loggedNodeOn(c.Host("cp1"))
	_, err := n.MemberAdd(ctx, ipsOf(c, "cp1"), "again", c.Host("cp2").PeerURL())
	if err == nil || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("adding a started member's peer URL: %v", err)
	}
	if got := strings.Count(logs.String(), "etcd member add attempt"); got != 1 {
		t.Fatalf("%d attempts for a refusal that is not retried, want 1:\n%s", got, logs)
	}
}

// TestRetainedDataCheckFailsClosed: an etcd data directory that cannot be
// read may hold data, and a join refuses it.
func TestRetainedDataCheckFailsClosed(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	// A file where the data directory should be: ReadDir fails, not "absent".
	if err := h.Files().WriteFile(version.EtcdDataDir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp2", o, ha.ErrRetainedData, version.EtcdDataDir)
}

// TestSingleControlPlaneGrowsIntoHA: a control plane brought up without a
// VIP adopts one (`stratum up --vip`), which reissues its apiserver
// certificate before kube-vip takes the VIP; `repoint` then moves its
// clients; a second control plane joins, and after the first's apiserver is
// killed a client with only the cluster CA still reads through the VIP.
func TestSingleControlPlaneGrowsIntoHA(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 2, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h1 := c.Host("cp1")
	cp1 := joinNodeOn(h1)
	if _, err := cp1.Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up without a VIP: %v", err)
	}
	vip := c.VIPAddress().String()
	crt, _ := h1.Files().ReadFile(version.PKIFile("apiserver.crt"))
	if pki.CheckLeafCovers(crt, net.ParseIP(vip)) == nil {
		t.Fatal("a control plane brought up without a VIP has a certificate covering it already; the test proves nothing")
	}
	if _, err := cp1.Up(ctx, ha.BootstrapOptions{VIP: nodestate.VIP{Address: "10.96.0.10"}}); err == nil || !strings.Contains(err.Error(), "VIP 10.96.0.10 lies inside the service CIDR 10.96.0.0/12") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("stratum up --vip inside the service range: %v, want a refusal naming it", err)
	}
	if _, err := cp1.Up(ctx, ha.BootstrapOptions{VIP: nodestateVIP(c)}); err != nil {
		t.Fatalf("stratum up --vip %s on the single control plane: %v", vip, err)
	}
	if _, err := cp1.Up(ctx, ha.BootstrapOptions{VIP: nodestate.VIP{Address: "127.0.0.99"}}); err == nil || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("stratum up with another VIP than the adopted one: %v", err)
	}
	crt, _ = h1.Files().ReadFile(version.PKIFile("apiserver.crt"))
	if err := pki.CheckLeafCovers(crt, net.ParseIP(vip)); err != nil {
		t.Fatalf("after adopting the VIP: %v", err)
	}
	if _, err := c.WaitVIP(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := cp1.NodeRepoint(ctx, &out, vip); err != nil {
		t.Fatalf("repoint onto the VIP: %v\n%s", err, out.String())
	}
	cs := vipClient(t, h1)
	if err := readyThroughVIP(ctx, cs, 20*time.Second); err != nil {
		t.Fatalf("through the VIP after the repoint: %v", err)
	}
	j := &joinCluster{t: t, c: c, ctx: ctx, cp1: cp1}
	o, err := mintOn(ctx, h1, cp1)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("join cp2: %v", err)
	}
	if err := h1.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := readyThroughVIP(ctx, cs, 20*time.Second); err != nil {
		t.Fatalf("cp1's apiserver killed; through the VIP (held by %v): %v", c.VIPHolder(), err)
	}
	checkFileModes(t, h1)
	checkFileModes(t, c.Host("cp2"))
}

// TestUpWithAnInitialPeerDownStillStarts restarts a control plane whose node
// state names, as its initial cluster, only a member that is now down (cp2
// joined when cp1 was the only member; cp1 has crashed since): cp2 and cp3
// make a quorum, so `stratum up` on cp2 must start it. Its learner check
// asked only the initial cluster's members, and failed.
func TestUpWithAnInitialPeerDownStillStarts(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	for _, name := range []string{"cp2", "cp3"} {
		if err := j.join(name, j.mint(time.Hour)); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
	}
	cp2 := j.c.Host("cp2")
	inc := cp2.Incarnation()
	cp2.Crash()
	waitCrashed(t, cp2, inc)
	j.c.Host("cp1").Crash()
	if _, err := joinNodeOn(cp2).StartControlPlane(j.ctx); err != nil {
		t.Fatalf("stratum up on cp2 with cp1 down and cp3 up: %v", err)
	}
	if !cp2.EtcdRunning() || !cp2.APIServerRunning() {
		t.Fatal("stratum up returned, but cp2's etcd or apiserver is not running")
	}
}

// TestUpOfANodeWithStateServesWhenItCannotPublish: a control plane restarts
// (`stratum up` of a node with saved state) while the cluster refuses the
// writes its start makes: an admission policy denies the cluster-info
// ConfigMap's writes, and those of the stratum:cluster-admins binding on a
// control plane brought up before that binding (its admin.conf in
// system:masters), as a NOSPACE alarm or a webhook whose pods are down deny
// them. The start succeeds with a warning for each and the control plane
// serves; it failed after a minute, and a supervisor under systemd stopped
// the control plane it had started, again at each restart.
func TestUpOfANodeWithStateServesWhenItCannotPublish(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := c.Hosts()[0]
	if _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up: %v", err)
	}
	admin := configMapClient(t, h)
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-cluster-info-writes"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}, {
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"clusterrolebindings"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "object.metadata.name != 'cluster-info' && object.metadata.name != '" + clusteradmins.BindingName + "'",
				Message:    "cluster-info and cluster admins' binding writes refused by the test",
			}},
		},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-cluster-info-writes"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A control plane brought up before the binding: admin.conf in
	// system:masters, no binding.
	writeMastersAdminConf(t, h)
	admin = configMapClient(t, h)
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, clusteradmins.BindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Enforced once dry-run writes of cluster-info and the binding are refused.
	for {
		cm, err := admin.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dryRun := []string{metav1.DryRunAll}
		_, cmErr := admin.CoreV1().ConfigMaps("kube-public").Update(ctx, cm, metav1.UpdateOptions{DryRun: dryRun})
		_, crbErr := admin.RbacV1().ClusterRoleBindings().Create(ctx, clusteradmins.Binding(), metav1.CreateOptions{DryRun: dryRun})
		if cmErr != nil && strings.Contains(cmErr.Error(), "refused by the test") && crbErr != nil && strings.Contains(crbErr.Error(), "refused by the test") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the admission policy was never enforced")
		case <-time.After(200 * time.Millisecond):
		}
	}

	h.Crash()
	var progress syncbuf.Buffer
	d := h.Handle()
	n := ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Progress: func(s string) { fmt.Fprintln(&progress, s) }})
	if _, err := n.Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up of a node with state while cluster-info writes are refused: %v; want it to serve", err)
	}
	if !strings.Contains(progress.String(), "warning: publish cluster-info for joiners") {
		t.Errorf("the start did not warn that it could not publish:\n%s", progress.String())
	}
	if !strings.Contains(progress.String(), "cluster admins bound: not done (warning: bind "+pki.ClusterAdminsGroup) {
		t.Errorf("the start did not warn that it could not bind the cluster admins' group:\n%s", progress.String())
	}
	if !h.EtcdRunning() || !h.APIServerRunning() {
		t.Fatalf("after the start etcd runs %t, the apiserver %t; want both", h.EtcdRunning(), h.APIServerRunning())
	}
	if _, err := configMapClient(t, h).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the apiserver after the start: %v", err)
	}
}

// TestJoinRefusedWhenItsGrantIsRetiredMidway: a rekey on cp1 while cp2's
// join is past its download (its certificates issued, before its health
// gate and fence) retires cp2's grant, and the rekey promises every earlier
// join command changes nothing: the join, finding its grant gone once it
// holds the fence, is refused (exit 3, ErrGrantRetired) with no member
// added, and releases the fence, so a mint right after is not refused.
func TestJoinRefusedWhenItsGrantIsRetiredMidway(t *testing.T) {
	t.Parallel() // its own simulated clusters
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%t", legacy), func(t *testing.T) {
			t.Parallel() // each on its own cluster
			joinWithGrantRetiredMidway(t, legacy)
		})
	}
}

// joinWithGrantRetiredMidway is TestJoinRefusedWhenItsGrantIsRetiredMidway
// on a cluster of its own; legacy drops the grant's own entry before the
// join, which then opens the legacy entry with its key, as a grant minted
// by an older stratum is opened.
func joinWithGrantRetiredMidway(t *testing.T, legacy bool) {
	j := startJoinCluster(t, 1)
	o := j.mint(time.Hour)
	if legacy {
		admin, err := j.c.Host("cp1").Admin()
		if err != nil {
			t.Fatal(err)
		}
		id, _, _ := strings.Cut(o.Token, ".")
		patch := fmt.Sprintf(`[{"op":"remove","path":"/data/certs-%s"}]`, id)
		if _, err := admin.CoreV1().Secrets("kube-system").Patch(j.ctx, "stratum-certs", types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("drop the grant's own entry: %v", err)
		}
	}
	pause := j.c.PauseAt("cp2", ha.CheckpointAfterKubeconfigs)
	done := make(chan error, 1)
	go func() { done <- joinAs(j.ctx, joinNodeOn(j.c.Host("cp2")), o) }()
	select {
	case <-pause.Reached():
	case err := <-done:
		t.Fatalf("cp2's join ended before %s: %v", ha.CheckpointAfterKubeconfigs, err)
	}
	key, err := ha.NewCertKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cp1.RekeySharedCertsFenced(j.ctx, key); err != nil {
		t.Fatalf("rekey on cp1 during cp2's join: %v", err)
	}
	pause.Release()
	err = <-done
	if !errors.Is(err, ha.ErrGrantRetired) || !ha.IsRefusal(err) {
		t.Fatalf("cp2's join after its grant was retired = %v (refusal %t); want a refusal naming the retired grant", err, ha.IsRefusal(err))
	}
	if want := map[bool]string{false: "this join's grant (token", true: "no longer opens with this join's certificate key"}[legacy]; !strings.Contains(err.Error(), want) {
		t.Fatalf("cp2's join after its grant was retired = %v; want it to say %q", err, want)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter" {
		t.Fatalf("members after the refused join: %s; want cp1 alone", got)
	}
	if _, err := mintOptions(j.ctx, j.c, j.cp1, time.Hour); err != nil {
		t.Fatalf("a mint right after the refused join: %v; want the fence released", err)
	}
}
