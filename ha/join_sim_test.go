package ha_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// joinCluster is a running first control plane (cp1, with its apiserver and
// the VIP) and spare hosts to join.
type joinCluster struct {
	t   *testing.T
	c   *sim.Cluster
	ctx context.Context
	cp1 *ha.Node
	// etcdOn names the host whose etcd members() asks; "" is cp1.
	etcdOn string
}

func startJoinCluster(t *testing.T, spares int) *joinCluster {
	t.Helper()
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, SpareHosts: spares, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &joinCluster{t: t, c: c, ctx: ctx, cp1: joinNodeOn(c.Host("cp1"))}
}

func joinNodeOn(h *sim.Host) *ha.Node {
	d := h.Handle()
	return ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint})
}

// mint mints a control-plane join grant on cp1 and returns the join options.
func (j *joinCluster) mint(ttl time.Duration) ha.JoinOptions {
	j.t.Helper()
	o, err := mintOptions(j.ctx, j.c, j.cp1, ttl)
	if err != nil {
		j.t.Fatalf("mint: %v", err)
	}
	return o
}

// mintOptions mints a control-plane join grant through cp1, as `stratum token
// create --control-plane` does there, and returns the join command's options.
func mintOptions(ctx context.Context, c *sim.Cluster, cp1 *ha.Node, ttl time.Duration) (ha.JoinOptions, error) {
	admin, err := c.Host("cp1").Admin()
	if err != nil {
		return ha.JoinOptions{}, err
	}
	ca, err := c.Host("cp1").Files().ReadFile("/etc/stratum/pki/ca.crt")
	if err != nil {
		return ha.JoinOptions{}, err
	}
	m, err := token.MintControlPlane(ctx, admin, token.ControlPlaneOptions{
		Server:     c.VIPURL(),
		CACertPEM:  ca,
		TTL:        ttl,
		NewCertKey: ha.NewCertKey,
		Upload: func(ctx context.Context, key string, owner *metav1.OwnerReference) error {
			return cp1.UploadCerts(ctx, key, owner, nil)
		},
		NarrowReaders: func(ctx context.Context) error { return cp1.NarrowCertsReaderBinding(ctx, admin) },
	})
	if err != nil {
		return ha.JoinOptions{}, err
	}
	return ha.JoinOptions{Server: c.VIPURL(), Token: m.Token, CAHash: m.CAHash, CertKey: m.CertKey}, nil
}

// join runs the join and `stratum up` on name.
func (j *joinCluster) join(name string, o ha.JoinOptions) error {
	return joinAs(j.ctx, joinNodeOn(j.c.Host(name)), o)
}

// joinAs is the join command of node n: its preparation and its start.
func joinAs(ctx context.Context, n *ha.Node, o ha.JoinOptions) error {
	_, err := n.JoinControlPlane(ctx, o)
	return err
}

// voters lists the cluster's members as name:voter|learner, sorted.
func (j *joinCluster) members() []string {
	j.t.Helper()
	on := cmp.Or(j.etcdOn, "cp1")
	ms, err := j.c.Host(on).EtcdMembers(j.ctx)
	if err != nil {
		j.t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		out = append(out, fmt.Sprintf("%s:%s", m.Name, role))
	}
	sort.Strings(out)
	return out
}

