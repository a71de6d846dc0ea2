package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/units"
	"stratum.dev/stratum/internal/version"
)

// Checkpoints of the control-plane join, in the order a join reaches them.
// Each is a point where a crash must leave a node that a re-run (or `stratum
// up`) converges: joined, or cleanly not joined, never an orphan member or a
// second cluster.
const (
	// CheckpointJoinStart: refusals passed, locks held, nothing written.
	CheckpointJoinStart = "join-start"
	// CheckpointAfterDiscovery: the cluster CA is pinned by --ca-hash and the
	// bootstrap kubeconfig written.
	CheckpointAfterDiscovery = "after-discovery"
	// CheckpointAfterDownload: the shared certificates are on disk.
	CheckpointAfterDownload = "after-download"
	// CheckpointAfterCerts: this node's leaf certificates are on disk.
	CheckpointAfterCerts = "after-certs"
	// CheckpointAfterKubeconfigs: this node's kubeconfigs are on disk.
	CheckpointAfterKubeconfigs = "after-kubeconfigs"
	// CheckpointBeforeIntent: the cluster is healthy; the intent journal is
	// about to be written.
	CheckpointBeforeIntent = "before-intent"
	// CheckpointAfterIntent: the journal is fsync'd; no member added yet.
	CheckpointAfterIntent = "after-intent"
	// CheckpointAfterMemberAdd: etcd has the learner; no node state yet. The
	// journal is the only record of it on this node.
	CheckpointAfterMemberAdd = "after-member-add"
	// CheckpointBeforeStateSave: the node state is rendered, not yet saved.
	CheckpointBeforeStateSave = "before-state-save"
	// CheckpointAfterStateSave: the node state is saved; the caller starts the
	// services next, and the journal is cleared once etcd's data is confirmed.
	CheckpointAfterStateSave = "after-state-save"
)

// JoinCheckpoints are the join's checkpoints in order.
var JoinCheckpoints = []string{
	CheckpointJoinStart, CheckpointAfterDiscovery, CheckpointAfterDownload, CheckpointAfterCerts,
	CheckpointAfterKubeconfigs, CheckpointBeforeIntent, CheckpointAfterIntent, CheckpointAfterMemberAdd,
	CheckpointBeforeStateSave, CheckpointAfterStateSave,
}

// JoinOptions for `stratum server --server --token --certificate-key`.
type JoinOptions struct {
	Server  string
	Token   string
	CAHash  string
	CertKey string
	NodeIP  string // --node-ip ("" when not given)
	// ConfigNodeIP is spec.network.nodeIP. Kept apart from NodeIP so the join
	// logs which one won (host.ResolveNodeIP has the whole precedence).
	ConfigNodeIP string
	Operator     bool // run the stratum-operator host service on this CP too (leader-elected)
	CertRenew    bool // install the cert auto-renew timer on this CP too
	// Profile is the node profile this control plane runs, by name; "" for
	// none. CIS is its legacy spelling, true exactly for the cis profile, which
	// the join's key agreement and config writers still read.
	Profile string
	CIS     bool
	// SELinuxOptOut is this control plane's spec.selinux: false.
	SELinuxOptOut bool
	VIP           nodestate.VIP // the cluster VIP this CP joins (kube-vip election)
	// PodCIDR/ServiceCIDR are spec.network.podCIDR and serviceCIDR, "" when
	// unset. They cannot override the cluster's ranges, which ride in with the
	// shared certs: a different one refuses the join (checkJoinNetwork).
	PodCIDR     string
	ServiceCIDR string
	// ClusterDomain is spec.network.clusterDomain, "" when unset. It cannot
	// override the cluster's domain, which rides in with the shared certs: a
	// different one refuses the join (checkJoinDomain).
	ClusterDomain string
	// Cilium is this control plane's spec.network.cilium. It must be the
	// cluster's, which rides in with the shared certs: a different one refuses
	// the join (checkJoinCilium).
	Cilium addons.CiliumSettings
	// EtcdQuota is spec.etcd.quota in bytes, 0 when unset. The member runs
	// with the cluster's quota (its members' largest): a different one
	// refuses the join at its health gate.
	EtcdQuota int64
}

// Sentinels a join's caller branches on.
var (
	// ErrAlreadyJoined: the node has saved control-plane state.
	ErrAlreadyJoined = errors.New("this node is already a control plane")
	// ErrRetainedData: the node holds etcd data from an earlier life.
	ErrRetainedData = errors.New("this node retains etcd data")
	// ErrClusterUnhealthy: the cluster's etcd is not healthy enough to add a member.
	ErrClusterUnhealthy = errors.New("the cluster's etcd is not healthy")
	// ErrClockSkew: this machine's clock is further from the cluster's
	// (its apiserver's) than the certificates' backdating covers; the join
	// refuses at discovery, before it writes anything.
	ErrClockSkew = errors.New("this machine's clock is too far from the cluster's")
	// ErrJoinMismatch: the node's configuration differs from the cluster's.
	ErrJoinMismatch = errors.New("this node's configuration differs from the cluster's")
	// ErrIntentSurvives: `stratum up` refuses to bootstrap over a join's journal.
	ErrIntentSurvives = errors.New("a control-plane join's intent journal survives on this node")
	// ErrGrantRetired: the join's grant was dropped from the published
	// bundle after the join downloaded it (a rekey, a re-upload, a prune).
	ErrGrantRetired = errors.New("the join's grant was retired")
)

// joinHint is what to run to recover or retry.
const joinHint = "re-run the same `stratum server` join command"

// PrepareControlPlaneJoin readies this node as an additional control plane:
// payload, prereqs, shared certs, local leaves, live etcd member-add, and the
// persisted node state the supervisor renders etcd's flags from. The CALLER
// (stratum up --join) then starts the supervisor.
//
// ctx is the run's interrupt context (internal/interrupt), created by runUp
// before preflight and threaded through preparation: a signal received before
// the live member-add stops the join at a step boundary, never performing the
// add. From the member-add to the persisted node state the first signal is
// deliberately deferred — the policy is documented at that window.
func PrepareControlPlaneJoin(ctx context.Context, o JoinOptions) (*nodestate.NodeState, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.PrepareControlPlaneJoin(ctx, o)
}

// PrepareControlPlaneJoin is the package function's method. A join that
// returns an error without having saved its node state removes the files it
// created on this node (the bootstrap kubeconfig, downloaded and issued
// certificates, kubeconfigs, configs) and puts back the contents of those it
// overwrote (say a kubelet config left by an earlier run), so a refusal
// leaves the node as it found it. A crash removes nothing: a re-run finds
// what it left and overwrites it. It gives up the node's locks before it
// returns; JoinControlPlane, which `stratum server` runs, keeps them
// through the start.
func (n *Node) PrepareControlPlaneJoin(ctx context.Context, o JoinOptions) (*nodestate.NodeState, error) {
	st, release, err := n.prepareControlPlaneJoin(ctx, o)
	release()
	return st, err
}

