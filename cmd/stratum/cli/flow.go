package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
)

// The flow shared by the real-host commands and `stratum sim up`: each
// function acts on one node (an ha.Node and the host it is bound to), so the
// simulator runs exactly the code a real `stratum up`, `token create` and
// `server` run.

// apiTimeout bounds each request to an apiserver.
const apiTimeout = 30 * time.Second

// join is `stratum server`: prepare the join (certificates, leaves, live
// etcd member-add, node state), then start the control plane from the saved
// state (etcd, learner promotion, apiserver, kube-vip), under one hold of the
// node's locks (ha's JoinControlPlane).
func join(ctx context.Context, n *ha.Node, o ha.JoinOptions) (*nodestate.NodeState, error) {
	return n.JoinControlPlane(ctx, o)
}

// adminClient is a clientset from the admin kubeconfig on h, dialing through
// h (so a simulated host's partitions apply); waiting as adminRESTConfig's.
func adminClient(h host.Host, waiting func(string)) (kubernetes.Interface, error) {
	cfg, err := adminRESTConfig(h, waiting)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// controlPlaneNode is localNode on a control plane: with its node state, or
// the refusal that says this is not one.
func (a *app) controlPlaneNode() (*ha.Node, host.Host, *nodestate.NodeState, error) {
	n, h, err := a.localNode()
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := loadState(h)
	if err != nil {
		return nil, nil, nil, err
	}
	return n, h, st, nil
}

// adminNode is localNode with a clientset from the node's admin kubeconfig.
func (a *app) adminNode() (*ha.Node, host.Host, kubernetes.Interface, error) {
	n, h, err := a.localNode()
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := adminClient(h, a.waitNotice())
	if err != nil {
		return nil, nil, nil, err
	}
	return n, h, cs, nil
}

// adminRESTConfig is the admin kubeconfig on h as a client config dialing
// through h, with apiTimeout per request. A request refused by an API server
// that is not ready is sent again until it is, within that timeout
// (apiretry.RetryRefusedWhileUnready): one just started denies the admin
// credential (403) until its RBAC informers have synced, the credential's
// group being bound by RBAC, not system:masters, and a command run beside
// a starting or restarting control plane would report that denial as its
// failure. waiting, when not nil, is told why it waits (app.waitNotice).
func adminRESTConfig(h host.Host, waiting func(string)) (*rest.Config, error) {
	kc, err := h.ReadFile(version.Kubeconfig(kubeconfig.Admin))
	switch {
	case errors.Is(err, fs.ErrPermission):
		return nil, refusedf("read the admin kubeconfig: %w; it is readable by root alone: run this as root (sudo); nothing was changed", err)
	case errors.Is(err, fs.ErrNotExist) && !hasState(h):
		return nil, errNotAControlPlane()
	case err != nil:
		return nil, refusedf("read the admin kubeconfig: %w; run this on a control plane; nothing was changed", err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		return nil, refusedf("the admin kubeconfig: %w; nothing was changed", err)
	}
	cfg.Dial = h.DialContext
	cfg.Timeout = apiTimeout
	cfg.Wrap(apiretry.RetryRefusedWhileUnready(waiting))
	return cfg, nil
}

// waitNotice is a waiting callback for adminRESTConfig: it says on stderr
// what the command waits for (stdout keeps -o json's document), at most once
// every ha.WaitReportEvery, as ha's own waits are paced.
func (a *app) waitNotice() func(string) {
	var mu sync.Mutex
	var last time.Time
	return func(why string) {
		mu.Lock()
		defer mu.Unlock()
		if a.stderr == nil || !last.IsZero() && time.Since(last) < ha.WaitReportEvery {
			return
		}
		last = time.Now()
		fmt.Fprintf(a.stderr, "waiting for %s\n", why)
	}
}

// loadState is the control-plane node state on h, or an error that says this
// is not a control plane.
func loadState(h host.Host) (*nodestate.NodeState, error) {
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		return nil, errNotAControlPlane()
	}
	if err != nil {
		return nil, refused(err)
	}
	return st, nil
}

// errNotAControlPlane is the refusal of a control-plane command on a node
// without control-plane state.
func errNotAControlPlane() error {
	return refusedf("no control-plane state on this node (%s): run this on a control plane (`stratum up` or `stratum server` made one); nothing was changed", nodestate.Path)
}

// hasState reports whether h may be a control plane: its node state exists
// (or cannot be told missing).
func hasState(h host.Host) bool {
	_, err := nodestate.Load(h)
	return !errors.Is(err, nodestate.ErrNoState)
}

// maxControlPlaneGrantTTL is the longest a control-plane grant's token may
// live: the grant, with its certificate-key, opens the cluster's CA keys,
// and a join command kept in a shell history, a CI log or an agent's
// transcript stays a root credential until it expires (kubeadm's
// certificate key lives 2 hours, fixed). A worker token, which opens no
// key, has no bound.
const maxControlPlaneGrantTTL = 24 * time.Hour

// checkGrantTTL refuses a ttl that is not positive, or longer than
// maxControlPlaneGrantTTL for a control-plane grant, saying why.
func checkGrantTTL(ttl time.Duration, controlPlane bool) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("ttl %s: must be positive, such as 30m or 2h", ttl)
	case controlPlane && ttl > maxControlPlaneGrantTTL:
		return fmt.Errorf("ttl %s: a control-plane grant lives at most %s (it opens the cluster's CA keys, and a join command that leaks stays a root credential until it expires): mint one when the join is near", ttl, maxControlPlaneGrantTTL)
	}
	return nil
}

