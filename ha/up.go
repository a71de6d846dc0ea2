package ha

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"slices"
	"strings"
	"time"

	"stratum.dev/stratum/internal/clusteradmins"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// Services a control plane runs, by the names the host's service manager
// knows.
const (
	ServiceEtcd      = "etcd"
	ServiceAPIServer = "kube-apiserver"
	ServiceVIP       = "kube-vip"
)

// Checkpoints of a control plane's start (StartControlPlane), in order. A
// crash at any of them leaves a node that `stratum up` starts again.
const (
	// CheckpointStartAfterEtcd: etcd runs; a joined learner is not yet promoted.
	CheckpointStartAfterEtcd = "start-after-etcd"
	// CheckpointStartAfterPromote: the member is a voter; the journal remains.
	CheckpointStartAfterPromote = "start-after-promote"
	// CheckpointStartAfterConfirm: the local member is confirmed serving as a
	// voter and the join journal is cleared.
	CheckpointStartAfterConfirm = "start-after-confirm"
	// CheckpointStartAfterAPIServer: the apiserver runs, with a certificate
	// covering the VIP; kube-vip is next.
	CheckpointStartAfterAPIServer = "start-after-apiserver"
)

// StartCheckpoints are a control plane start's checkpoints in order.
var StartCheckpoints = []string{CheckpointStartAfterEtcd, CheckpointStartAfterPromote, CheckpointStartAfterConfirm, CheckpointStartAfterAPIServer}

// refuseSurvivingIntent refuses a start or a bootstrap on a node without
// saved state whose join's intent journal survives: a join was interrupted
// after it began adding this node to etcd, and only that join, run again,
// finishes or rolls it back (ErrIntentSurvives, a refusal).
func (n *Node) refuseSurvivingIntent(ctx context.Context) error {
	survives, err := n.JoinIntentSurvives(ctx)
	switch {
	case err != nil:
		return Refusal(err)
	case !survives:
		return nil
	}
	if _, rerr := n.readJoinIntent(); errors.Is(rerr, errIntentDamaged) {
		// No join can reconcile with it: re-running one is no answer.
		return Refusal(fmt.Errorf("%w and the node has no saved state, but %w", ErrIntentSurvives, rerr))
	}
	return Refusal(fmt.Errorf("%w (%s) and the node has no saved state: a join was interrupted after it began adding this node to etcd. "+
		"`stratum up` will not bootstrap a new cluster here; nothing was changed: re-run the same `stratum server` join command to finish or roll back that join",
		ErrIntentSurvives, JoinIntentPath()))
}

