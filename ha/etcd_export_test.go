package ha

import (
	"context"
	"time"

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
func EtcdVersionSkew(local, cluster, at string) error {
	return checkEtcdVersionSkew(local, cluster, at, joinVersionRefusal)
}

// MemberVersions is one member's versions as clusterVersionAhead reads them.
type MemberVersions struct{ IP, Server, Cluster string }

// ClusterVersionAhead exposes the version a new member must fit.
func ClusterVersionAhead(ms []MemberVersions) (string, string) {
	var answers []memberVersions
	for _, m := range ms {
		answers = append(answers, memberVersions{ip: m.IP, server: m.Server, cluster: m.Cluster})
	}
	return clusterVersionAhead(answers)
}

// RemoveOwnMember exposes a join's rollback removal: the member with id, or,
// with no id or one of a member gone (an add whose answer was lost), only an
// unstarted learner with peerURL.
func (n *Node) RemoveOwnMember(ctx context.Context, cpIPs []string, id uint64, peerURL string) error {
	return n.removeOwnMember(ctx, cpIPs, id, peerURL)
}

// DataReplacePath exposes the path of the etcd data replacement journal a
// restore or rejoin writes while it replaces the data.
func DataReplacePath() string { return dataReplacePath }

// HealthyButForSpace and WaitHealthyButForSpace expose the defragmentation's
// and the quota's health checks: the refusal before a change, and the wait
// after it.
func (n *Node) HealthyButForSpace(ctx context.Context, via []string, op, why string) error {
	_, _, err := n.healthyButForSpace(ctx, via, op, why)
	return err
}

func (n *Node) WaitHealthyButForSpace(ctx context.Context, via []string, within time.Duration, op string) error {
	return n.waitHealthyButForSpace(ctx, via, within, op, nil)
}

// MembersOf exposes membersOf, which takes only an answer of the etcd
// cluster clusterID and passes over the others.
func (n *Node) MembersOf(ctx context.Context, cpIPs []string, clusterID string) (int, error) {
	ms, err := n.membersOf(ctx, cpIPs, "etcd member list", clusterID)
	return len(ms), err
}

// WaitMembersRun exposes the downgrade's wait for every member to run the
// target version.
func (n *Node) WaitMembersRun(ctx context.Context, hosts []string, target string) error {
	return n.waitMembersRun(ctx, hosts, target)
}
