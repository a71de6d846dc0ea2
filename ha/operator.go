package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/nodestate"
)

// operatorPromoteWithin bounds one pass's wait for a learner to catch up: a
// learner still behind is left for the next pass, not waited on.
const operatorPromoteWithin = 5 * time.Second

// OperatorPass is one pass of the stratum-operator on a control plane: it
// promotes every etcd learner that has started (a joiner whose own start path
// was interrupted between its start and its promotion is not stranded even
// if that node never runs `stratum up` again), drops the grants of
// bootstrap tokens that are gone or expired (PruneExpiredGrants), so expired
// grants go even when no one mints, and publishes the etcd members for later
// joins (etcdClientURLsAnnotation), so a membership change no start or reset
// published still reaches them. It reports what it did (the learners it
// promoted, the grants it dropped) even when a part failed; errors of the
// parts are joined, one never stopping another.
func (n *Node) OperatorPass(ctx context.Context, cs kubernetes.Interface) (promoted, pruned []string, err error) {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return nil, nil, fmt.Errorf("operator pass: %w", err)
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
		promoted = append(promoted, m.Name)
		n.log.Info("operator promoted a started learner", "member", m.Name, "peerURL", m.PeerURLs[0])
	}
	if cs != nil {
		var perr error
		if pruned, perr = n.PruneGrants(ctx, cs); perr != nil {
			errs = append(errs, fmt.Errorf("operator pass: %w", perr))
		}
		if merr == nil {
			if _, perr := n.publishEtcdMembers(ctx, cs, members); perr != nil {
				errs = append(errs, fmt.Errorf("operator pass: %w", perr))
			}
		}
	}
	return promoted, pruned, errors.Join(errs...)
}