// StartControlPlane is `stratum up` on a node with saved control-plane state:
// it starts etcd from the node state, promotes the member if it joined as a
// learner (on every start, so a crash between start and promotion never
// strands a learner), clears the join's intent journal once the local member
// is confirmed serving as a voter, makes sure the apiserver certificate covers
// the cluster VIP (reissuing it when it does not), then starts the apiserver,
// kube-vip and the stratum-operator (where the host runs one). Last it
// publishes the etcd members for later joins (publishOwnView), a step that
// never fails the start.
//
// A node with no state but a surviving join intent is refused: bootstrapping
// there would make a second, single-member cluster over the membership the
// journal records.
func (n *Node) StartControlPlane(ctx context.Context) (*nodestate.NodeState, error) {
	h := n.env.Host
	if err := n.refuseResetUnderWay("starting this control plane"); err != nil {
		return nil, err
	}
	if err := n.refuseDataReplaceUnderWay("starting this control plane"); err != nil {
		return nil, err
	}
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		if err := n.refuseSurvivingIntent(ctx); err != nil {
			return nil, err
		}
		return nil, Refusal(fmt.Errorf("no control-plane state on this node (%s); nothing was changed: join a cluster with `stratum server`", nodestate.Path))
	}
	if err != nil {
		return nil, Refusal(err)
	}
	// The pod ranges' firewall trust (AssembleNode's) is an iptables rule,
	// which a reboot or a firewall reload drops: every start puts it back
	// (idempotent; a failure is a warning, as at the assembly).
	if err := host.TrustPodCIDRs(h, st.PodCIDR, keptOutOfPodTrust(st.NodeIP, st.VIP.Address)...); err != nil {
		n.log.Warn("pod CIDR not trusted in the firewall", "err", err)
	}
	for _, step := range []struct {
		name, what string
		run        func(context.Context, *nodestate.NodeState) error
	}{
		{CheckpointStartAfterEtcd, "etcd start", n.startEtcd},
		{CheckpointStartAfterPromote, "learner promotion", n.promoteSelf},
		{CheckpointStartAfterConfirm, "member confirmation", n.confirmAndClearJournal},
		{CheckpointStartAfterAPIServer, "kube-apiserver start", n.startAPIServer},
		{"", "cluster admins bound", n.bindClusterAdmins},
		{"", "kube-vip start", n.startVIP},
		{"", "VIP serving", n.waitVIPServing},
		{"", "stratum-operator start", n.startOperator},
		{"", "etcd members published", n.publishOwnView},
	} {
		began := time.Now()
		var skip stepSkipped
		var warned stepWarned
		if err := step.run(ctx, st); errors.As(err, &skip) {
			n.stepSkip(step.what, skip.reason)
		} else if errors.As(err, &warned) {
			n.stepWarn(step.what, warned.err)
		} else if err != nil {
			return st, err
		} else {
			n.stepDone(step.what, time.Since(began))
		}
		if step.name != "" {
			if err := n.checkpoint(ctx, step.name); err != nil {
				return st, err
			}
		}
	}
	return st, nil
}

// promoteSelf promotes this node's member when it joined as a learner.
func (n *Node) promoteSelf(ctx context.Context, st *nodestate.NodeState) error {
	if st.Etcd.InitialClusterState != "existing" {
		return stepSkipped{"this node's member began the cluster, never a learner"}
	}
	peers := peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)
	if len(peers) == 0 {
		return stepSkipped{"this node's member was the only one at its join"}
	}
	// The initial cluster names only the members there were at the join;
	// any of them may be down now while the cluster has a quorum without
	// it. This node's own member, just started, knows the current members:
	// it is asked too, after them.
	own := nodestate.FirstIP(st.NodeIP)
	if own != "" && !slices.Contains(peers, own) {
		peers = append(peers, own)
	}
	if err := n.PromoteWhenCaughtUp(ctx, peers, st.Etcd.PeerURL); err != nil {
		return fmt.Errorf("promote this node's etcd learner: %w; its member stays a learner, and the next `stratum up` promotes it", err)
	}
	return nil
}

func (n *Node) confirmAndClearJournal(ctx context.Context, st *nodestate.NodeState) error {
	if err := n.confirmLocalMember(ctx, st); err != nil {
		return err
	}
	if err := n.ClearJoinIntent(ctx); err != nil {
		return err
	}
	n.stripJoinToken()
	return nil
}

// stripJoinToken takes the bootstrap token out of the join's bootstrap
// kubeconfig on a node whose member serves: the token reads the cluster's
// encrypted bundle and takes the maintenance fence until its grant expires,
// and nothing uses it once the node state is saved. The file stays, without
// credentials: its presence is what refuses a bootstrap on a machine that
// holds the cluster's CAs from a join but lost its state
// (refuseUnfinishedJoin), which a bootstrap would otherwise start a second
// cluster under (kubeadm removes its bootstrap kubeconfig; stratum keeps
// the file for that mark). Every start does it, so a node a crash stopped
// between the two, or joined by an earlier release, loses the token too; a
// kubeconfig without credentials is not written again. A write that fails
// is a warning and the start goes on: one that failed before its rename
// left the token, which the next start takes out; one whose directory
// fsync failed after it left the file without the token, and a crash
// before the directory is synced brings it back, for the next start.
func (n *Node) stripJoinToken() {
	p := version.Kubeconfig("bootstrap")
	kc, err := n.env.Host.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return // never joined (the cluster's first control plane)
	}
	var held bool
	if err == nil {
		kc, held, err = kubeconfig.WithoutCredentials(kc)
	}
	if err == nil && held {
		err = n.env.Host.WriteFile(p, kc, 0o600)
	}
	if err != nil {
		n.stepWarn("the join's bootstrap token removal", fmt.Errorf("%s may still hold it (the next start tries again; the token itself authenticates until its grant expires, or `stratum token delete`): %w", p, err))
	}
}

