package ha

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"stratum.dev/stratum/internal/nodestate"
)

// Services a control plane runs, by the names the host's service manager
// knows.
const (
	ServiceEtcd      = "etcd"
	ServiceAPIServer = "kube-apiserver"
	ServiceVIP       = "kube-vip"
)

// StartControlPlane is `stratum up` on a node with saved control-plane state:
// it starts etcd from the node state, promotes the member if it joined as a
// learner (on every start, so a crash between start and promotion never
// strands a learner), clears the join's intent journal once the local member
// is confirmed serving as a voter, then starts the apiserver and kube-vip.
//
// A node with no state but a surviving join intent is refused: bootstrapping
// there would make a second, single-member cluster over the membership the
// journal records.
func (n *Node) StartControlPlane(ctx context.Context) (*nodestate.NodeState, error) {
	h := n.env.Host
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		if survives, ierr := n.JoinIntentSurvives(ctx); ierr != nil {
			return nil, ierr
		} else if survives {
			return nil, fmt.Errorf("%w (%s) and the node has no saved state: a join was interrupted after it began adding this node to etcd. "+
				"`stratum up` will not bootstrap a new cluster here; nothing was changed: re-run the same `stratum server` join command to finish or roll back that join",
				ErrIntentSurvives, JoinIntentPath())
		}
		return nil, fmt.Errorf("no control-plane state on this node (%s); nothing was changed: join a cluster with `stratum server`", nodestate.Path)
	}
	if err != nil {
		return nil, err
	}
	if err := h.StartService(ctx, ServiceEtcd); err != nil {
		return st, fmt.Errorf("start etcd: %w", err)
	}
	if st.Etcd.InitialClusterState == "existing" {
		peers := peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)
		if len(peers) > 0 {
			if err := n.PromoteWhenCaughtUp(ctx, peers, st.Etcd.PeerURL); err != nil {
				return st, fmt.Errorf("promote this node's etcd learner: %w; etcd keeps running as a learner, and the next `stratum up` retries", err)
			}
		}
	}
	if err := n.confirmLocalMember(ctx, st); err != nil {
		return st, err
	}
	if err := n.ClearJoinIntent(ctx); err != nil {
		return st, err
	}
	if err := h.StartService(ctx, ServiceAPIServer); err != nil {
		return st, fmt.Errorf("start kube-apiserver: %w", err)
	}
	if st.VIP.Address != "" {
		if err := h.StartService(ctx, ServiceVIP); err != nil {
			return st, fmt.Errorf("start kube-vip: %w", err)
		}
	}
	return st, nil
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
			return fmt.Errorf("this node's etcd member is not confirmed (%s); the join intent journal %s is kept: run `stratum up` again", why, JoinIntentPath())
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