// JoinControlPlane is the whole join of this node as a control plane, what
// `stratum server` runs: PrepareControlPlaneJoin, then StartControlPlane
// from the state it saved, under one hold of the node's locks. A repoint, a
// restore or a reset begun between the two is refused, naming the join,
// instead of finding the member added but not started and racing the
// start's writes (its strip of the join token from bootstrap.conf). The
// locks are released before it returns, so a supervisor's retried start
// (Restart) can take them. A start that fails leaves the member in the
// cluster: its error is Midway and says what to run.
func (n *Node) JoinControlPlane(ctx context.Context, o JoinOptions) (*nodestate.NodeState, error) {
	_, release, err := n.prepareControlPlaneJoin(ctx, o)
	defer release()
	if err != nil {
		return nil, err
	}
	st, err := n.StartControlPlane(ctx)
	if err != nil {
		return nil, Midway(fmt.Errorf("%w. The join before this start is done (this node's etcd member was added and its node state saved): fix the cause and run `stratum up` to start it, or `stratum reset` to take this node out of the cluster. "+
			"If its member was promoted to a voter (`stratum etcd members` on another control plane says so), the cluster counts it for its quorum while it is stopped: a cluster of two control planes, or of three with one down, refuses every write until it runs again, and `stratum reset` needs that quorum too, so start it soon", err))
	}
	return st, nil
}

// prepareControlPlaneJoin is PrepareControlPlaneJoin with the node's locks
// still held when it returns (release gives them up, and is never nil): a
// refused join has undone its files under them, and a prepared one can be
// started under them.
func (n *Node) prepareControlPlaneJoin(ctx context.Context, o JoinOptions) (*nodestate.NodeState, func(), error) {
	tracked := &createdFiles{Host: n.env.Host}
	jn := &Node{env: n.env, log: n.log}
	jn.env.Host = tracked
	st, reachedAdd, release, err := jn.prepareJoin(ctx, o)
	// The node's locks are released after the undo (by the caller): a
	// reset or a repoint run meanwhile would otherwise find the files it
	// removes or puts back still changing (a reset's wipe undone by a file
	// put back after it).
	if err != nil && st == nil {
		uerr := tracked.undo()
		if uerr != nil {
			n.log.Warn("join refused; some files it created or overwrote could not be put back", "err", uerr)
		}
		// Stopped before the member-add, with what it wrote removed: the
		// node and the cluster are as they were.
		switch {
		case reachedAdd:
			err = Midway(err)
		case uerr == nil:
			err = Refusal(err)
		}
	}
	return st, release, err
}

// createdFiles is a host that remembers the files and directories created
// through it which did not exist before (a file's missing parents too), the
// earlier contents of the files it overwrote, and the ranges the firewall
// was told to trust, so a refused join can remove exactly the former, put
// the files back and take the trust back.
type createdFiles struct {
	host.Host
	mu      sync.Mutex
	created []string // in creation order: parents before their children
	// overwritten holds each overwritten file's contents and mode from
	// before its first write through this host.
	overwritten map[string]priorFile
	// trusted are the ranges the firewall was told to trust through it
	// (the pod ranges: the assembly's TrustPodCIDRs), taken back too.
	trusted []netip.Prefix
}

// TrustCIDR trusts cidr and remembers it for undo when it did: a trust that
// failed opened nothing, and its undo would fail the same way (an iptables
// whose lock stays busy), turning a refusal into a failure.
func (c *createdFiles) TrustCIDR(cidr netip.Prefix) error {
	err := c.Host.TrustCIDR(cidr)
	if err == nil {
		c.mu.Lock()
		c.trusted = append(c.trusted, cidr)
		c.mu.Unlock()
	}
	return err
}

// priorFile is a file's contents and mode before a join overwrote it.
type priorFile struct {
	data []byte
	perm fs.FileMode
}

// missing lists p and its ancestors that do not exist, outermost first.
func (c *createdFiles) missing(p string) []string {
	var out []string
	for d := path.Clean(p); d != "/" && d != "."; d = path.Dir(d) {
		if _, err := c.Host.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// record remembers the paths of fresh that exist after the call that
// created them. A call that failed may have created some: the directories
// before its write, or the file itself when only the directory fsync after
// its rename failed.
func (c *createdFiles) record(fresh []string) {
	var made []string
	for _, p := range fresh {
		if _, err := c.Host.Stat(p); err == nil {
			made = append(made, p)
		}
	}
	c.mu.Lock()
	c.created = append(c.created, made...)
	c.mu.Unlock()
}

// keep saves p's contents before it is first overwritten. A file that
// cannot be read is not overwritten: the write is refused with the reason,
// since the undo could not put it back.
func (c *createdFiles) keep(p string) error {
	fi, err := c.Host.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // created, so removed by the undo
	case err != nil:
		return fmt.Errorf("look at %s before writing it, to put it back should the join fail: %w", p, err)
	case !fi.Mode().IsRegular():
		return nil // not a file the write could replace; the write says so
	}
	c.mu.Lock()
	_, kept := c.overwritten[p]
	c.mu.Unlock()
	if kept {
		return nil
	}
	data, err := c.Host.ReadFile(p)
	if err != nil {
		return fmt.Errorf("read %s before overwriting it, to put it back should the join fail: %w", p, err)
	}
	c.mu.Lock()
	if c.overwritten == nil {
		c.overwritten = map[string]priorFile{}
	}
	c.overwritten[p] = priorFile{data: data, perm: fi.Mode().Perm()}
	c.mu.Unlock()
	return nil
}

func (c *createdFiles) WriteFile(p string, data []byte, perm fs.FileMode) error {
	if err := c.keep(p); err != nil {
		return err
	}
	fresh := c.missing(p)
	err := c.Host.WriteFile(p, data, perm)
	c.record(fresh)
	return err
}

func (c *createdFiles) WriteFrom(p string, r io.Reader, perm fs.FileMode) error {
	if err := c.keep(p); err != nil {
		return err
	}
	fresh := c.missing(p)
	err := c.Host.WriteFrom(p, r, perm)
	c.record(fresh)
	return err
}

// Remove keeps a file the join did not create before removing it, so the
// undo writes it back: the download removes an at-rest encryption config
// an earlier download left when the cluster's bundle carries none, and a
// join refused after that must leave it as it found it. A file the join
// created (a write probe) is only removed.
func (c *createdFiles) Remove(p string) error {
	c.mu.Lock()
	ours := slices.Contains(c.created, path.Clean(p))
	c.mu.Unlock()
	if !ours {
		if err := c.keep(p); err != nil {
			return err
		}
	}
	return c.Host.Remove(p)
}

func (c *createdFiles) MkdirAll(p string, perm fs.FileMode) error {
	fresh := c.missing(p)
	err := c.Host.MkdirAll(p, perm)
	c.record(fresh)
	return err
}

// undo removes what was created, newest first, so each directory is empty
// by the time its turn comes; one that is not (something else wrote into
// it) is kept. It then writes back the files that were overwritten.
func (c *createdFiles) undo() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for i := len(c.created) - 1; i >= 0; i-- {
		p := c.created[i]
		if p == joinIntentPath {
			// The journal is cleared explicitly, and only once its member is
			// known gone: a rollback that could not remove the member keeps it.
			continue
		}
		fi, err := c.Host.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.IsDir() {
			if entries, err := c.Host.ReadDir(p); err != nil || len(entries) > 0 {
				continue
			}
		}
		if err := c.Host.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(c.overwritten)) {
		if p == joinIntentPath {
			continue // as above: the journal is the rollback's to clear
		}
		prior := c.overwritten[p]
		if err := c.Host.WriteFile(p, prior.data, prior.perm); err != nil {
			errs = append(errs, fmt.Errorf("put back %s: %w", p, err))
		}
	}
	for _, p := range c.trusted {
		// A machine a join was refused on is no control plane: nothing
		// of its own trusts the cluster's pod range.
		if err := c.Host.UntrustCIDR(p); err != nil {
			errs = append(errs, err)
		}
	}
	c.created, c.overwritten, c.trusted = nil, nil, nil
	return errors.Join(errs...)
}