// startAPIServer starts the apiserver with a certificate that covers the
// VIP: one that does not is reissued first, and a running apiserver is
// restarted onto it.
func (n *Node) startAPIServer(ctx context.Context, st *nodestate.NodeState) error {
	h := n.env.Host
	reissued, err := n.ensureAPIServerCoversVIP(st)
	if err != nil {
		return err
	}
	if err := h.StartService(ctx, ServiceAPIServer); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	if reissued {
		if err := h.RestartService(ctx, ServiceAPIServer); err != nil {
			return fmt.Errorf("restart kube-apiserver onto its reissued certificate: %w", err)
		}
	}
	return nil
}

// bindClusterAdmins makes sure the admin credential's group is bound to
// cluster-admin (clusteradmins.Ensure) through this node's own apiserver,
// just started: kube-vip's election, the publication for joiners and every
// admin command after need the binding, and the VIP may not answer yet. A
// node where no kube-apiserver runs skips it. A failure is a warning, never
// a reason to stop the control plane started (stepWarned): a cluster brought
// up before the binding still runs on its system:masters admin.conf, and a
// write refused (NOSPACE, an admission webhook whose pods are down) must not
// tear down, at every restart under systemd, what served before.
func (n *Node) bindClusterAdmins(ctx context.Context, st *nodestate.NodeState) error {
	ss, err := n.env.Host.ServiceStatus(ctx, ServiceAPIServer)
	if host.NotRunning(ss, err) {
		return stepSkipped{"no kube-apiserver runs here"}
	}
	if err := n.bindClusterAdminsVia(ctx, st.NodeIP); err != nil {
		return stepWarned{fmt.Errorf("%w; the control plane runs, but the admin kubeconfig, kube-vip's election and the apiserver's kubelet client may be refused until the binding is there: re-run `stratum up` to retry", err)}
	}
	return nil
}

// bindClusterAdminsVia is clusteradmins.Ensure with this node's admin
// credential aimed at the apiserver on nodeIP (its first address), minting
// from this node's cluster CA when it must write.
func (n *Node) bindClusterAdminsVia(ctx context.Context, nodeIP string) error {
	cfg, err := n.ownAdminRESTConfig(nodeIP)
	if err != nil {
		return fmt.Errorf("bind %s: %w", pki.ClusterAdminsGroup, err)
	}
	clusterCA := func() (*pki.CA, error) {
		shared, err := n.loadSharedCAs()
		if err != nil {
			return nil, err
		}
		return shared.Cluster, nil
	}
	wrote, err := clusteradmins.Ensure(ctx, cfg, clusterCA, n.env.Host.Now())
	if err != nil {
		return err
	}
	if wrote {
		n.log.Info("bound the admin credential's group to cluster-admin", "binding", clusteradmins.BindingName)
	}
	return nil
}

// startVIP starts kube-vip on a node of a cluster with a VIP, once this
// node's apiserver certificate is known to cover it: a node that would fail
// every client's TLS check while it holds the VIP does not take it.
func (n *Node) startVIP(ctx context.Context, st *nodestate.NodeState) error {
	if st.VIP.Address == "" {
		return stepSkipped{"this cluster has no VIP"}
	}
	if err := n.apiServerCoversVIP(st); err != nil {
		return fmt.Errorf("kube-vip not started: this node would hold the VIP %s with an apiserver certificate that does not cover it (%w); nothing else was changed: run `stratum up` again, which reissues the certificate", st.VIP.Address, err)
	}
	if err := n.env.Host.StartService(ctx, ServiceVIP); err != nil {
		return fmt.Errorf("start kube-vip: %w", err)
	}
	return nil
}

