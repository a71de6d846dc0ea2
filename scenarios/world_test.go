package scenarios

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"pgregory.net/rapid"

	corev1 "k8s.io/api/core/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// world is a running first control plane (cp1: etcd and a real
// kube-apiserver) and spare hosts to join, for the properties that join.
type world struct {
	t     *rapid.T
	ctx   context.Context
	c     *sim.Cluster
	cp1   *sim.Host
	admin kubernetes.Interface
	ca    []byte
	// worker is a worker token minted once per check: in every state it must
	// be refused the bundle.
	worker string
	// sentinels are ConfigMaps written through cp1: they must survive.
	sentinels map[string]string
	// loads are the clients' workloads (through the VIP, and etcd on every
	// host's client endpoint), checked for linearizability when the check
	// converges.
	loads []loadOn
}

func newWorld(t *rapid.T, spares int) *world {
	c := startCluster(t, sim.Config{ControlPlanes: 1, SpareHosts: spares, APIServers: true, VIP: true})
	w := &world{t: t, ctx: checkCtx(t, 15*time.Minute), c: c, cp1: c.Host("cp1"), sentinels: map[string]string{}}
	var err error
	w.admin = adminOf(t, w.cp1)
	if w.ca, err = w.cp1.Files().ReadFile("/etc/stratum/pki/ca.crt"); err != nil {
		t.Fatal(err)
	}
	m, err := token.MintWorker(w.ctx, w.admin, token.WorkerOptions{Server: w.cp1.APIServerURL(), CACertPEM: w.ca, TTL: time.Hour,
		NarrowReaders: func(ctx context.Context) error { return nodeOn(w.cp1).NarrowCertsReaderBinding(ctx, w.admin) }})
	if err != nil {
		t.Fatalf("mint the worker token: %v", err)
	}
	w.worker = m.Token
	w.writeSentinel("before")
	// The apiserver workload goes through the VIP, as a client of the
	// cluster does, with the cluster CA only: joiners that come up take
	// their turn at holding it, and a crash of the holder moves it.
	w.loads = startWorkloads(t, w.ctx, c, "vip", boundedClient(t, c.VIPConfig), w.cp1, max(5*time.Second, 5*c.Config().Etcd.Election()))
	return w
}

// adminOf is an admin client on h's own apiserver whose every request is
// bounded by apiCallBound.
func adminOf(t *rapid.T, h *sim.Host) kubernetes.Interface {
	t.Helper()
	return boundedClient(t, h.AdminConfig)
}

