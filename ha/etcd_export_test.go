package ha

import (
	"context"

	"stratum.dev/stratum/internal/nodestate"
)

// ClusterVerdict exposes EtcdClusterHealthy's judgement of the members'
// answers to the external tests, which cannot otherwise stage every
// combination of answers (two leaders at once) on a live cluster.
var ClusterVerdict = clusterVerdict

// StartEtcd exposes the control-plane start's etcd step (with its watch for
// a new member's lost publish) to the external tests.
func (n *Node) StartEtcd(ctx context.Context, st *nodestate.NodeState) error {
	return n.startEtcd(ctx, st)
}

// EtcdVersionSkew exposes etcd's join rule as the join applies it.
var EtcdVersionSkew = checkEtcdVersionSkew