// mintGrant is `stratum token create` on a control plane: a control-plane
// grant (token, certificate-key, shared certificates uploaded under it) or a
// worker token, with the join command for the cluster's server (the VIP when
// the cluster has one) from the node state. It returns that server too.
func mintGrant(ctx context.Context, n *ha.Node, h host.Host, ttl time.Duration, controlPlane bool, waiting func(string)) (*token.Minted, string, error) {
	st, err := loadState(h)
	if err != nil {
		return nil, "", err
	}
	ca, err := h.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return nil, "", fmt.Errorf("read the cluster CA: %w; nothing was created", err)
	}
	cs, err := adminClient(h, waiting)
	if err != nil {
		return nil, "", err
	}
	narrow := func(ctx context.Context) error { return n.NarrowCertsReaderBinding(ctx, cs) }
	if !controlPlane {
		m, err := token.MintWorker(ctx, cs, token.WorkerOptions{
			Server: st.Server, CACertPEM: ca, TTL: ttl, Now: h.Now, NarrowReaders: narrow,
			Description: "stratum token create (worker)",
		})
		return m, st.Server, err
	}
	m, err := token.MintControlPlane(ctx, cs, token.ControlPlaneOptions{
		Server:     st.Server,
		CACertPEM:  ca,
		TTL:        ttl,
		Now:        h.Now,
		NewCertKey: ha.NewCertKey,
		Upload: func(ctx context.Context, key string, owner *metav1.OwnerReference) error {
			return n.UploadCertsFenced(ctx, key, owner)
		},
		NarrowReaders: narrow,
		Description:   "stratum token create --control-plane",
	})
	return m, st.Server, err
}

// healthReport is `etcd health -o json` and the MCP tool's answer.
type healthReport struct {
	Healthy bool     `json:"healthy"`
	Members []string `json:"members"`
	Error   string   `json:"error,omitempty"`
	// Warnings: members whose database fills 80% of its quota or more
	// (ha.EtcdMemberHealth.SpaceWarning), whatever the verdict.
	Warnings []string `json:"warnings,omitempty"`
}

// etcdHealth asks every member (by the member list through this node's own
// member, else through the peers its node state names) whether the cluster
// is healthy: the report and the verdict as an error (nil when healthy). A
// cluster whose members cannot be listed is a verdict too, in the report as
// any other.
func etcdHealth(ctx context.Context, n *ha.Node, st *nodestate.NodeState) (healthReport, error) {
	via := etcdVia(st)
	ips, err := n.MemberClientIPsVia(ctx, via)
	if err != nil {
		herr := fmt.Errorf("no member answered with the member list (asked %s): %w", strings.Join(via, ", "), err)
		return healthReport{Members: []string{}, Error: herr.Error()}, herr
	}
	rep := healthReport{Healthy: true, Members: ips}
	res, herr := n.EtcdClusterHealth(ctx, ips)
	if herr != nil {
		rep.Healthy, rep.Error = false, herr.Error()
	}
	for _, m := range res {
		if w := m.SpaceWarning(); w != "" {
			rep.Warnings = append(rep.Warnings, w)
		}
	}
	return rep, herr
}

