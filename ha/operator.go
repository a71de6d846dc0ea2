package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/noderelease"
	"stratum.dev/stratum/internal/nodestate"
)

// operatorPromoteWithin bounds one pass's wait for a learner to catch up: a
// learner still behind is left for the next pass, not waited on.
const operatorPromoteWithin = 5 * time.Second

// OperatorReport is what one OperatorPass did, also when a part of it
// failed.
type OperatorReport struct {
	// Promoted names the etcd learners it promoted.
	Promoted []string
	// TokensDeleted is the IDs of the expired join tokens it deleted.
	TokensDeleted []string
	// Pruned is the IDs of the tokens whose grant entries it dropped.
	Pruned []string
	// OwnersDropped is the IDs of the deleted tokens whose owner references
	// it dropped from the shared certificates, and CertsDeleted whether it
	// deleted them, their last token being gone.
	OwnersDropped []string
	CertsDeleted  bool
	// ReleasesForgotten names the control planes whose release records
	// (internal/noderelease) it deleted: records of no etcd member, not
	// renewed for staleReleaseAfter.
	ReleasesForgotten []string
}

// staleReleaseAfter is how long a release record of no etcd member stays
// before an operator pass deletes it: three of a supervisor's renewals, so
// one still running has renewed it (a node joining under that name records
// only once it is a member), and the reset or removal that should have
// deleted it could not reach the cluster.
const staleReleaseAfter = 30 * time.Minute

// OperatorPass is one pass of the stratum-operator on a control plane: it
// promotes every etcd learner that has started (a joiner whose own start path
// was interrupted between its start and its promotion is not stranded even
// if that node never runs `stratum up` again); deletes the join tokens that
// have expired (DeleteExpiredTokens) and drops the grants of bootstrap
// tokens that are gone or expired (PruneExpiredGrants), so expired grants go
// even when no one mints; collects the shared certificates as a garbage
// collector would (CollectSharedCerts), so they do not outlive their last
// token on a cluster that runs no kube-controller-manager; and publishes the
// etcd members for later joins (etcdClientURLsAnnotation), so a membership
// change no start or reset published still reaches them; and deletes the
// release records of control planes that are no etcd member
// (forgetStaleReleases). It reports what
// it did even when a part failed; errors of the parts are joined, one never
// stopping another.
func (n *Node) OperatorPass(ctx context.Context, cs kubernetes.Interface) (OperatorReport, error) {
	var rep OperatorReport
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return rep, fmt.Errorf("operator pass: %w", err)
	}
	self := []string{urlHostOf(st.Etcd.ClientURL)}
	var errs []error
	members, merr := n.members(ctx, self, "operator pass")
	if merr != nil {
		errs = append(errs, merr)
	}
	for _, m := range members {
		if !m.IsLearner || !started(m) || len(m.PeerURLs) == 0 {
			continue // a voter, or a learner whose node has not started it yet
		}
		pctx, cancel := context.WithTimeout(ctx, operatorPromoteWithin)
		perr := n.PromoteWhenCaughtUp(pctx, self, m.PeerURLs[0])
		cancel()
		if perr != nil {
			errs = append(errs, fmt.Errorf("operator pass: learner %s not promoted yet (the next pass retries): %w", m.Name, perr))
			continue
		}
		rep.Promoted = append(rep.Promoted, m.Name)
		n.log.Info("operator promoted a started learner", "member", m.Name, "peerURL", m.PeerURLs[0])
	}
	if cs == nil {
		return rep, errors.Join(errs...)
	}
	var perr error
	if rep.TokensDeleted, perr = n.DeleteExpiredTokens(ctx, cs); perr != nil {
		errs = append(errs, fmt.Errorf("operator pass: %w", perr))
	}
	if rep.Pruned, perr = n.PruneGrants(ctx, cs); perr != nil {
		errs = append(errs, fmt.Errorf("operator pass: %w", perr))
	}
	if rep.OwnersDropped, rep.CertsDeleted, perr = n.CollectSharedCerts(ctx, cs); perr != nil {
		errs = append(errs, fmt.Errorf("operator pass: %w", perr))
	}
	if merr == nil {
		if _, perr := n.publishEtcdMembers(ctx, cs, members); perr != nil {
			errs = append(errs, fmt.Errorf("operator pass: %w", perr))
		}
		if rep.ReleasesForgotten, perr = n.forgetStaleReleases(ctx, cs, members); perr != nil {
			errs = append(errs, fmt.Errorf("operator pass: %w", perr))
		}
	}
	return rep, errors.Join(errs...)
}

// forgetStaleReleases deletes the release records that name no etcd member,
// neither by their node's name nor by their member ID, and were last
// renewed staleReleaseAfter ago or more (by this host's clock): what a reset
// or a member removal that could not reach the cluster left, which
// `stratum upgrade plan` lists as stale. A record renewed meanwhile is kept
// (noderelease.ForgetMember).
func (n *Node) forgetStaleReleases(ctx context.Context, cs kubernetes.Interface, members []*etcdserverpb.Member) ([]string, error) {
	releases, err := noderelease.List(ctx, cs)
	if err != nil {
		return nil, err
	}
	names, ids := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		names[m.Name] = true
		ids[fmt.Sprintf("%x", m.ID)] = true
	}
	now := n.env.Host.Now()
	var forgotten []string
	var errs []error
	for _, node := range noderelease.Nodes(releases) {
		r := releases[node]
		if names[node] || r.MemberID != "" && ids[r.MemberID] || now.Sub(r.Since) < staleReleaseAfter {
			continue
		}
		deleted, err := noderelease.ForgetMember(ctx, cs, node, r.MemberID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			forgotten = append(forgotten, node)
			n.log.Info("operator deleted the release record of a control plane that is no etcd member", "node", node, "renewed", r.Since)
		}
	}
	return forgotten, errors.Join(errs...)
}