// joinRun is one control-plane join in flight: its options, what each step
// resolved, and the node state it builds. The steps (joinPhases) run in
// checkpoint order; each reads what the ones before it resolved.
type joinRun struct {
	n     *Node
	o     JoinOptions
	name  string
	start time.Time
	// intent is the journal this run resumes from (resumed true) or wrote.
	intent  joinIntent
	resumed bool
	// release drops the node's locks; the run holds them throughout.
	release func()
	// Resolved by discovery and the assembly.
	etcdIPs         []string
	nodeIP, peerURL string
	clusterID       string
	etcdQuota       int64 // the cluster's, for the member's node state
	st              *nodestate.NodeState
	// fence is the maintenance fence the join holds from the health gate to
	// the saved node state (nil once released).
	fence *Fence
	// viaGrant records that the download opened this join's own grant
	// entry (not the legacy one), which the fence step finds still there.
	viaGrant bool
	// addRefused records that the member-add step stopped before any add
	// (the fence lost first, or etcd refused the add) and, the run not being
	// a resumed one, cleared the journal it wrote: the run changed nothing
	// in the cluster, so its failure is a refusal.
	addRefused bool
}

// joinStep is one named step of a join.
type joinStep struct {
	name string
	run  func(r *joinRun, ctx context.Context) error
}

// joinPhases are a join's steps in the order its checkpoints name them. Every
// step before addMember refuses without changing the cluster; addMember is
// the one step that changes it, and from there to saveState a failure rolls
// back exactly the member this join added.
var joinPhases = []joinStep{
	{"refusals", (*joinRun).refuse},
	{"discovery", (*joinRun).discover},
	{"node assembly", (*joinRun).assemble},
	{"preflight", (*joinRun).preflight},
	{"intent journal", (*joinRun).writeIntent},
	{"etcd member-add and node state", (*joinRun).addMemberAndSave},
}

// prepareJoin runs joinPhases; reachedAdd reports whether the run got to
// the member-add step (from there a failure may have changed the cluster,
// however it was rolled back), unless that step stopped before any add and
// cleared its journal (addRefused). release gives up the node's locks the
// run took (nothing when it took none): the caller's, once it has put the
// node back after a refusal.
func (n *Node) prepareJoin(ctx context.Context, o JoinOptions) (st *nodestate.NodeState, reachedAdd bool, release func(), err error) {
	r := &joinRun{n: n, o: o, name: n.env.Host.Name(), start: time.Now()}
	release = func() {
		if r.release != nil {
			r.release()
			r.release = nil
		}
	}
	defer r.dropFence(ctx)
	for i, s := range joinPhases {
		n.log.Debug("join step", "step", s.name)
		reachedAdd = reachedAdd || i == len(joinPhases)-1 || r.resumed
		began := time.Now()
		if err := s.run(r, ctx); err != nil {
			if r.st != nil && r.st.Etcd.InitialCluster != "" {
				return r.st, reachedAdd, release, err // saved: the caller starts from the state
			}
			return nil, reachedAdd && !r.addRefused, release, err
		}
		n.stepDone(s.name, time.Since(began))
	}
	n.log.Info("control-plane join prepared", "member", r.name, "peerURL", r.peerURL, "took", time.Since(r.start).Round(time.Millisecond))
	return r.st, true, release, nil
}

// refuse is every refusal that needs nothing from the cluster: malformed
// options, a node IP this host does not have, the node's locks, saved state,
// a journal it cannot read, retained etcd data.
func (r *joinRun) refuse(ctx context.Context) error {
	n, h, o := r.n, r.n.env.Host, r.o
	if err := CheckJoinOptions(o); err != nil {
		return err
	}
	// The node IP given, the one that wins by host.ResolveNodeIP's
	// precedence (a flag overrides the config file), must be this host's; a
	// detected one is by construction, and a host with none to detect is
	// refused here, before the download writes the shared certificates. Its
	// primary family is detected: whether the cluster is dual-stack is known
	// only from the download, and the assembly detects the second address.
	if c, err := host.ResolveNodeIP(o.NodeIP, o.ConfigNodeIP, "", func() (string, error) { return host.DetectNodeIPs(h, false) }); err != nil {
		return fmt.Errorf("control-plane join refused: %w; nothing was changed", err)
	} else if c.Source != "detected" {
		what := map[string]string{"flag": "--node-ip", "config": "spec.network.nodeIP", "env": "$NODE_IP"}[c.Source]
		if err := checkLocalIP(h, c.IP); err != nil {
			return fmt.Errorf("control-plane join refused: %s %s: %w; nothing was changed: pass an address of this host", what, c.IP, err)
		}
	}
	release, err := nodelock.AcquireBoth(h, "stratum server (control-plane join)", n.lockOptions(ctx)...)
	if err != nil {
		return err
	}
	r.release = release
	if err := n.refuseResetUnderWay("control-plane join"); err != nil {
		return err
	}
	if st, err := nodestate.Load(h); err == nil {
		return fmt.Errorf("%w (%s, node state %s, etcd member %s); nothing was changed: start it with `stratum up`", ErrAlreadyJoined, r.name, nodestate.Path, st.Etcd.PeerURL)
	} else if !errors.Is(err, nodestate.ErrNoState) {
		return fmt.Errorf("control-plane join: %w", err)
	}
	switch in, err := n.readJoinIntent(); {
	case errors.Is(err, errNoIntent):
	case err != nil:
		return err
	default:
		r.intent, r.resumed = in, true
		n.log.Info("a join intent journal survives: reconciling with it", "peerURL", in.PeerURL, "member", in.MemberID)
	}
	if err := n.checkNoRetainedData(); err != nil {
		return err
	}
	return n.checkpoint(ctx, CheckpointJoinStart)
}

// discover trusts the cluster only through the CA hash (no credential is
// sent before it matches) and writes the bootstrap kubeconfig.
func (r *joinRun) discover(ctx context.Context) error {
	n, h, o := r.n, r.n.env.Host, r.o
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("control-plane join stopped before discovery: %w; nothing was changed", err)
	}
	caPEM, serverTime, err := n.fetchCA(ctx, o)
	if err != nil {
		return err
	}
	if err := checkClockSkew(h.Now(), serverTime, o.Server); err != nil {
		return err
	}
	bootstrapKC, err := kubeconfig.ForToken(o.Server, caPEM, o.Token, token.BootstrapUser)
	if err != nil {
		return err
	}
	if err := h.MkdirAll(version.K8sConfDir, 0o700); err != nil {
		return err
	}
	if err := h.WriteFile(version.Kubeconfig("bootstrap"), bootstrapKC, 0o600); err != nil {
		return fmt.Errorf("write the bootstrap kubeconfig: %w", err)
	}
	return n.checkpoint(ctx, CheckpointAfterDiscovery)
}