// Bounds of waitVIPServing: a probe's dial, and the whole wait, which spans
// a dead holder's lease running out (kube-vip's, 5 s).
const (
	vipServingDial   = 250 * time.Millisecond
	vipServingWithin = 10 * time.Second
)

// waitVIPServing waits, on a node of a cluster with a VIP, until the VIP
// serves this cluster's apiserver (VIPServes): through this node's own
// candidate, just started, or another control plane's. A start is not "up"
// for its clients before that: the admin kubeconfig, and every client
// repointed, names the VIP. Each probe's dial is bounded by vipServingDial,
// so one begun before the candidate took the address does not wait out the
// address's neighbour resolution (about 3 s); its exchange has
// vipProbeTimeout, as a busy apiserver may need. A VIP that does not serve
// within vipServingWithin is a warning: the control plane runs and serves
// on the node's own address, and the supervisor's kube-vip lines say why.
func (n *Node) waitVIPServing(ctx context.Context, st *nodestate.NodeState) error {
	if st.VIP.Address == "" {
		return stepSkipped{"this cluster has no VIP"}
	}
	deadline := time.Now().Add(vipServingWithin)
	for {
		ok, err := n.vipServes(ctx, st.VIP.Address, vipServingDial)
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			own := nodestate.FirstIP(st.NodeIP)
			return stepWarned{fmt.Errorf("the VIP %s does not serve this cluster after %s (%w): the control plane runs and serves on its own address, %s; the supervisor's kube-vip lines say why", st.VIP.Address, vipServingWithin, err, apiServerURL(own))}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startOperator starts the stratum-operator where this host's service
// manager runs one (a real host's supervisor started with --operator): a
// snapshot restore, an etcd rejoin or a renewal stops or restarts it with the
// rest of the control plane, and this start is what brings it back. A host
// that runs none (the simulator, a supervisor started with --operator=false)
// is not an error.
func (n *Node) startOperator(ctx context.Context, _ *nodestate.NodeState) error {
	err := n.env.Host.StartService(ctx, serviceOperator)
	if host.NotRunHere(err) {
		return stepSkipped{"this host runs no stratum-operator"}
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("start the stratum-operator: %w", err)
}

// confirmLocalMember checks that the local etcd serves, as a started voter of
// the cluster: the confirmation after which the join journal is no longer
// needed.
func (n *Node) confirmLocalMember(ctx context.Context, st *nodestate.NodeState) error {
	self := urlHostOf(st.Etcd.ClientURL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := n.EtcdMemberStatus(ctx, self)
		if m.Err == nil && m.Leader != 0 && !m.IsLearner {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			why := "it is still a learner"
			if m.Err != nil {
				why = m.Err.Error()
			} else if m.Leader == 0 {
				why = "it knows no leader"
			}
			kept := ""
			if survives, _ := n.JoinIntentSurvives(ctx); survives {
				kept = fmt.Sprintf("; the join intent journal %s is kept", JoinIntentPath())
			}
			return fmt.Errorf("this node's etcd member is not confirmed (%s)%s: run `stratum up` again", why, kept)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// peerIPs are the hosts of the initial cluster's peer URLs other than self.
func peerIPs(initialCluster, self string) []string {
	var out []string
	for _, part := range strings.Split(initialCluster, ",") {
		_, u, ok := strings.Cut(part, "=")
		if !ok || u == self {
			continue
		}
		if pu, err := url.Parse(u); err == nil && pu.Hostname() != "" {
			out = append(out, pu.Hostname())
		}
	}
	return out
}