// boundedClient is a client for the rest.Config config makes, every request
// bounded by apiCallBound.
func boundedClient(t *rapid.T, config func() (*rest.Config, error)) kubernetes.Interface {
	t.Helper()
	cfg, err := config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = apiCallBound
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// joinOn is the join (PrepareControlPlaneJoin) on h with o, bounded by
// opBound.
func joinOn(t *rapid.T, ctx context.Context, h *sim.Host, o ha.JoinOptions) error {
	t.Helper()
	_, err := bounded(t, ctx, opBound, "the join on "+h.Name(), func(ctx context.Context) (*nodestate.NodeState, error) {
		return nodeOn(h).PrepareControlPlaneJoin(ctx, o)
	})
	return err
}

// upOn is `stratum up` (StartControlPlane) on h, bounded by opBound.
func upOn(t *rapid.T, ctx context.Context, h *sim.Host) error {
	t.Helper()
	_, err := bounded(t, ctx, opBound, "stratum up on "+h.Name(), nodeOn(h).StartControlPlane)
	return err
}

// grant is a minted control-plane join grant.
type grant struct {
	ha.JoinOptions
	ID      string
	Expires time.Time
	Deleted bool
	// LastAuth is when a join last ran that may have authenticated with
	// the grant's token (its end: the token's last request can come at
	// any point of it); zero when none has.
	LastAuth time.Time
	// Retired says a rekey or re-upload since its mint retired the grant:
	// its certificate-key must never decrypt again.
	Retired bool
}

// mint mints a control-plane join grant on cp1 with ttl, on cp1's clock
// (stratum's own), as `stratum token create --control-plane` does.
func (w *world) mint(ttl time.Duration) *grant {
	w.t.Helper()
	cp1 := nodeOn(w.cp1)
	m, err := token.MintControlPlane(w.ctx, w.admin, token.ControlPlaneOptions{
		Server: w.cp1.APIServerURL(), CACertPEM: w.ca, TTL: ttl, Now: w.cp1.Handle().Now, NewCertKey: ha.NewCertKey,
		Upload: func(ctx context.Context, key string, owner *metav1.OwnerReference) error {
			return cp1.UploadCerts(ctx, key, owner, nil)
		},
		NarrowReaders: func(ctx context.Context) error { return cp1.NarrowCertsReaderBinding(ctx, w.admin) },
	})
	if err != nil {
		w.t.Fatalf("mint a control-plane grant (ttl %s): %v", ttl, err)
	}
	w.c.Events().Record("cp1", "action", "minted grant %s, expires %s", m.ID, m.Expires.Format(time.RFC3339))
	return &grant{JoinOptions: ha.JoinOptions{Server: w.cp1.APIServerURL(), Token: m.Token, CAHash: m.CAHash, CertKey: m.CertKey}, ID: m.ID, Expires: m.Expires}
}

func (w *world) writeSentinel(value string) {
	w.t.Helper()
	name := fmt.Sprintf("sentinel-%d", len(w.sentinels))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string]string{"written": value}}
	if _, err := w.admin.CoreV1().ConfigMaps("default").Create(w.ctx, cm, metav1.CreateOptions{}); err != nil {
		w.t.Fatalf("write sentinel %s: %v", name, err)
	}
	w.sentinels[name] = value
}

// checkSentinels reads every sentinel through cs.
func (w *world) checkSentinels(cs kubernetes.Interface, via string) {
	w.t.Helper()
	explored.invariant("acknowledged sentinels read back")
	for name, want := range w.sentinels {
		got, err := cs.CoreV1().ConfigMaps("default").Get(w.ctx, name, metav1.GetOptions{})
		if err != nil || got.Data["written"] != want {
			w.t.Fatalf("sentinel %s written earlier, read through %s: %v (err %v), want %q", name, via, got, err, want)
		}
	}
}

// checkWorkerRefused: the worker token may not read kube-system/stratum-certs.
func (w *world) checkWorkerRefused() {
	w.t.Helper()
	explored.invariant("a worker token is refused the bundle")
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: w.cp1.APIServerURL(), BearerToken: w.worker,
		TLSClientConfig: rest.TLSClientConfig{CAData: w.ca}, Timeout: apiCallBound})
	if err != nil {
		w.t.Fatal(err)
	}
	_, err = cs.CoreV1().Secrets("kube-system").Get(w.ctx, "stratum-certs", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		w.t.Fatalf("a worker token's Get of kube-system/stratum-certs = %v, want Forbidden", err)
	}
}

// member is one etcd member as cp1's member list names it.
type member struct {
	Name, PeerURL string
	ID            uint64
	Learner       bool
}

// members is cp1's linearizable member list, sorted by name.
func (w *world) members() ([]member, uint64) {
	w.t.Helper()
	cli, err := directEtcd(w.cp1)
	if err != nil {
		w.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		w.t.Fatalf("member list through cp1: %v", err)
	}
	var out []member
	for _, m := range ml.Members {
		u := ""
		if len(m.PeerURLs) > 0 {
			u = m.PeerURLs[0]
		}
		out = append(out, member{Name: m.Name, PeerURL: u, ID: m.ID, Learner: m.IsLearner})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+out[i].PeerURL < out[j].Name+out[j].PeerURL })
	return out, ml.Header.ClusterId
}

// hostOfPeer is the host whose peer URL u is.
func (w *world) hostOfPeer(u string) *sim.Host {
	for _, h := range w.c.Hosts() {
		if strings.TrimSuffix(u, "/") == h.PeerURL() {
			return h
		}
	}
	return nil
}

func hasFile(h *sim.Host, p string) bool {
	_, err := h.Files().ReadFile(p)
	return err == nil
}