// fetchCA is discovery.FetchCA through the host's dialer, asked again while
// the server does not answer (askWhileSilent); any other failure (the CA
// hash, no cluster-info) is returned at once.
func (n *Node) fetchCA(ctx context.Context, o JoinOptions) (caPEM []byte, serverTime time.Time, err error) {
	err = n.askWhileSilent(ctx, o.Server, joinSilentWithin, discovery.ErrUnreachable, func() error {
		var err error
		caPEM, serverTime, err = discovery.FetchCA(ctx, o.Server, o.CAHash, n.env.Host.DialContext)
		return err
	})
	return caPEM, serverTime, err
}

// maxClockSkew is how far this machine's clock may be from the cluster's: the
// certificates a join issues are backdated by pki.Backdate, and a server
// whose clock is behind the joiner's by more would see them as not yet
// valid (a joiner behind by more sees the cluster's fresh ones so). A
// minute of it is left for the Date header's one-second resolution and
// the round trip.
const maxClockSkew = pki.Backdate - time.Minute

// checkClockSkew refuses a join whose clock (now, read after the server
// answered at serverTime) is more than maxClockSkew from the server's. A
// server that sent no Date is not judged.
func checkClockSkew(now, serverTime time.Time, server string) error {
	if serverTime.IsZero() {
		return nil
	}
	skew := now.Sub(serverTime)
	if skew <= maxClockSkew && skew >= -maxClockSkew {
		return nil
	}
	dir, why := "ahead of", "the certificates this join issues would not be valid yet to the cluster's servers"
	if skew < 0 {
		dir, why, skew = "behind", "this machine would judge the cluster's newest certificates not valid yet", -skew
	}
	return Refusal(fmt.Errorf("%w: it is %s %s's by %s (this machine %s, the apiserver %s; at most %s is tolerated), so %s; nothing was changed: set the time (e.g. timedatectl set-ntp true) and run the join again",
		ErrClockSkew, dir, server, skew.Round(time.Second), now.UTC().Format(time.RFC3339), serverTime.UTC().Format(time.RFC3339), maxClockSkew, why))
}

// assemble is the shared node assembly: the shared-certificate download and
// the cluster's gates, the node IP, this node's leaves and kubeconfigs, the
// profile and runtime configs. The cluster's VIP rides in with the bundle
// and lands in the node state before any certificate is issued, so the
// apiserver certificate covers it whether or not --vip was given.
//
// The server this node's kubeconfigs target (the node state's Server) is
// bring-up's rule, not the join URL: the VIP when the cluster has one, else
// this node's own apiserver, known once the node IP is. A control plane
// joined through cp1's address must not lose its clients with cp1 (kubeadm,
// too, targets the local endpoint when there is no control-plane endpoint).
func (r *joinRun) assemble(ctx context.Context) error {
	n, h, o := r.n, r.n.env.Host, r.o
	var server string
	if o.VIP.Address != "" {
		server = apiServerURL(o.VIP.Address)
	}
	st := &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: r.name, Server: server, VIP: o.VIP, Profile: o.Profile}
	profile := o.Profile
	if profile == "" && o.CIS {
		profile = "cis"
	}
	assembly := NodeAssembly{
		HostDirs: func() error { return host.Dirs(h) },
		Prereqs:  func(po host.PrereqOptions) error { return host.Prereqs(h, po) },
		ResolveNet: func() (netcfg.Config, error) {
			g, err := n.DownloadCerts(ctx, version.Kubeconfig("bootstrap"), o.CertKey, func(p certbundle.Profile) error {
				return checkJoinAgainst(p, o)
			})
			if err != nil {
				return netcfg.Config{}, err
			}
			r.viaGrant = !g.Legacy
			for _, ep := range g.EtcdEndpoints {
				if u, err := url.Parse(ep); err == nil && u.Hostname() != "" {
					r.etcdIPs = append(r.etcdIPs, u.Hostname())
				}
			}
			if len(r.etcdIPs) == 0 {
				return netcfg.Config{}, fmt.Errorf("the shared-certificate bundle publishes no etcd endpoints; nothing was added to etcd: mint a fresh join command on a control plane (`stratum token create --control-plane`)")
			}
			netc := netcfg.Config{PodCIDR: g.Profile.PodCIDR, ServiceCIDR: g.Profile.ServiceCIDR, ClusterDomain: g.Profile.ClusterDomain}.WithDefaults()
			st.PodCIDR, st.ServiceCIDR, st.ClusterDomain, st.Cilium = netc.PodCIDR, netc.ServiceCIDR, netc.ClusterDomain, g.Profile.Cilium
			if st.VIP.Address == "" && g.VIP != "" {
				st.VIP = nodestate.VIP{Address: g.VIP}
				st.Server = apiServerURL(g.VIP)
			}
			return netc, n.checkpoint(ctx, CheckpointAfterDownload)
		},
		TrustPodCIDRs: func(podCIDR string) {
			// The node IP is resolved after this step (AssembleNode's
			// order) and a range holding it refused then, before the
			// member-add; it is resolved here too, the same way, so such
			// a range is not trusted meanwhile.
			var keepOut []string
			if c, err := host.ResolveNodeIP(o.NodeIP, o.ConfigNodeIP, "", func() (string, error) {
				return host.DetectNodeIPs(h, netcfg.Config{PodCIDR: podCIDR}.DualStack())
			}); err == nil {
				keepOut = keptOutOfPodTrust(c.IP, "")
			}
			if err := host.TrustPodCIDRs(h, podCIDR, keepOut...); err != nil {
				n.log.Warn("pod CIDR not trusted in the firewall", "err", err)
			}
		},
		ResolveNodeIP: host.ResolveNodeIP,
		DetectNodeIPs: func(dual bool) (string, error) { return host.DetectNodeIPs(h, dual) },
		BeforeCerts: func(c host.NodeIPChoice) error {
			r.nodeIP = strings.SplitN(c.IP, ",", 2)[0]
			if err := checkLocalIP(h, r.nodeIP); err != nil {
				return fmt.Errorf("control-plane join refused: node IP %s (from %s): %w; nothing was added to etcd: pass --node-ip with an address of this host", r.nodeIP, c.Source, err)
			}
			clusterNet := netcfg.Config{PodCIDR: st.PodCIDR, ServiceCIDR: st.ServiceCIDR}.WithDefaults()
			if err := clusterNet.CheckNodeIP(r.nodeIP, false); err != nil {
				return fmt.Errorf("control-plane join refused: %w (the service CIDR is the cluster's); nothing was added to etcd", err)
			}
			if err := checkOutsideRanges(clusterNet, c.IP, "", false); err != nil {
				return fmt.Errorf("control-plane join refused: %w; nothing was added to etcd", err)
			}
			st.NodeIP = r.nodeIP
			if st.VIP.Address == "" {
				st.Server = apiServerURL(r.nodeIP)
			}
			r.peerURL = "https://" + net.JoinHostPort(r.nodeIP, fmt.Sprint(version.EtcdPeerPort))
			n.log.Info("node IP", "ip", c.IP, "source", c.Source)
			if r.intent.PeerURL != "" && r.intent.PeerURL != r.peerURL {
				return fmt.Errorf("the surviving join intent journal %s records peer URL %s, but this run resolves %s; nothing more was changed: re-run with --node-ip %s, or remove the journal's member (`stratum etcd members`) and the file",
					joinIntentPath, r.intent.PeerURL, r.peerURL, urlHostOf(r.intent.PeerURL))
			}
			return nil
		},
		IssueCerts: func(hostname, ip string, sans *pki.APISANs) error {
			if err := n.issueLeaves(hostname, ip, sans); err != nil {
				return err
			}
			return n.checkpoint(ctx, CheckpointAfterCerts)
		},
		WriteKubeconfigs: func(_, _ string, _ bool) error {
			if err := n.writeKubeconfigs(st.Server); err != nil {
				return err
			}
			return n.checkpoint(ctx, CheckpointAfterKubeconfigs)
		},
		WriteProfileConfigs:  func() error { return writeProfileConfigs(h, profile) },
		BeforeRuntimeConfigs: func() error { return n.checkNoRetainedData() },
		WriteRuntimeConfigs:  func(st *nodestate.NodeState) error { return writeRuntimeConfigs(h, st) },
	}
	r.st = st
	_, err := AssembleNodeContext(ctx, assembly, AssembleRequest{
		Hostname: r.name, NodeIPFlag: o.NodeIP, ConfigNodeIP: o.ConfigNodeIP,
		VIPAddress: o.VIP.Address, APIServer: server,
		PrereqOptions: host.PrereqOptions{Profile: profile, SELinuxOptOut: o.SELinuxOptOut},
		State:         st,
	})
	return err
}