func TestJoinTwoControlPlanes(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	cs1, err := j.c.Host("cp1").Admin()
	if err != nil {
		t.Fatal(err)
	}
	cm := map[string]string{"written": "before the joins"}
	if _, err := cs1.CoreV1().ConfigMaps("default").Create(j.ctx, configMap("sentinel", cm), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := j.join("cp2", j.mint(time.Hour)); err != nil {
		t.Fatalf("join cp2: %v", err)
	}
	// cp3's join holds the node's locks from its preparation through its
	// start, never giving them up between: a repoint or a reset begun
	// there would find the member added but not started.
	probe := &lockProbe{Handle: j.c.Host("cp3").Handle()}
	if err := joinAs(j.ctx, ha.NewNode(ha.Env{Host: probe, Checkpoint: probe.Checkpoint}), j.mint(time.Hour)); err != nil {
		t.Fatalf("join cp3: %v", err)
	}
	if probe.taken[nodelock.Maintenance] != 1 || probe.taken[nodelock.EtcdData] != 1 {
		t.Fatalf("cp3's join took the node's locks %v times, want each once: given up between its preparation and its start", probe.taken)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter cp3:voter" {
		t.Fatalf("members after two joins: %s", got)
	}
	ips := []string{j.c.Host("cp1").IP().String(), j.c.Host("cp2").IP().String(), j.c.Host("cp3").IP().String()}
	if err := joinNodeOn(j.c.Host("cp1")).EtcdClusterHealthy(j.ctx, ips); err != nil {
		t.Fatalf("cluster not healthy after the joins: %v", err)
	}
	for _, name := range []string{"cp2", "cp3"} {
		h := j.c.Host(name)
		if !h.APIServerRunning() {
			t.Fatalf("%s has no apiserver", name)
		}
		cs, err := h.Admin()
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoreV1().ConfigMaps("default").Get(j.ctx, "sentinel", metav1.GetOptions{})
		if err != nil || got.Data["written"] != "before the joins" {
			t.Fatalf("data written before the joins, read through %s: %v %v", name, got, err)
		}
		if ok, err := joinNodeOn(h).JoinIntentSurvives(j.ctx); ok || err != nil {
			t.Fatalf("%s: intent journal survives a finished join (%v)", name, err)
		}
		// The join's token is not left on the node; the file is, as the
		// mark of a machine that holds the cluster's CAs from a join.
		kc, err := h.Files().ReadFile(version.Kubeconfig("bootstrap"))
		if err != nil {
			t.Fatalf("%s: the join's bootstrap kubeconfig after a finished join: %v, want it kept", name, err)
		}
		if tok, err := kubeconfig.TokenOf(kc); err == nil {
			t.Fatalf("%s: the join's bootstrap kubeconfig still holds its token %s after a finished join", name, tok)
		}
	}
}

func configMapClient(t *testing.T, h *sim.Host) kubernetes.Interface {
	cs, err := h.Admin()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// snapshotFiles is every file under a host root with its contents.
func snapshotFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.Contains(p, "/run/stratum/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, root)] = string(b)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

// joinRefused runs a join expected to be refused on name and checks that it
// changed nothing: the cluster's membership and every file on the joiner are
// as they were.
func (j *joinCluster) joinRefused(name string, o ha.JoinOptions, want error, wantText string) {
	j.t.Helper()
	j.joinRefusedOn(j.c.Host(name), joinNodeOn(j.c.Host(name)), o, want, wantText)
}

// joinRefusedOn is joinRefused with the joining node n of host h given.
func (j *joinCluster) joinRefusedOn(h *sim.Host, n *ha.Node, o ha.JoinOptions, want error, wantText string) {
	j.t.Helper()
	name := h.Name()
	membersBefore := j.members()
	filesBefore := snapshotFiles(j.t, h.Root())
	trustedBefore := h.Trusted()
	_, err := n.PrepareControlPlaneJoin(j.ctx, o)
	if err == nil {
		j.t.Fatalf("join on %s was not refused", name)
	}
	if want != nil && !errors.Is(err, want) {
		j.t.Fatalf("join on %s: %v, want %v", name, err, want)
	}
	if wantText != "" && !strings.Contains(err.Error(), wantText) {
		j.t.Fatalf("join on %s: %v, want it to mention %q", name, err, wantText)
	}
	if !strings.Contains(err.Error(), "nothing was") {
		j.t.Errorf("refusal does not say what was not changed: %v", err)
	}
	if got := j.members(); strings.Join(got, " ") != strings.Join(membersBefore, " ") {
		j.t.Fatalf("membership changed by a refused join: %v -> %v", membersBefore, got)
	}
	checkFilesAsBefore(j.t, filesBefore, snapshotFiles(j.t, h.Root()))
	// The firewall too: a refused join takes back its trust of the pod
	// range, which it opened before the refusal.
	if got := h.Trusted(); !slices.Equal(got, trustedBefore) {
		j.t.Fatalf("the firewall of %s trusts %v after a refused join, %v before", name, got, trustedBefore)
	}
}

// checkFilesAsBefore fails t unless a refused join left the files it found
// (before) as they were, in contents, and created none.
func checkFilesAsBefore(t *testing.T, before, after map[string]string) {
	t.Helper()
	for p, was := range before {
		if now, ok := after[p]; !ok || now != was {
			t.Fatalf("refused join changed %s", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Fatalf("refused join left %s behind", p)
		}
	}
}

func TestJoinRefusalsChangeNothing(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 1)
	good := j.mint(time.Hour)

	wrongKey := good
	wrongKey.CertKey, _ = ha.NewCertKey()
	j.joinRefused("cp2", wrongKey, nil, "")

	otherCA := good
	otherCA.CAHash = "sha256:" + strings.Repeat("ab", 32)
	j.joinRefused("cp2", otherCA, nil, "--ca-hash")

	badPods := good
	badPods.PodCIDR = "10.200.0.0/16"
	j.joinRefused("cp2", badPods, ha.ErrJoinMismatch, "pod CIDR")
	// An at-rest encryption config an earlier join left: the download
	// removes it (this cluster's bundle carries no at-rest key), and the
	// refusal after the download puts it back as it was.
	leftover := j.c.Host("cp2").Files()
	if err := leftover.WriteFile(certbundle.EncryptionConfigPath, []byte("# left by an earlier join\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp2", badPods, ha.ErrJoinMismatch, "pod CIDR")
	if err := leftover.Remove(certbundle.EncryptionConfigPath); err != nil {
		t.Fatal(err)
	}

	badDomain := good
	badDomain.ClusterDomain = "other.local"
	j.joinRefused("cp2", badDomain, ha.ErrJoinMismatch, "cluster domain")

	badCilium := good
	badCilium.Cilium.Enabled = true
	j.joinRefused("cp2", badCilium, ha.ErrJoinMismatch, "Cilium")

	malformed := good
	malformed.CertKey = "xyz"
	j.joinRefused("cp2", malformed, nil, "--certificate-key")

	// A deleted token.
	admin := configMapClient(t, j.c.Host("cp1"))
	deleted := j.mint(time.Hour)
	id := strings.SplitN(deleted.Token, ".", 2)[0]
	if err := admin.CoreV1().Secrets("kube-system").Delete(j.ctx, "bootstrap-token-"+id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp2", deleted, ha.ErrTokenRefused, "")

	// An expired token.
	expired := j.mint(2 * time.Second)
	time.Sleep(3 * time.Second)
	j.joinRefused("cp2", expired, ha.ErrTokenRefused, "")

	// Retained etcd data.
	if err := j.c.Host("cp2").Files().WriteFile("/var/lib/stratum/etcd/member/snap/db", []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp2", good, ha.ErrRetainedData, "stratum etcd member remove")
	if err := j.c.Host("cp2").Files().RemoveAll("/var/lib/stratum/etcd"); err != nil {
		t.Fatal(err)
	}

	// A refused join puts the node back under its locks: a reset or a
	// repoint begun meanwhile is refused until every file the join created
	// is removed, never racing the removal.
	probe := &lockProbe{Handle: j.c.Host("cp2").Handle()}
	j.joinRefusedOn(j.c.Host("cp2"), ha.NewNode(ha.Env{Host: probe}), wrongKey, nil, "")
	if probe.probed == 0 || len(probe.unlocked) > 0 {
		t.Fatalf("a refused join removed %d files, %v with the node's maintenance lock free", probe.probed, probe.unlocked)
	}

	// Another maintenance operation holds the node.
	release, err := nodelock.Acquire(j.c.Host("cp2").Handle(), nodelock.Maintenance, "stratum etcd rejoin")
	if err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp2", good, nodelock.ErrBusy, "stratum etcd rejoin")
	if err := release(); err != nil {
		t.Fatal(err)
	}

	// A machine of the same hostname as a member (cloned VMs): refused
	// before the add, which etcd would take and the new member's start
	// would fail on, its initial cluster naming one name twice.
	twin := j.c.Host("cp2").Handle()
	j.joinRefusedOn(j.c.Host("cp2"), ha.NewNode(ha.Env{Host: renamedHost{twin, "cp1"}, Checkpoint: twin.Checkpoint}), good, nil, `already has this node's name "cp1"`)

	// A config file's node IP that is not this host's.
	foreignConfig := good
	foreignConfig.ConfigNodeIP = j.c.Host("cp1").IP().String()
	j.joinRefused("cp2", foreignConfig, nil, "spec.network.nodeIP "+foreignConfig.ConfigNodeIP)

	// The first node's command (`stratum up --vip`) run on a machine meant
	// to join: the VIP already answers (cp1 holds it), so the bring-up is
	// refused before it writes anything, instead of starting a second
	// cluster whose VIP candidate would fight cp1 for the address.
	if _, err := j.c.WaitVIP(j.ctx); err != nil {
		t.Fatal(err)
	}
	filesBefore := snapshotFiles(t, j.c.Host("cp2").Root())
	if _, err := joinNodeOn(j.c.Host("cp2")).Up(j.ctx, ha.BootstrapOptions{VIP: nodestateVIP(j.c)}); err == nil || !strings.Contains(err.Error(), "already answers on port 6443 with another cluster's apiserver") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("a bring-up on cp2 with the VIP cp1 holds: %v, want a refusal naming the VIP in use", err)
	}
	checkFilesAsBefore(t, filesBefore, snapshotFiles(t, j.c.Host("cp2").Root()))
	// The supervisor's retried start (ha.Restart) on a node without state
	// (reset meanwhile) is refused: it never bootstraps.
	if _, err := joinNodeOn(j.c.Host("cp2")).Restart(j.ctx, ha.BootstrapOptions{}, ha.RetriedStartHolder); !errors.Is(err, nodestate.ErrNoState) {
		t.Fatalf("Restart on cp2 without node state: %v, want ErrNoState", err)
	}
	checkFilesAsBefore(t, filesBefore, snapshotFiles(t, j.c.Host("cp2").Root()))

	// A node whose address lies inside the cluster's pod range (a machine
	// on 10.244.0.0/24 joining a cluster brought up with the default
	// 10.244.0.0/16): refused before the add, and the range not trusted in
	// its firewall, which would open it to its own network.
	inPods := good
	inPods.NodeIP = "10.244.0.5"
	cp2 := j.c.Host("cp2").Handle()
	j.joinRefusedOn(j.c.Host("cp2"), ha.NewNode(ha.Env{Host: readdressedHost{cp2, netip.MustParseAddr(inPods.NodeIP)}, Checkpoint: cp2.Checkpoint}), inPods, nil,
		"node IP 10.244.0.5 lies inside the pod CIDR 10.244.0.0/16")

	// The supervisor's retried start (Restart) holds the node's locks for
	// each attempt, seconds apart: a maintenance command run meanwhile
	// waits for the attempt to end, saying so, and then runs, instead of
	// being refused nearly every time (or told to stop the supervisor,
	// which would stop the voter).
	pause := j.c.PauseAt("cp1", ha.CheckpointStartAfterEtcd)
	restarted := make(chan error, 1)
	go func() { _, err := j.cp1.Restart(j.ctx, ha.BootstrapOptions{}, ha.RetriedStartHolder); restarted <- err }()
	select {
	case <-pause.Reached():
	case err := <-restarted:
		t.Fatalf("Restart on cp1 ended before its etcd checkpoint: %v", err)
	}
	said := make(chan string, 1)
	locked := make(chan error, 1)
	go func() {
		release, err := nodelock.Acquire(j.c.Host("cp1").Handle(), nodelock.Maintenance, "stratum reset", nodelock.WhileWaiting(func(holder string, _ time.Duration) {
			select {
			case said <- holder:
			default: // said again while it waits: the first is what is checked
			}
		}))
		if err == nil {
			release()
		}
		locked <- err
	}()
	select {
	case holder := <-said:
		if !strings.Contains(holder, "the supervisor's retried start") {
			t.Errorf("a reset's lock during a retried start waited for %q, want the retried start named", holder)
		}
	case err := <-locked:
		t.Fatalf("a reset's lock during a retried start: %v, want it to wait for the attempt", err)
	}
	pause.Release()
	if err := <-restarted; err != nil {
		t.Fatalf("Restart of the running cp1: %v", err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("a reset's lock once the retried start's attempt ended: %v, want it taken", err)
	}

	// After every refusal, the good command still joins; --node-ip
	// overrides the config file's foreign address, which is not judged.
	good.ConfigNodeIP = foreignConfig.ConfigNodeIP
	good.NodeIP = j.c.Host("cp2").IP().String()
	if err := j.join("cp2", good); err != nil {
		t.Fatalf("join after the refusals (--node-ip over a foreign config node IP): %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		t.Fatalf("members: %s", got)
	}
}

func TestJoinRefusedWhileClusterUnhealthy(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3, SpareHosts: 1, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	holder, err := c.WaitVIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	j := &joinCluster{t: t, c: c, ctx: ctx, cp1: joinNodeOn(c.Host("cp1"))}
	o := j.mint(time.Hour)
	// One member is down: the cluster has quorum, but a member of it does
	// not answer, which is not healthy enough to add one. The join judges
	// the cluster again for 30 s (a member restarting is back by then), and
	// refuses saying so. It is not the VIP
	// holder's: that would move the VIP (its apiserver talks to its own
	// member only) while the join discovers through it.
	down := c.Host("cp3")
	if holder == down {
		down = c.Host("cp2")
	}
	down.StopEtcd()
	// cp4 holds files an earlier, crashed run left: the refusal, which
	// comes after the assembly has rewritten them, puts their contents back.
	for _, p := range []string{version.K8sConfDir + "/kubelet-config.yaml", version.Kubeconfig("bootstrap")} {
		if err := c.Host("cp4").Files().WriteFile(p, []byte("# left by an earlier run\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Stopped (Ctrl-C) while it waits: refused, saying so and what it
	// waited for, nothing changed. The stop comes once the join says it
	// waits (a fixed 2 s could end its first judgement on a loaded
	// machine, every member then unanswered).
	membersBefore := j.members()
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	cp4 := c.Host("cp4").Handle()
	waiting := ha.NewNode(ha.Env{Host: cp4, Checkpoint: cp4.Checkpoint, Progress: func(line string) {
		if strings.Contains(line, "waiting for the cluster's etcd to become healthy") {
			stop()
		}
	}})
	_, err = waiting.PrepareControlPlaneJoin(stopCtx, o)
	if want := "control-plane join stopped while it judged the cluster's etcd (" + down.ClientURL() + " does not answer): context canceled; nothing was added to etcd"; !ha.IsRefusal(err) || err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("the join stopped while it waited: %v; want a refusal saying %q", err, want)
	}
	if got := j.members(); strings.Join(got, " ") != strings.Join(membersBefore, " ") {
		t.Fatalf("membership changed by a stopped join: %v -> %v", membersBefore, got)
	}
	j.joinRefused("cp4", o, ha.ErrClusterUnhealthy, "(judged again for 30s: still so): etcd cluster is not healthy: "+down.ClientURL()+" did not answer")
}

// TestUpBootstrapsThenJoinsFromAFreshCluster runs the whole bring-up as the
// CLI does on simulated hosts: `stratum up` on cp1 of an empty simulation,
// then two joins.
func TestUpBootstrapsThenJoinsFromAFreshCluster(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 3, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp1 := joinNodeOn(c.Host("cp1"))
	const quota = 64 << 20 // spec.etcd.quota: 64Mi
	st, err := cp1.Up(ctx, ha.BootstrapOptions{VIP: nodestateVIP(c), EtcdQuota: quota})
	if err != nil {
		t.Fatalf("stratum up on cp1: %v", err)
	}
	if st.Etcd.InitialClusterState != "new" || st.Server != c.VIPURL() || st.Etcd.QuotaBackendBytes != quota {
		t.Fatalf("cp1 state: %+v", st)
	}
	// A second `up` on the same node starts what its state records; the
	// quota it is given is a bring-up's, said not to be used.
	var mu sync.Mutex
	var said []string
	progress := func(s string) { mu.Lock(); said = append(said, s); mu.Unlock() }
	cp1d := c.Host("cp1").Handle()
	if _, err := ha.NewNode(ha.Env{Host: cp1d, Checkpoint: cp1d.Checkpoint, Progress: progress}).Up(ctx, ha.BootstrapOptions{EtcdQuota: 128 << 20}); err != nil {
		t.Fatalf("second stratum up: %v", err)
	}
	mu.Lock()
	if !slices.ContainsFunc(said, func(s string) bool {
		return strings.Contains(s, "the etcd quota given (128.0 MiB) is a bring-up's setting, not used on this node, whose member runs with 64.0 MiB")
	}) {
		t.Errorf("second stratum up with a 128 MiB quota said %q; want that it is not used", said)
	}
	mu.Unlock()
	j := &joinCluster{t: t, c: c, ctx: ctx, cp1: cp1}
	// A join whose config names another quota is refused; one naming the
	// cluster's, or none, runs with the cluster's.
	other := j.mint(time.Hour)
	other.EtcdQuota = 32 << 20
	if err := j.join("cp2", other); !ha.IsRefusal(err) || !strings.Contains(fmt.Sprint(err), "spec.etcd.quota is 32.0 MiB, and the cluster's etcd members run with 64.0 MiB") {
		t.Fatalf("join of cp2 naming a 32 MiB quota: %v; want a refusal naming both quotas", err)
	}
	for name, o := range map[string]int64{"cp2": quota, "cp3": 0} {
		opts := j.mint(time.Hour)
		opts.EtcdQuota = o
		if err := j.join(name, opts); err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter cp3:voter" {
		t.Fatalf("members: %s", got)
	}
	obs := observerOn(c.Host("cp1"))
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		if m := obs.EtcdMemberStatus(ctx, c.Host(name).IP().String()); m.Err != nil || m.DBQuota != quota {
			t.Fatalf("%s's member runs with a quota of %d bytes (%v); want the cluster's, %d", name, m.DBQuota, m.Err, quota)
		}
	}
}

func nodestateVIP(c *sim.Cluster) nodestate.VIP {
	return nodestate.VIP{Address: c.VIPAddress().String(), Interface: "lo"}
}

// renamedHost is a simulated host whose hostname is name: a machine cloned
// from another.
type renamedHost struct {
	*sim.Handle
	name string
}

func (r renamedHost) Name() string { return r.name }

// readdressedHost is a simulated host that has addr among its addresses
// too.
type readdressedHost struct {
	*sim.Handle
	addr netip.Addr
}

func (r readdressedHost) Addresses() ([]netip.Addr, error) {
	addrs, err := r.Handle.Addresses()
	return append([]netip.Addr{r.addr}, addrs...), err
}