// checkOneCluster: every running member reports the same cluster ID.
func (w *world) checkOneCluster() {
	w.t.Helper()
	explored.invariant("one cluster among the running members")
	ids := map[uint64][]string{}
	for _, h := range w.c.Hosts() {
		if !h.EtcdRunning() {
			continue
		}
		cli, err := directEtcd(h)
		if err != nil {
			continue
		}
		v := viewOf(w.ctx, cli, h.ClientURL())
		cli.Close()
		if v.Err == nil {
			ids[v.Cluster] = append(ids[v.Cluster], h.Name())
		}
	}
	if len(ids) > 1 {
		w.t.Fatalf("two clusters among the running members: %v", ids)
	}
}

// checkNoOrphan: every member other than cp1 is on a host that holds the
// join's intent journal or its node state.
func (w *world) checkNoOrphan() {
	w.t.Helper()
	explored.invariant("no orphan member")
	ms, _ := w.members()
	for _, m := range ms {
		h := w.hostOfPeer(m.PeerURL)
		if h == nil {
			w.t.Fatalf("member %s (%s) is on no host", m.Name, m.PeerURL)
		}
		if h.Name() == "cp1" {
			continue
		}
		if !hasFile(h, ha.JoinIntentPath()) && !hasFile(h, nodestate.Path) {
			w.t.Fatalf("member %x for %s (learner %v) exists, but %s holds neither an intent journal nor node state: an orphan member", m.ID, m.PeerURL, m.Learner, h.Name())
		}
	}
}

// converge: within the bound, every host in joined is a voter, the member
// list is exactly cp1 and those hosts, each host's node state agrees with
// its member and the cluster ID, no journal survives, the gate passes, and
// every sentinel reads back through each host's apiserver.
func (w *world) converge(joined []*sim.Host) {
	t := w.t
	t.Helper()
	explored.invariant("converges: voters, node state, no journal, sentinels")
	want := append([]*sim.Host{w.cp1}, joined...)
	var last string
	ok, last := eventually(w.ctx, 60*time.Second, func() (bool, string) {
		ms, _ := w.members()
		if len(ms) != len(want) {
			return false, fmt.Sprintf("members %v, want %d", ms, len(want))
		}
		for _, m := range ms {
			if m.Learner {
				return false, fmt.Sprintf("%s is still a learner", m.Name)
			}
		}
		err := observerOn(w.cp1, w.c.Config().Etcd).EtcdClusterHealthy(w.ctx, ipsOf(want...))
		return err == nil, fmt.Sprint(err)
	})
	if !ok {
		t.Fatalf("did not converge to %d healthy voters within 60s: %s", len(want), last)
	}
	ms, cluster := w.members()
	for _, m := range ms {
		h := w.hostOfPeer(m.PeerURL)
		st, err := nodestate.Load(h.Files())
		if err != nil {
			t.Fatalf("member %s: its host %s has no node state: %v", m.Name, h.Name(), err)
		}
		if st.Etcd.PeerURL != m.PeerURL || st.Etcd.Name != m.Name {
			t.Fatalf("%s's node state (etcd %s at %s) disagrees with etcd (member %s at %s)", h.Name(), st.Etcd.Name, st.Etcd.PeerURL, m.Name, m.PeerURL)
		}
		if st.Etcd.ClusterID != "" && st.Etcd.ClusterID != fmt.Sprintf("%x", cluster) {
			t.Fatalf("%s's node state records cluster %s, etcd is %x", h.Name(), st.Etcd.ClusterID, cluster)
		}
		if hasFile(h, ha.JoinIntentPath()) {
			t.Fatalf("%s: the join's intent journal survives a finished join", h.Name())
		}
	}
	w.checkOneCluster()
	for _, h := range want {
		w.checkSentinels(adminOf(t, h), h.Name())
	}
	checkHistories(t, w.ctx, w.loads, w.cp1)
}

// joinErr is a join's outcome for messages.
func joinErr(err error) string {
	if err == nil {
		return "joined"
	}
	return err.Error()
}

var errStopBeforeIntent = errors.New("scenario stops the join here")

var errNotAMember = errors.New("not a member's address")