// currentMemberIPs are the client IPs of the etcd cluster's started members
// now, as the first of published (the members the cluster published last,
// then those of the grant's mint: DownloadCerts) that answers lists them. A
// join gates on, adds through and rolls back through the cluster as it is: a
// control plane reset or removed since the mint no longer answers, and is no
// longer a member whose health matters.
//
// A member with this node's own peer URL is left out: an unstarted learner
// has no client address, and a started one (this machine re-imaged under a
// control plane's address) does not answer here, and the member-add refuses
// it by name before anything is added.
func (n *Node) currentMemberIPs(ctx context.Context, published []string, ownPeerURL string) ([]string, error) {
	ms, err := n.members(ctx, published, "etcd member list")
	if err != nil {
		return nil, err
	}
	ms = slices.DeleteFunc(ms, func(m *etcdserverpb.Member) bool { return slices.Contains(m.PeerURLs, ownPeerURL) })
	ips := startedClientIPs(ms)
	if len(ips) == 0 {
		return nil, fmt.Errorf("the member list names no started member")
	}
	return ips, nil
}

// preflight checks, before the journal and the member-add, everything that
// would leave the new member unable to start: the services this control
// plane runs (binaries, service manager, ports), the directories its etcd
// writes, the cluster's health, and whether its etcd version can join the
// cluster's (checkEtcdVersionFits). It then takes the maintenance fence,
// which the join holds until its node state is saved.
func (r *joinRun) preflight(ctx context.Context) error {
	n, h := r.n, r.n.env.Host
	services := []string{ServiceEtcd, ServiceAPIServer}
	if r.st.VIP.Address != "" {
		services = append(services, ServiceVIP)
	}
	if err := h.CheckServices(ctx, services); err != nil {
		return fmt.Errorf("control-plane join refused: this host could not start its control plane: %w; nothing was added to etcd: fix the host, then %s", err, joinHint)
	}
	// The etcd data directory too when it is there already: a disk of its
	// own mounted on it may be read-only where the state directory is not.
	writable := []string{version.StateDir}
	if _, err := h.Stat(version.EtcdDataDir); err == nil {
		writable = append(writable, version.EtcdDataDir)
	}
	if err := checkWritable(h, writable...); err != nil {
		return fmt.Errorf("control-plane join refused: %w; nothing was added to etcd: fix the directory, then %s", err, joinHint)
	}
	if err := r.judgeCluster(ctx); err != nil {
		return err
	}
	if err := r.takeFence(ctx); err != nil {
		return err
	}
	return n.checkpoint(ctx, CheckpointBeforeIntent)
}

// clusterRecoveryWait bounds how long a join's preflight judges the
// cluster's etcd again while what refuses it is what a member restarting
// shows for a few seconds (handed to its systemd unit, upgraded, rebooted):
// no member answering the member list, a member not answering, knowing no
// leader or naming another. The printed join command run on several machines
// at once meets exactly that: one join's control plane restarts under its
// unit while the next judges the cluster. The member add waits as long
// (memberAddRetryFor) for the same reason.
const clusterRecoveryWait = 30 * time.Second

// clusterRecoveryPoll is how often the judgement is made again meanwhile.
const clusterRecoveryPoll = 500 * time.Millisecond

// judgeCluster reads the cluster's etcd the join adds its member to, and
// refuses a cluster it must not add one to: its started members (from the
// first of those published that lists them), their health, their quota,
// their version, the cluster's ID. A refusal that waiting may cure is judged
// again, every clusterRecoveryPoll, for up to clusterRecoveryWait, saying
// what it waits for; an alarm raised, a quota or a version that does not fit
// is refused at once. Each judgement reads the cluster anew, so nothing from
// a refused one is kept.
func (r *joinRun) judgeCluster(ctx context.Context) error {
	published := r.etcdIPs
	report := waitReporter{n: r.n}
	deadline := time.Now().Add(clusterRecoveryWait)
	for {
		waited := ""
		if !time.Now().Before(deadline) {
			waited = fmt.Sprintf(" (judged again for %s: still so)", clusterRecoveryWait)
		}
		reason, err := r.judgeClusterOnce(ctx, published, waited)
		stopped := func() error {
			why := reason
			if why == "" {
				why = err.Error()
			}
			return fmt.Errorf("control-plane join stopped while it judged the cluster's etcd (%s): %w; nothing was added to etcd: %s", why, context.Cause(ctx), joinHint)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return stopped()
		case reason == "" || waited != "":
			return err
		}
		report.waitingBecause(reason, "the cluster's etcd to become healthy before this node's member is added (%s; nothing was added yet)", reason)
		select {
		case <-ctx.Done():
			return stopped()
		case <-time.After(clusterRecoveryPoll):
		}
	}
}