// etcdVia are the client IPs the members are listed through: this node's
// own member first, then the peers its node state started with.
func etcdVia(st *nodestate.NodeState) []string {
	via := []string{urlHost(st.Etcd.ClientURL)}
	for _, m := range strings.Split(st.Etcd.InitialCluster, ",") {
		if _, peer, ok := strings.Cut(m, "="); ok && peer != st.Etcd.PeerURL {
			if ip := urlHost(peer); ip != "" && !slices.Contains(via, ip) {
				via = append(via, ip)
			}
		}
	}
	return via
}

// memberRow is one row of the etcd member table; its JSON names are stable
// (`etcd members -o json`, docs/cli.md).
type memberRow struct {
	Name     string `json:"name"`
	PeerURL  string `json:"peerURL"`
	ClientIP string `json:"clientIP,omitempty"`
	Learner  bool   `json:"learner"`
	Leader   bool   `json:"leader"`
	// Health is "healthy" or "unhealthy: <why>".
	Health string `json:"health"`
	// Version is the etcd version the member says it runs; empty when it
	// did not answer. During a rolling upgrade or an etcd downgrade the
	// members differ.
	Version string `json:"version,omitempty"`
	// id is the member's ID in hex, as a node's records name it.
	id string
}

// etcdMembers lists the cluster's members through the etcd at endpoint (a
// client URL) and asks each member for its own status (ha's
// EtcdMemberStatus): voter or learner, whether it is the leader, healthy.
func etcdMembers(ctx context.Context, n *ha.Node, endpoint string) ([]memberRow, error) {
	cli, err := n.EtcdClient(endpoint)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd member list through %s: %w", endpoint, err)
	}
	rows := make([]memberRow, len(list.Members))
	done := make(chan struct{}, len(list.Members))
	for i, m := range list.Members {
		rows[i] = memberRow{Name: m.Name, PeerURL: strings.Join(m.PeerURLs, ","), Learner: m.IsLearner, id: fmt.Sprintf("%x", m.ID)}
		if rows[i].Name == "" {
			rows[i].Name = "(unstarted)"
		}
		go func() {
			defer func() { done <- struct{}{} }()
			r := &rows[i]
			if len(m.ClientURLs) == 0 {
				r.Health = "unhealthy: not started (no client URL)"
				return
			}
			r.ClientIP = urlHost(m.ClientURLs[0])
			st := n.EtcdMemberStatus(ctx, r.ClientIP)
			r.Leader = st.Err == nil && st.ID != 0 && st.ID == st.Leader
			if st.Err == nil && st.Version != "" {
				r.Version = "v" + strings.TrimPrefix(st.Version, "v") // as stratum version and status write it
			}
			switch {
			case st.Err != nil:
				r.Health = "unhealthy: " + st.Err.Error()
			case st.Leader == 0:
				r.Health = "unhealthy: no leader"
			case len(st.Alarms) > 0:
				r.Health = "unhealthy: " + strings.Join(st.Alarms, "; ")
			default:
				r.Health = "healthy"
			}
		}()
	}
	for range list.Members {
		<-done
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// writeMemberTable writes rows as a table: name, peer URL, voter or learner,
// leader, etcd version, health.
func writeMemberTable(w io.Writer, rows []memberRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tPEER URL\tROLE\tLEADER\tVERSION\tHEALTH")
	for _, r := range rows {
		role, leader := "voter", "-"
		if r.Learner {
			role = "learner"
		}
		if r.Leader {
			leader = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.PeerURL, role, leader, cmp.Or(r.Version, "-"), r.Health)
	}
	return tw.Flush()
}

// tableVerdict fails unless every member is a healthy voter and exactly one
// reports itself leader.
func tableVerdict(rows []memberRow) error {
	var problems []string
	leaders := 0
	for _, r := range rows {
		if r.Health != "healthy" {
			problems = append(problems, r.Name+" "+r.Health)
		}
		if r.Learner {
			problems = append(problems, r.Name+" is still a learner")
		}
		if r.Leader {
			leaders++
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if leaders != 1 {
		return fmt.Errorf("%d members report themselves leader, want exactly 1", leaders)
	}
	return nil
}

// urlHost is the host part of a URL ("" when it does not parse).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