// judgeClusterOnce is one judgement of judgeCluster, from the published
// members' IPs. On success it sets the run's members, quota and cluster ID.
// A refusal that waiting may cure comes with the reason to wait; waited is
// said in a refusal after the wait.
func (r *joinRun) judgeClusterOnce(ctx context.Context, published []string, waited string) (reason string, err error) {
	n := r.n
	current, err := n.currentMemberIPs(ctx, published, r.peerURL)
	if err != nil {
		if errors.Is(err, errNoEndpointAnswered) {
			reason = "no member answered its member list: the cluster has no quorum for now (a member restarting?), or none is reachable from here"
		}
		return reason, fmt.Errorf("%w%s: none of the etcd members the cluster published (%s: those it published last, then those at this command's mint) answers with the member list: %v; nothing was added to etcd: "+
			"if those control planes were reset or removed since, mint a fresh join command on a running control plane (`stratum token create --control-plane`); otherwise heal the cluster (`stratum etcd health`), then %s",
			ErrClusterUnhealthy, waited, strings.Join(published, ", "), err, joinHint)
	}
	health, err := n.EtcdClusterHealth(ctx, current)
	if err != nil {
		reason = healthWaitReason(health)
		return reason, fmt.Errorf("%w%s: %v; nothing was added to etcd: heal the cluster (`stratum etcd health`), then %s", ErrClusterUnhealthy, waited, err, joinHint)
	}
	// The member runs with the cluster's quota: one with less would raise
	// NOSPACE for the whole cluster first.
	quota := clusterQuota(health)
	if o := r.o.EtcdQuota; o != 0 && o != effectiveQuota(quota) {
		return "", fmt.Errorf("control-plane join refused: spec.etcd.quota is %s, and the cluster's etcd members run with %s (the largest of their quotas); nothing was added to etcd: a member's quota is the cluster's (`stratum etcd quota` changes it on each control plane): drop the setting or make it the cluster's, then %s",
			units.Bytes(o), units.Bytes(effectiveQuota(quota)), joinHint)
	}
	if err := n.checkEtcdVersionFits(ctx, current, joinVersionRefusal); err != nil {
		if errors.Is(err, ErrClusterUnhealthy) {
			reason, err = "no member told its cluster's version", fmt.Errorf("%w%s", err, waited)
		}
		return reason, err
	}
	clusterID, err := n.clusterID(ctx, current)
	if err != nil {
		if errors.Is(err, errNoEndpointAnswered) {
			reason = "no member answered with the cluster's ID"
		}
		return reason, fmt.Errorf("%w%s: %w; nothing was added to etcd: heal the cluster (`stratum etcd health`), then %s", ErrClusterUnhealthy, waited, err, joinHint)
	}
	if r.intent.ClusterID != "" && r.intent.ClusterID != clusterID {
		return "", fmt.Errorf("the surviving join intent journal %s records etcd cluster %s, but the cluster at %v is %s (restored or rebuilt since?); nothing more was changed: remove the journal once you have checked that cluster %s has no member %s",
			joinIntentPath, r.intent.ClusterID, current, clusterID, r.intent.ClusterID, r.intent.PeerURL)
	}
	r.etcdIPs, r.etcdQuota, r.clusterID = current, quota, clusterID
	return "", nil
}

// writeIntent records, fsync'd, who is about to be added where. A run that
// stops before its member-add clears the journal it wrote, since nothing was
// added; one that resumed from a surviving journal keeps it, since the
// earlier run's member may exist.
func (r *joinRun) writeIntent(ctx context.Context) error {
	n, h := r.n, r.n.env.Host
	endpoints := make([]string, len(r.etcdIPs))
	for i, ip := range r.etcdIPs {
		endpoints[i] = EtcdEndpoint(ip)
	}
	r.intent = joinIntent{Name: r.name, PeerURL: r.peerURL, ClusterID: r.clusterID, Endpoints: endpoints, Started: h.Now().UTC(), MemberID: r.intent.MemberID}
	if err := n.writeJoinIntent(r.intent); err != nil {
		if !r.resumed {
			// A write that failed after its rename (the directory's fsync)
			// leaves the file: a recovery record of a member never added,
			// which would make `up` refuse and the next join resume.
			if cerr := n.ClearJoinIntent(context.WithoutCancel(ctx)); cerr != nil {
				return fmt.Errorf("%w; nothing was added to etcd, but %w: remove it by hand before the next `stratum up` or join", err, cerr)
			}
		}
		return fmt.Errorf("%w; nothing was added to etcd", err)
	}
	err := n.checkpoint(ctx, CheckpointAfterIntent)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		return nil
	}
	if r.resumed {
		return fmt.Errorf("control-plane join stopped before the etcd member-add: %w; the surviving journal %s is kept, since the member an earlier run recorded may exist: %s", err, joinIntentPath, joinHint)
	}
	if cerr := n.ClearJoinIntent(context.WithoutCancel(ctx)); cerr != nil {
		n.log.Warn("the join intent journal could not be cleared", "err", cerr)
	}
	return fmt.Errorf("control-plane join stopped before the etcd member-add: %w; nothing was added to etcd: %s", err, joinHint)
}

// addMemberAndSave is the deferral window. From the member-add until the
// node state that records it is saved, the node is a member that nothing on
// disk but the journal knows about: the first SIGINT/SIGTERM is held until
// the state is saved, so an impatient Ctrl-C does not turn a join that was
// about to finish into a rollback. Everything in the window runs on a
// context that the first signal does not end. The window opens with each
// add attempt (memberAddWindowed), not before: while etcd refuses the add
// and the join waits to try again, nothing has been added, and a signal
// stops the join there, as at any step before.
func (r *joinRun) addMemberAndSave(ctx context.Context) error {
	n, h := r.n, r.n.env.Host
	confirm := func() error { return r.fence.Confirm(ctx) }
	if err := n.waitingOn("the API server to answer the confirmation of this join's maintenance fence (it answers once its etcd does; nothing was added yet)", confirm); err != nil {
		if !r.resumed {
			r.clearIntent(context.WithoutCancel(ctx))
			r.addRefused = true
		}
		if ctx.Err() != nil {
			return fmt.Errorf("control-plane join stopped before the etcd member-add: %w; nothing was added to etcd: %s", context.Cause(ctx), joinHint)
		}
		return fmt.Errorf("control-plane join of %s: the maintenance fence was lost before the member-add: %w; nothing was added to etcd: %s", r.name, err, joinHint)
	}
	ic, id, wctx, endDeferral, err := n.memberAddWindowed(ctx, r.etcdIPs, r.name, r.peerURL)
	defer endDeferral()
	if err != nil {
		// A refusal added nothing. Any other error may hide an add that
		// landed (its answer lost): only an unstarted learner with this
		// node's own peer URL can be it.
		undone := ""
		if !errors.Is(err, errMemberAddRefused) {
			undone = r.rollback(wctx, 0)
		} else if !r.resumed {
			r.clearIntent(wctx)
			r.addRefused = true
		}
		return fmt.Errorf("control-plane join of %s: %w%s", r.name, err, undone)
	}
	r.intent.MemberID = fmt.Sprintf("%x", id)
	if err := n.writeJoinIntent(r.intent); err != nil {
		return fmt.Errorf("control-plane join of %s: record the added member %x: %w%s", r.name, id, err, r.rollback(wctx, id))
	}
	if err := n.checkpoint(wctx, CheckpointAfterMemberAdd); err != nil {
		return fmt.Errorf("%w%s", err, r.rollback(wctx, id))
	}
	r.st.Etcd = nodestate.Etcd{
		Name: r.name, PeerURL: r.peerURL, ClientURL: EtcdEndpoint(r.nodeIP),
		InitialCluster: ic, InitialClusterState: "existing", ClusterID: r.clusterID,
		QuotaBackendBytes: r.etcdQuota,
	}
	if err := n.checkpoint(wctx, CheckpointBeforeStateSave); err != nil {
		r.st.Etcd = nodestate.Etcd{}
		return fmt.Errorf("%w%s", err, r.rollback(wctx, id))
	}
	if err := nodestate.Save(h, r.st); err != nil {
		// A save that failed at its last step (the directory fsync) left
		// the state in place. It goes before the member does, so no crash
		// leaves a state naming a removed member; one that cannot go keeps
		// the member and the journal, and the node may start from it.
		if rerr := h.Remove(nodestate.Path); rerr != nil {
			return fmt.Errorf("control-plane join of %s: %w; the node state could not be removed either (%v), so etcd member %x and the join intent journal are kept: fix the disk, then run `stratum up` if %s exists, or %s",
				r.name, err, rerr, id, nodestate.Path, joinHint)
		}
		r.st.Etcd = nodestate.Etcd{}
		return fmt.Errorf("control-plane join of %s: %w%s", r.name, err, r.rollback(wctx, id))
	}
	// The state records the member: a signal held in the window is delivered
	// now, and the caller sees it before starting any service.
	endDeferral()
	r.dropFence(wctx)
	return n.checkpoint(wctx, CheckpointAfterStateSave)
}

// rollback removes the member this join added, by the ID its own add
// returned (or the journal recorded), never by address: a member another
// node owns is never touched. With no ID (an add whose answer was lost) it
// removes only an unstarted learner with this node's peer URL, which no
// other node can have. The journal is cleared once the member is known
// gone; a removal that fails keeps it for a re-run to reconcile. It returns
// what became of the member, for the join's error ("; ...").
func (r *joinRun) rollback(ctx context.Context, id uint64) string {
	n := r.n
	if id == 0 && r.intent.MemberID != "" {
		fmt.Sscanf(r.intent.MemberID, "%x", &id)
	}
	member := "the member this join added"
	if id == 0 {
		member = "any member this join's add left (its answer was lost)"
	}
	rctx, cancel := context.WithTimeout(ctx, memberAddRetryFor+10*time.Second)
	defer cancel()
	if err := n.removeOwnMember(rctx, r.etcdIPs, id, r.peerURL); err != nil {
		n.log.Error("rollback: the added etcd member could not be removed; the join intent journal is kept for a re-run to reconcile", "peerURL", r.peerURL, "id", fmt.Sprintf("%x", id), "err", err)
		return fmt.Sprintf("; %s could not be removed again (%v): it and the join intent journal are kept, and `stratum up` refuses until the same join command, re-run, reconciles them", member, err)
	}
	r.clearIntent(rctx)
	return fmt.Sprintf("; %s was removed again (rolled back): %s", member, joinHint)
}

func (r *joinRun) clearIntent(ctx context.Context) {
	if err := r.n.ClearJoinIntent(ctx); err != nil {
		r.n.log.Error("the join intent journal could not be cleared", "err", err)
	}
}

// joinFenceFor bounds how long a join holds the maintenance fence without
// renewing it: from the health gate to the saved node state, member-add
// retries included. A join that crashed holding it blocks other maintenance
// for at most this long; its own re-run (the same token) retakes it at once.
const joinFenceFor = 2 * time.Minute

// takeFence takes the maintenance fence as the join's bootstrap token, so no
// rekey, CA rotation or other join changes the cluster's shared state
// between this join's health gate and its saved node state.
func (r *joinRun) takeFence(ctx context.Context) error {
	n, h := r.n, r.n.env.Host
	kc, err := h.ReadFile(version.Kubeconfig("bootstrap"))
	if err != nil {
		return fmt.Errorf("control-plane join: read the bootstrap kubeconfig: %w; nothing was added to etcd", err)
	}
	cfg, err := n.restConfig(kc)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	id, _, err := token.ParseToken(r.o.Token)
	if err != nil {
		return err
	}
	f, err := n.TakeJoinFence(ctx, cs, id, joinFenceFor)
	if errors.Is(err, ErrTokenRefused) {
		return fmt.Errorf("control-plane join refused: %w; nothing was added to etcd", err)
	}
	if err != nil {
		return fmt.Errorf("control-plane join refused: %w; nothing was added to etcd: %s once the holder is done", err, joinHint)
	}
	r.fence = f
	if !r.resumed {
		if err := r.bundleAsDownloaded(ctx, cs, id); err != nil {
			r.dropFence(ctx)
			return err
		}
	}
	return nil
}

// bundleAsDownloaded refuses a join whose shared certificates are no
// longer the cluster's since its download: a `certs rekey` or a `certs
// reupload` after a CA rotation retires every grant and promises that every
// earlier join command changes nothing, and `grants prune` or `token delete`
// drop a grant. A join that downloaded before (the fence is taken after the
// download and the health gate) would otherwise add a member, on CAs a
// re-upload replaced. Its grant entry must still be there (or, for a join
// that opened the legacy entry, as a grant minted by an older stratum is,
// that entry must still open with the join's key), and what it opens must be
// the files the join wrote. Asked under the fence, which every republication
// holds, so none comes between this answer and the member-add.
func (r *joinRun) bundleAsDownloaded(ctx context.Context, cs kubernetes.Interface, id string) error {
	retired := func(why string) error {
		return fmt.Errorf("control-plane join refused: %w: %s since this join downloaded the shared certificates (a `stratum certs rekey` or `certs reupload` meanwhile, or the grant pruned or its token deleted); nothing was added to etcd: %s", ErrGrantRetired, why, mintHint)
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(actx, certsSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("control-plane join refused: read Secret %s/%s again to confirm the shared certificates it downloaded are still the cluster's: %w; nothing was added to etcd: %s", certsNamespace, certsSecret, err, joinHint)
	}
	entry, own := bundleEntry(s, id)
	if !own && r.viaGrant {
		return retired(fmt.Sprintf("this join's grant (token %s) was retired", id))
	}
	key, err := certbundle.ParseCertKey(r.o.CertKey)
	if err != nil {
		return fmt.Errorf("control-plane join refused: %w; nothing was added to etcd", err)
	}
	files, _, err := certbundle.Open(key, certsSecret, entry, s.Data[entry])
	if err != nil {
		return retired(fmt.Sprintf("the bundle no longer opens with this join's certificate key (%v)", err))
	}
	for _, name := range certbundle.SortedNames(files) {
		if have, err := r.n.env.Host.ReadFile(certbundle.FilePath(name)); err != nil || !bytes.Equal(have, files[name]) {
			return retired(fmt.Sprintf("the cluster's %s is no longer the one this join wrote", name))
		}
	}
	return nil
}

// dropFence releases the maintenance fence if the run holds it.
func (r *joinRun) dropFence(ctx context.Context) {
	if r.fence == nil {
		return
	}
	switch err := r.fence.Release(context.WithoutCancel(ctx)); {
	case errors.Is(err, ErrFenceLost):
		// Taken again since, by this token's holder on another machine
		// (the same join command run twice at once) or anyone after it ran
		// out: the fence is no longer this run's to release.
		r.n.log.Info("the maintenance fence is no longer this join's; left to its holder", "err", err)
	case err != nil:
		r.n.log.Warn("the maintenance fence could not be released; it runs out on its own", "err", err)
	}
	r.fence = nil
}

// checkLocalIP refuses an address this host does not have: a join on the
// wrong --node-ip would publish another node's peer URL as its own.
func checkLocalIP(h host.Host, ip string) error {
	want, err := netip.ParseAddr(strings.TrimSpace(strings.SplitN(ip, ",", 2)[0]))
	if err != nil {
		return fmt.Errorf("not an IP address: %w", err)
	}
	addrs, err := h.Addresses()
	if err != nil {
		return fmt.Errorf("list this host's addresses: %w", err)
	}
	for _, a := range addrs {
		if a.Unmap() == want.Unmap() {
			return nil
		}
	}
	return fmt.Errorf("not an address of this host (it has %v)", addrs)
}

// nodeIPGone is checkLocalIP for a node IP a node state recorded: why ip is
// not an address of this host, nil when it is. Addresses that cannot be
// listed judge nothing (nil): etcd's start, or the reset's own request, says
// what is wrong then.
func nodeIPGone(h host.Host, ip string) error {
	if _, err := h.Addresses(); err != nil {
		return nil
	}
	return checkLocalIP(h, ip)
}

// checkWritable refuses a directory this node cannot write: created when
// absent, then probed with a file written and removed.
func checkWritable(h host.Files, dirs ...string) error {
	for _, d := range dirs {
		if err := h.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("cannot create %s: %w", d, err)
		}
		probe := path.Join(d, writeProbe)
		if err := h.WriteFile(probe, []byte("ok"), 0o600); err != nil {
			return fmt.Errorf("cannot write %s: %w", d, err)
		}
		if err := h.Remove(probe); err != nil {
			return fmt.Errorf("cannot remove a file from %s: %w", d, err)
		}
	}
	return nil
}

// clusterID is the etcd cluster's ID, read through the published endpoints.
func (n *Node) clusterID(ctx context.Context, etcdIPs []string) (string, error) {
	var id string
	err := n.viaEach(ctx, etcdIPs, "read the etcd cluster ID", func(ctx context.Context, cli *clientv3.Client, ep string) error {
		ml, err := n.memberList(ctx, cli)
		if err != nil {
			return err
		}
		id = fmt.Sprintf("%x", ml.Header.ClusterId)
		return nil
	})
	return id, err
}

// checkNoRetainedData refuses a node whose etcd data directory holds
// anything: data from an earlier cluster, or from an earlier life in this
// one, must never be started as a fresh joining member.
func (n *Node) checkNoRetainedData() error {
	entries, err := etcdDataEntries(n.env.Host)
	if err != nil {
		return fmt.Errorf("%w? %s cannot be read (%v), so it may hold data; nothing was changed: make it readable, or remove it if the data is unwanted, then %s", ErrRetainedData, version.EtcdDataDir, err, joinHint)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w in %s; nothing was changed: this machine was an etcd member before, and without its node state it cannot rejoin with that data: if its old member is still listed (`stratum etcd members` on a control plane), remove it there (`stratum etcd member remove <name>`), then remove what the directory holds and %s", ErrRetainedData, version.EtcdDataDir, joinHint)
	}
	return nil
}

// CheckJoinOptions refuses malformed join options (the server URL, token,
// CA hash, certificate key and VIP of a join command) before anything is
// touched. The join checks them first; a caller with checks of its own to
// make before the join (the CLI's supervisor start: root, socket, binaries)
// calls it ahead of them, so a mistyped join command is named first.
func CheckJoinOptions(o JoinOptions) error {
	var bad []string
	if !joinServerURL(o.Server) {
		bad = append(bad, fmt.Sprintf("--server %q is not https://<host>:<port> (the port given, nothing after it)", o.Server))
	}
	if _, _, err := token.ParseToken(o.Token); err != nil {
		bad = append(bad, "--token is not <6 lowercase alphanumerics>.<16 lowercase alphanumerics>")
	}
	if _, err := pki.CheckCAHashFormat(o.CAHash); err != nil {
		bad = append(bad, "--ca-hash is not sha256:<64 hex digits>")
	}
	if _, err := certbundle.ParseCertKey(o.CertKey); err != nil {
		bad = append(bad, "--certificate-key is not 64 hex digits")
	}
	if o.VIP.Address != "" {
		if err := CheckVIP(o.VIP.Address); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("control-plane join refused: %s; nothing was changed: copy the join command printed by `stratum token create --control-plane`", strings.Join(bad, "; "))
	}
	// The profile is this node's own (its --config), checked here as the
	// bring-up checks it, not after the download.
	if problems := host.ProfileProblems(o.Profile, o.SELinuxOptOut); len(problems) > 0 {
		return fmt.Errorf("control-plane join refused: %w: %s; nothing was changed", host.ErrPrereq, strings.Join(problems, "; "))
	}
	return nil
}

// joinServerURL reports whether server is an apiserver URL a join dials as
// given: https, a host and a port, and nothing after them. Without its port
// a join dialled 443 and refused, 30 s later, a cluster it called
// unreachable; a path, a query or a user's name are never a join command's.
func joinServerURL(server string) bool {
	u, err := url.Parse(server)
	return err == nil && u.Scheme == "https" && u.Hostname() != "" && u.Port() != "" &&
		(u.Path == "" || u.Path == "/") && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.User == nil && u.Opaque == ""
}

// checkJoinAgainst is the download's check: the cluster's network, domain and
// Cilium settings ride in with the shared certs, and a joiner configured
// otherwise is refused before any file is written.
func checkJoinAgainst(p certbundle.Profile, o JoinOptions) error {
	cluster := netcfg.Config{PodCIDR: p.PodCIDR, ServiceCIDR: p.ServiceCIDR, ClusterDomain: p.ClusterDomain}.WithDefaults()
	if err := netcfg.CheckJoin(cluster, netcfg.Config{PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR, ClusterDomain: o.ClusterDomain}); err != nil {
		return fmt.Errorf("%w: %v", ErrJoinMismatch, err)
	}
	if o.Cilium != (addons.CiliumSettings{}) && !o.Cilium.Equal(p.Cilium) {
		return fmt.Errorf("%w: Cilium settings: cluster has %+v, this node is configured with %+v; a joining control plane cannot change them: remove spec.network.cilium or make it match", ErrJoinMismatch, p.Cilium, o.Cilium)
	}
	if o.VIP.Address != "" && p.VIP != "" && o.VIP.Address != p.VIP {
		return fmt.Errorf("%w: VIP: cluster has %s, this node is configured with %s", ErrJoinMismatch, p.VIP, o.VIP.Address)
	}
	return nil
}

// issueLeaves mints this node's leaves from the downloaded shared CAs.
func (n *Node) issueLeaves(hostname, nodeIP string, sans *pki.APISANs) error {
	files := map[string][]byte{}
	for _, name := range pki.SharedFileNames() {
		b, err := n.env.Host.ReadFile(version.PKIFile(name))
		if err != nil {
			return fmt.Errorf("read shared certificate %s: %w", name, err)
		}
		files[name] = b
	}
	shared, err := pki.LoadShared(files)
	if err != nil {
		return err
	}
	return n.issueLeavesFrom(shared, hostname, nodeIP, sans)
}

// clusterCA is the cluster CA, certificate and key, from this node's PKI dir.
func (n *Node) clusterCA() (*pki.CA, error) {
	h := n.env.Host
	caCert, err := h.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA certificate: %w", err)
	}
	caKey, err := h.ReadFile(version.PKIFile("ca.key"))
	if err != nil {
		return nil, fmt.Errorf("read the cluster CA key: %w", err)
	}
	ca, err := pki.LoadCA(caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("load the cluster CA: %w", err)
	}
	return ca, nil
}

// writeKubeconfigs writes the node's kubeconfigs, all targeting server.
func (n *Node) writeKubeconfigs(server string) error {
	h := n.env.Host
	ca, err := n.clusterCA()
	if err != nil {
		return err
	}
	kcs, err := kubeconfig.NodeKubeconfigs(ca, server, h.Now())
	if err != nil {
		return err
	}
	for name, data := range kcs {
		if err := h.WriteFile(version.Kubeconfig(name), data, 0o600); err != nil {
			return fmt.Errorf("write kubeconfig %s: %w", name, err)
		}
	}
	return nil
}

// apiServerURL is the kube-apiserver URL at ip (a node's address or the VIP).
func apiServerURL(ip string) string {
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(version.APIServerPort))
}

// urlHostOf is urlHost, or raw itself when it names no host: for messages
// that must show what they were given.
func urlHostOf(raw string) string {
	if h := urlHost(raw); h != "" {
		return h
	}
	return raw
}
