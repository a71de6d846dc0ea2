package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/nodestate"
)

// memberAddRetryFor bounds how long MemberAdd keeps retrying what means
// nothing was added (etcd's unhealthy-cluster and too-many-learners
// refusals, a member list no endpoint answered before the add), and how long
// PromoteWhenCaughtUp asks a cluster that does not answer.
const memberAddRetryFor = 30 * time.Second

// memberAddBackoffMax caps the wait between two refused MemberAdd attempts.
const memberAddBackoffMax = time.Second

// promoteInterval is how often PromoteWhenCaughtUp asks again while etcd says
// the learner has not caught up: promotion follows catch-up within it.
const promoteInterval = 25 * time.Millisecond

// promoteRetryFor bounds how long PromoteWhenCaughtUp waits for a learner to
// catch up.
const promoteRetryFor = 2 * time.Minute

// MemberAdd adds newPeerURL to the cluster reachable at any of cpIPs' etcd, as
// a learner, and returns the ETCD_INITIAL_CLUSTER string the new member must
// boot with (state=existing). PromoteLearner makes it a voter once it has
// caught up.
//
// It retries etcd's "unhealthy cluster" refusal (and its "too many learners"
// one, the "member not found" it answers for about half a second after a
// member with the same peer URL was removed, and a member list no endpoint
// answered before any add was sent: addRefusedNothingAdded), and only
// those. etcd's strict reconfiguration check refuses a
// MemberAdd until every member has been connected for a few seconds, so a join
// that follows another one closely, which is what a scripted three-node
// bring-up does, was refused outright and the node exited half-joined. The
// refusal means nothing was added, so retrying it is safe; any other error is
// returned at once. A learner with newPeerURL that never started (an earlier
// add whose answer was lost) is taken as this add; a started member with it is
// an error.
func MemberAdd(cpIPs []string, newName, newPeerURL string) (string, error) {
	n, err := local()
	if err != nil {
		return "", err
	}
	return n.MemberAdd(context.Background(), cpIPs, newName, newPeerURL)
}

// PromoteLearner promotes the learner with peerURL to a voter, through any of
// cpIPs' etcd, as soon as etcd accepts (once it has caught up with the
// leader). A member that is already a voter is success.
func PromoteLearner(cpIPs []string, peerURL string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.PromoteWhenCaughtUp(context.Background(), cpIPs, peerURL)
}

// MemberRemove drops a member by its peer URL (rollback on a failed join),
// through any of cpIPs' etcd. A member already gone is success.
func MemberRemove(cpIPs []string, peerURL string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.MemberRemove(context.Background(), cpIPs, peerURL)
}

// MemberCount is how many members (learners included) the cluster at cpIPs'
// etcd has, as the answering member last saw it.
func MemberCount(cpIPs []string) (int, error) {
	n, err := local()
	if err != nil {
		return 0, err
	}
	return n.MemberCount(context.Background(), cpIPs)
}

// MemberHostsVia returns one host per etcd member, learners included, read
// through any of several endpoints: the host of its first non-loopback client
// URL, or of its first peer URL when it has none. A member added but not yet
// started has published no client URL, and a caller accounting for every
// member must still see it. A member with neither is an error.
func MemberHostsVia(cpIPs []string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.MemberHostsVia(context.Background(), cpIPs)
}

// MemberClientIPs returns the host of every member's client URL (HAProxy
// backends).
func MemberClientIPs(cpIP string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.MemberClientIPsVia(context.Background(), []string{cpIP})
}

// MemberClientIPsVia is MemberClientIPs through any of several endpoints.
func MemberClientIPsVia(cpIPs []string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.MemberClientIPsVia(context.Background(), cpIPs)
}

// JoinState reports, from the etcd at cpIP, how many members (learners
// included) it has and whether a control-plane join bundle is published.
// Both reads are linearizable, so neither is a stale answer from a lagging
// member.
func JoinState(cpIP string) (members int, bundle bool, err error) {
	n, err := local()
	if err != nil {
		return 0, false, err
	}
	return n.JoinState(context.Background(), cpIP)
}

// checkPeerURL refuses what cannot be a member's peer URL before etcd is asked.
func checkPeerURL(peerURL string) error {
	u, err := url.Parse(peerURL)
	if err == nil && (u.Scheme != "https" && u.Scheme != "http") {
		err = fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if err == nil {
		_, _, err = net.SplitHostPort(u.Host)
	}
	if err == nil && (u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil) {
		err = errors.New("a peer URL is scheme://host:port only")
	}
	if err != nil {
		return fmt.Errorf("peer URL %q: %w; nothing was asked of etcd: pass the member's https://<ip>:2380", peerURL, err)
	}
	return nil
}

// initialCluster is the ETCD_INITIAL_CLUSTER of members, the one with id
// under newName: "name=peerURL" for each of every member's peer URLs, as
// etcdctl member add prints it.
func initialCluster(members []*etcdserverpb.Member, id uint64, newName string) string {
	var parts []string
	for _, m := range members {
		name := m.Name
		if m.ID == id {
			name = newName
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	return strings.Join(parts, ",")
}

// memberByPeerURL is the member with peerURL among members, nil for none.
func memberByPeerURL(members []*etcdserverpb.Member, peerURL string) *etcdserverpb.Member {
	for _, m := range members {
		for _, u := range m.PeerURLs {
			if u == peerURL {
				return m
			}
		}
	}
	return nil
}

// started reports whether m has ever started: a started member publishes its
// name and client URLs.
func started(m *etcdserverpb.Member) bool { return m.Name != "" || len(m.ClientURLs) > 0 }

// errMemberStarted is MemberAdd's refusal of a peer URL a member other than
// an unstarted learner has. A join meets it on a machine that was a control
// plane before under the same address and lost its state (re-imaged, a disk
// replaced): its old member must be removed from a running control plane
// first. It names the member as `stratum etcd member remove` takes it.
func errMemberStarted(m *etcdserverpb.Member, peerURL string) error {
	role := "voter"
	switch {
	case m.IsLearner:
		role = "started learner"
	case !started(m):
		role = "voter, never started"
	}
	ref := m.Name
	if ref == "" {
		ref = peerURL
	}
	return fmt.Errorf("etcd member add of %s: member %q (ID %x, %s, client URLs %v) already has that peer URL, and it is not reused. "+
		"This machine's address belonged to a control plane that lost its state (re-imaged, or its disk replaced), or another machine has it: "+
		"if that control plane is gone for good, remove its old member on a running control plane (`stratum etcd member remove %s`), then re-run this join",
		peerURL, m.Name, m.ID, role, m.ClientURLs, ref)
}

// memberByName is the member named name, nil when none is: an unstarted
// member has no name yet.
func memberByName(ms []*etcdserverpb.Member, name string) *etcdserverpb.Member {
	for _, m := range ms {
		if name != "" && m.Name == name {
			return m
		}
	}
	return nil
}

// errMemberNameTaken is MemberAdd's refusal of a member name another member
// (another peer URL) has: two machines with one hostname (cloned VMs all
// called "ubuntu"). etcd would take the add, and the new member's initial
// cluster, two entries under one name, would stop it at its start ("member
// count is unequal"), to be rolled back after a wait that names no hostname.
func errMemberNameTaken(m *etcdserverpb.Member, name, peerURL string) error {
	return fmt.Errorf("etcd member add of %s: member %q (ID %x, peer URLs %v) already has this node's name %q; two members of one name cannot start. "+
		"Give this machine a hostname of its own (`hostnamectl set-hostname`), then re-run this join; "+
		"if that member is this machine's old self under another address, remove it on a running control plane first (`stratum etcd member remove %s`)",
		peerURL, m.Name, m.ID, m.PeerURLs, name, m.Name)
}

// addRefusedNothingAdded reports whether a member add's error is one of
// those that mean nothing was added, which MemberAdd retries: etcd's
// unhealthy-cluster refusal (strict reconfiguration), its too-many-learners
// refusal while another join is in flight, the "member not found" it
// answers for about half a second after a member with the same peer URL was
// removed (seen on v3.7.3: a join re-run right after its own rollback), and
// an attempt whose member list no endpoint answered, so that it sent no add
// (errAddUnanswered). Each retry lists the members first, so an add that did
// land is recognised, never repeated.
func addRefusedNothingAdded(err error) bool {
	return etcdErrIs(err, rpctypes.ErrUnhealthy) || etcdErrIs(err, rpctypes.ErrTooManyLearners) ||
		etcdErrIs(err, rpctypes.ErrMemberNotFound) || errors.Is(err, errAddUnanswered)
}

// errAddUnanswered: no endpoint answered an attempt's member list, so its
// add was never sent and nothing was added. A cluster of two voters answers
// so while one of them restarts (handed to systemd's unit, upgraded, a
// reboot), which is when a playbook joining control planes at once meets it;
// MemberAdd asks again, as for a refusal.
var errAddUnanswered = fmt.Errorf("%w: no endpoint answered the member list before it, so no add was sent", errMemberAddRefused)

// addRefusalReason says why an add that addRefusedNothingAdded retries was
// not made, in the terms of what the caller waits for.
func addRefusalReason(err error) string {
	switch {
	case errors.Is(err, errAddUnanswered):
		return "no member answered its member list: the cluster has no quorum for now (a member restarting?), or none is reachable from here"
	case etcdErrIs(err, rpctypes.ErrTooManyLearners):
		return "another member is still a learner, and etcd allows one at a time: another join is in flight"
	case etcdErrIs(err, rpctypes.ErrUnhealthy):
		return "etcd refuses a new member until enough voters have been connected to its leader for 5 s"
	default:
		return fmt.Sprintf("etcd: %v", err)
	}
}

// MemberAdd is the package-level MemberAdd on this node.
func (n *Node) MemberAdd(ctx context.Context, cpIPs []string, newName, newPeerURL string) (string, error) {
	ic, _, err := n.memberAdd(ctx, cpIPs, newName, newPeerURL)
	return ic, err
}

// errMemberAddRefused matches a member add that etcd (or the lookup before
// it) refused with nothing added: the caller has nothing to roll back.
var errMemberAddRefused = errors.New("member add refused; nothing was added")

// errSignalBeforeAdd: a signal came inside a member-add attempt's window
// before its add RPC was sent; the attempt stops there with nothing added.
var errSignalBeforeAdd = fmt.Errorf("%w: a signal came before the add was sent", errMemberAddRefused)

// memberNotFoundRetries bounds the retries of etcd's transient "member not
// found" answer to an add (about half a second after a removal of the same
// peer URL); past it the answer is taken as final.
const memberNotFoundRetries = 5

// memberAdd is MemberAdd returning the added member's ID too: the one member
// a rollback may remove. Refusals that mean nothing was added are retried
// (see addRefusedNothingAdded) within memberAddRetryFor; any other refusal
// is returned after its one attempt, wrapping errMemberAddRefused when it
// says nothing was added.
func (n *Node) memberAdd(ctx context.Context, cpIPs []string, newName, newPeerURL string) (string, uint64, error) {
	ic, id, _, end, err := n.memberAddWindowed(ctx, cpIPs, newName, newPeerURL)
	end()
	return ic, id, err
}

// memberAddWindowed is memberAdd with each attempt inside a deferral window
// of ctx's run (interrupt.WindowContext): a signal that arrives while an add
// is in flight is held until its answer is known, so an add that landed is
// never abandoned unrecorded. A refused attempt, which added nothing, closes
// its window before the wait for the next, so a signal during that wait
// stops the add there, with nothing added, as one before the add would. An
// add that landed, or an error that may hide one (its answer lost), returns
// with its window still open: wctx is the window's context and end closes
// it, once the caller has recorded the member or rolled it back. On a
// refusal end does nothing and wctx is ctx without its cancellation. A
// signal held during an attempt's lookup, before its add is sent, stops the
// attempt there with nothing added (interrupt.SignalHeld).
func (n *Node) memberAddWindowed(ctx context.Context, cpIPs []string, newName, newPeerURL string) (ic string, id uint64, wctx context.Context, end func(), err error) {
	closed := func() {}
	refused := func(err error) (string, uint64, context.Context, func(), error) {
		return "", 0, context.WithoutCancel(ctx), closed, err
	}
	if err := checkPeerURL(newPeerURL); err != nil {
		return refused(fmt.Errorf("etcd member add of %s: %w: %w", newName, errMemberAddRefused, err))
	}
	if newName == "" {
		return refused(fmt.Errorf("etcd member add of %s: no member name given: %w", newPeerURL, errMemberAddRefused))
	}
	deadline := time.Now().Add(memberAddRetryFor)
	backoff := 100 * time.Millisecond
	notFound := 0
	report := waitReporter{n: n}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return refused(fmt.Errorf("etcd member add of %s: stopped before it (%w); %w", newName, context.Cause(ctx), errMemberAddRefused))
		}
		n.log.Debug("etcd member add attempt", "member", newName, "peerURL", newPeerURL, "attempt", attempt)
		wctx, end := interrupt.WindowContext(ctx)
		ic, id, err := n.memberAddOnce(wctx, cpIPs, newName, newPeerURL)
		if err == nil {
			return ic, id, wctx, end, nil
		}
		if etcdErrIs(err, rpctypes.ErrMemberNotFound) {
			notFound++
		}
		nothingAdded := !errors.Is(err, errAddMayHaveLanded) &&
			(errors.Is(err, errMemberAddRefused) || addRefusedNothingAdded(err) || etcdErrIs(err, rpctypes.ErrPeerURLExist))
		if !nothingAdded {
			return "", 0, wctx, end, err // it may hide an add that landed: the caller rolls back in the window
		}
		end() // nothing was added: a signal held during the attempt stops the add now
		if errors.Is(err, errSignalBeforeAdd) {
			return refused(fmt.Errorf("etcd member add of %s: stopped before it (%w); %w", newName, context.Cause(ctx), errMemberAddRefused))
		}
		if ctx.Err() != nil {
			return refused(fmt.Errorf("etcd member add of %s: stopped after a refused attempt (%w; the refusal: %v); %w", newName, context.Cause(ctx), err, errMemberAddRefused))
		}
		if !addRefusedNothingAdded(err) || notFound > memberNotFoundRetries {
			if errors.Is(err, errMemberAddRefused) {
				return refused(err)
			}
			return refused(fmt.Errorf("%w: %w", errMemberAddRefused, err))
		}
		if time.Now().Add(backoff).After(deadline) {
			if errors.Is(err, errAddUnanswered) {
				return refused(fmt.Errorf("etcd member add of %s (%s): no etcd member answered its last attempt's member list (%d attempts over %s); check that a quorum of members is up and reachable from this node (`stratum etcd health` on a control plane), then run the same command again: %w",
					newName, newPeerURL, attempt, memberAddRetryFor, err))
			}
			return refused(fmt.Errorf("etcd member add of %s (%s): still refused after %d attempts over %s; %w. Check the cluster's health (`stratum etcd health` on a control plane) and its learners (`stratum etcd members`), then run the same command again: %w",
				newName, newPeerURL, attempt, memberAddRetryFor, errMemberAddRefused, err))
		}
		n.log.Info("the member add was not made; nothing was added, retrying", "member", newName, "peerURL", newPeerURL, "attempt", attempt, "in", backoff, "err", err)
		reason := addRefusalReason(err)
		report.waitingBecause(reason, "etcd to accept the member add of %s (%s; nothing was added yet)", newName, reason)
		select {
		case <-ctx.Done():
			return refused(fmt.Errorf("etcd member add of %s: stopped while waiting (%w; last refusal: %v); %w", newName, context.Cause(ctx), err, errMemberAddRefused))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, memberAddBackoffMax)
	}
}

// memberAddOnce is one MemberAdd attempt through the first endpoint that
// answers: look the peer URL up (an earlier add whose answer was lost left an
// unstarted learner with it), then add it as a learner.
func (n *Node) memberAddOnce(ctx context.Context, cpIPs []string, newName, newPeerURL string) (string, uint64, error) {
	var ic string
	var id uint64
	// sent: an add went out through an endpoint before this one, its
	// answer lost (viaEach moves on after a timeout): it may land, so
	// from then on the attempt is the add's, signal or not.
	sent := false
	// sentBefore: an add went out through an endpoint before the one now
	// asked, so whatever this one answers, that add may have landed.
	sentBefore := false
	err := n.viaEach(ctx, cpIPs, "etcd member add of "+newPeerURL, func(ctx context.Context, cli *clientv3.Client, ep string) error {
		sentBefore = sent
		ml, err := n.memberList(ctx, cli)
		if err != nil {
			return fmt.Errorf("etcd member list from %s: %w", ep, err)
		}
		if m := memberByPeerURL(ml.Members, newPeerURL); m != nil {
			if started(m) || !m.IsLearner {
				return fmt.Errorf("%w: %w", errMemberAddRefused, errMemberStarted(m, newPeerURL))
			}
			n.log.Info("etcd learner with this peer URL already added and not started; taking it as this add", "member", newName, "peerURL", newPeerURL, "id", fmt.Sprintf("%x", m.ID))
			ic, id = initialCluster(ml.Members, m.ID, newName), m.ID
			return nil
		}
		if m := memberByName(ml.Members, newName); m != nil {
			return fmt.Errorf("%w: %w", errMemberAddRefused, errMemberNameTaken(m, newName, newPeerURL))
		}
		// The last moment the add can still not happen: a signal held
		// since the attempt's window opened (during the lookup above,
		// seconds when an endpoint does not answer) stops it here, with
		// nothing added, as a signal before the window would have —
		// unless this attempt already sent an add elsewhere.
		if !sent && interrupt.SignalHeld(ctx) {
			return errSignalBeforeAdd
		}
		wctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
		defer cancel()
		sent = true
		resp, err := cli.MemberAddAsLearner(wctx, []string{newPeerURL})
		if err != nil {
			return fmt.Errorf("etcd member add (learner) of %s as %s through %s: %w", newPeerURL, newName, ep, err)
		}
		n.log.Info("etcd learner added", "member", newName, "peerURL", newPeerURL, "id", fmt.Sprintf("%x", resp.Member.ID), "through", ep)
		ic, id = initialCluster(resp.Members, resp.Member.ID, newName), resp.Member.ID
		return nil
	})
	if err != nil && !sent && errors.Is(err, errNoEndpointAnswered) {
		return ic, id, fmt.Errorf("%w: %w", errAddUnanswered, err)
	}
	if err != nil && (sentBefore || sent && interrupt.SignalHeld(ctx)) {
		// A refusal after an add whose answer was lost (a peer URL that
		// exists now, say: that add landed) says nothing about that add;
		// and a held signal stops the join before a retry could find it.
		// The caller must take it as an add that may have landed, and
		// roll it back.
		err = fmt.Errorf("%w (of %s): %w", errAddMayHaveLanded, newPeerURL, err)
	}
	return ic, id, err
}

// errAddMayHaveLanded: an attempt failed after an add it sent went
// unanswered, so that add may have landed, whatever the failure says: it is
// never taken for a refusal that added nothing.
var errAddMayHaveLanded = errors.New("an add sent earlier in this attempt may have landed (its answer was lost)")

// removeOwnMember removes the member a join added: by id when a member has
// it, else only an unstarted learner with peerURL (an add whose answer was
// lost; none is success). A started member or a voter is never removed
// without its id.
func (n *Node) removeOwnMember(ctx context.Context, cpIPs []string, id uint64, peerURL string) error {
	op := fmt.Sprintf("etcd member remove of this join's member (ID %x, %s)", id, peerURL)
	return n.retryMembershipChange(ctx, op, func() error {
		return n.viaEach(ctx, cpIPs, op, func(ctx context.Context, cli *clientv3.Client, ep string) error {
			ml, err := n.memberList(ctx, cli)
			if err != nil {
				return fmt.Errorf("etcd member list from %s: %w", ep, err)
			}
			var m *etcdserverpb.Member
			for _, x := range ml.Members {
				if id != 0 && x.ID == id {
					m = x
				}
			}
			// With no ID, or one of a member gone (a resumed join's journal
			// names the earlier run's member, removed since, while this
			// run's add landed with its answer lost), only an unstarted
			// learner with this node's peer URL can be this join's.
			if x := memberByPeerURL(ml.Members, peerURL); m == nil && x != nil && x.IsLearner && !started(x) {
				m = x
			}
			if m == nil {
				n.log.Info("no member of this join's to remove", "id", fmt.Sprintf("%x", id), "peerURL", peerURL)
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
			defer cancel()
			if _, err := cli.MemberRemove(wctx, m.ID); err != nil && !etcdErrIs(err, rpctypes.ErrMemberNotFound) {
				return fmt.Errorf("%s through %s: %w", op, ep, err)
			}
			n.log.Info("etcd member removed (rollback of this join's add)", "peerURL", peerURL, "id", fmt.Sprintf("%x", m.ID), "through", ep)
			return nil
		})
	})
}

// retryMembershipChange runs f, a removal that looks its member up first,
// until it succeeds or fails with anything but etcd's unhealthy-cluster
// refusal (which means nothing changed) or no endpoint answering (a quorum
// lost for a moment: the rollback of a join whose add went unanswered meets
// exactly that), within memberAddRetryFor. Each run looks the member up
// again, so one removed by an earlier run whose answer was lost is not
// removed twice.
func (n *Node) retryMembershipChange(ctx context.Context, op string, f func() error) error {
	deadline := time.Now().Add(memberAddRetryFor)
	backoff := 100 * time.Millisecond
	report := waitReporter{n: n}
	for {
		err := f()
		unanswered := errors.Is(err, errNoEndpointAnswered)
		if err == nil || !etcdErrIs(err, rpctypes.ErrUnhealthy) && !unanswered {
			return err
		}
		reason := "it refuses while the cluster is not yet healthy"
		if unanswered {
			reason = "no member answered: the cluster has no quorum for now (a member restarting?), or none is reachable from here"
		}
		report.waitingBecause(reason, "etcd to accept the %s (%s: %v)", op, reason, err)
		if time.Now().Add(backoff).After(deadline) {
			if unanswered {
				return fmt.Errorf("%s: no etcd member answered for %s, so whether it was made is not known: `stratum etcd members` on a control plane says; check that a quorum is up and reachable from here, then retry: %w", op, memberAddRetryFor, err)
			}
			return fmt.Errorf("%s: still refused after %s; etcd's membership was not changed: check the cluster's health and retry: %w", op, memberAddRetryFor, err)
		}
		select {
		case <-ctx.Done():
			if unanswered {
				return fmt.Errorf("%s: %w (no etcd member answered: %v); whether it was made is not known: `stratum etcd members` on a control plane says", op, ctx.Err(), err)
			}
			return fmt.Errorf("%s: %w (last refusal: %v); etcd's membership was not changed", op, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, memberAddBackoffMax)
	}
}

// PromoteWhenCaughtUp promotes the learner with peerURL to a voter as soon as
// etcd accepts: etcd refuses a promotion until the learner is in sync with the
// leader, so it asks again every promoteInterval. A member already a voter is
// success; one that is not a member at all is an error. When no member
// answers at all (a cluster of two voters while one restarts has no quorum
// for a few seconds), it asks again for up to memberAddRetryFor, as a member
// add does: a promotion asked twice is one promotion.
func (n *Node) PromoteWhenCaughtUp(ctx context.Context, cpIPs []string, peerURL string) error {
	ctx, cancel := context.WithTimeout(ctx, promoteRetryFor)
	defer cancel()
	op := "etcd promote of learner " + peerURL
	var unansweredSince time.Time
	report := waitReporter{n: n}
	start := time.Now()
	for {
		err := n.promoteOnce(ctx, cpIPs, op, peerURL, start)
		if err == nil || !errors.Is(err, errNoEndpointAnswered) || ctx.Err() != nil {
			return err
		}
		if unansweredSince.IsZero() {
			unansweredSince = time.Now()
		}
		if time.Since(unansweredSince) >= memberAddRetryFor {
			return fmt.Errorf("no member answered for %s: %w", memberAddRetryFor, err)
		}
		report.waiting("the cluster to answer the promotion of learner %s (no member answered: the cluster has no quorum for now (a member restarting?), or none is reachable from here)", peerURL)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", op, ctx.Err(), err)
		case <-time.After(memberAddBackoffMax):
		}
	}
}

// promoteOnce is one PromoteWhenCaughtUp through the first of cpIPs that
// answers, asking again while etcd says the learner has not caught up. Its
// wait ends with ctx: a stop says so, and a deadline (promoteRetryFor, or
// the caller's own shorter one: the operator's pass) says how long the
// promotion, begun at start, waited.
func (n *Node) promoteOnce(ctx context.Context, cpIPs []string, op, peerURL string, start time.Time) error {
	return n.viaEach(ctx, cpIPs, op, func(ctx context.Context, cli *clientv3.Client, ep string) error {
		ml, err := n.memberList(ctx, cli)
		if err != nil {
			return fmt.Errorf("etcd member list from %s: %w", ep, err)
		}
		m := memberByPeerURL(ml.Members, peerURL)
		if m == nil {
			return fmt.Errorf("%s: no member has that peer URL (per %s); nothing was promoted: this node's member was removed from the cluster; `stratum reset` this node, then join it again with a join command", op, ep)
		}
		if !m.IsLearner {
			return nil
		}
		refusals := 0
		report := waitReporter{n: n}
		var refusal error // etcd's last refusal
		// ended is the promotion's end with ctx, in the select or during
		// a request alike.
		ended := func() error {
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("%s: stopped while waiting for the learner to catch up (last refusal: %v); it is still a learner, which the next `stratum up` (or the operator) promotes: %w", op, refusal, ctx.Err())
			}
			return fmt.Errorf("%s: the learner did not catch up within %s (last refusal: %v); it is still a learner: check that its etcd runs and reaches the leader: %w", op, time.Since(start).Round(time.Second), refusal, ctx.Err())
		}
		for {
			wctx, wcancel := context.WithTimeout(ctx, etcdWriteTimeout)
			_, err := cli.MemberPromote(wctx, m.ID)
			wcancel()
			switch {
			case err == nil:
				n.log.Info("etcd learner promoted", "peerURL", peerURL, "id", fmt.Sprintf("%x", m.ID), "refusals", refusals)
				return nil
			case etcdErrIs(err, rpctypes.ErrMemberNotLearner):
				return nil
			case etcdErrIs(err, rpctypes.ErrMemberLearnerNotReady), etcdErrIs(err, rpctypes.ErrUnhealthy),
				etcdErrIs(err, rpctypes.ErrMemberNotEnoughStarted):
				refusals++
				refusal = err
				report.waiting("learner %s to catch up with the leader (etcd: %v)", peerURL, err)
			case ctx.Err() != nil && refusal != nil:
				return ended()
			default:
				return fmt.Errorf("%s through %s: %w", op, ep, err)
			}
			select {
			case <-ctx.Done():
				return ended()
			case <-time.After(promoteInterval):
			}
		}
	})
}

// MemberRemove is the package-level MemberRemove on this node. etcd's
// unhealthy-cluster refusal (nothing removed), and a cluster that does not
// answer, are asked again within 30 s (retryMembershipChange).
func (n *Node) MemberRemove(ctx context.Context, cpIPs []string, peerURL string) error {
	op := "etcd member remove of " + peerURL
	return n.retryMembershipChange(ctx, op, func() error {
		return n.viaEach(ctx, cpIPs, op, func(ctx context.Context, cli *clientv3.Client, ep string) error {
			ml, err := n.memberList(ctx, cli)
			if err != nil {
				return fmt.Errorf("etcd member list from %s: %w", ep, err)
			}
			m := memberByPeerURL(ml.Members, peerURL)
			if m == nil {
				n.log.Info("etcd member already gone", "peerURL", peerURL)
				return nil
			}
			wctx, cancel := context.WithTimeout(ctx, etcdWriteTimeout)
			defer cancel()
			if _, err := cli.MemberRemove(wctx, m.ID); err != nil && !etcdErrIs(err, rpctypes.ErrMemberNotFound) {
				return fmt.Errorf("%s (ID %x) through %s: %w", op, m.ID, ep, err)
			}
			n.log.Info("etcd member removed", "peerURL", peerURL, "id", fmt.Sprintf("%x", m.ID), "through", ep)
			return nil
		})
	})
}

// members is the member list through the first of cpIPs that answers.
func (n *Node) members(ctx context.Context, cpIPs []string, op string) ([]*etcdserverpb.Member, error) {
	return n.membersOf(ctx, cpIPs, op, "")
}

// membersOf is members, taking only an answer of the etcd cluster clusterID
// (in hex, as the node state records it; "" takes any): a member that
// answers for another cluster (the old cluster a snapshot restore left
// running, whose members may still be published) is passed over, and named
// in the error when none answers for this one.
func (n *Node) membersOf(ctx context.Context, cpIPs []string, op, clusterID string) ([]*etcdserverpb.Member, error) {
	var out []*etcdserverpb.Member
	err := n.viaEach(ctx, cpIPs, op, func(ctx context.Context, cli *clientv3.Client, ep string) error {
		ml, err := n.memberList(ctx, cli)
		if err != nil {
			return fmt.Errorf("%s: member list from %s: %w", op, ep, err)
		}
		if got := fmt.Sprintf("%x", ml.Header.GetClusterId()); clusterID != "" && got != clusterID {
			return fmt.Errorf("%s: %s answers for etcd cluster %s, not this node's %s (the old cluster a snapshot restore left?): %w", op, ep, got, clusterID, errOtherCluster)
		}
		out = ml.Members
		return nil
	})
	return out, err
}

// MemberCount is the package-level MemberCount on this node.
func (n *Node) MemberCount(ctx context.Context, cpIPs []string) (int, error) {
	ms, err := n.members(ctx, cpIPs, "etcd member count")
	return len(ms), err
}

// MemberHostsVia is the package-level MemberHostsVia on this node.
func (n *Node) MemberHostsVia(ctx context.Context, cpIPs []string) ([]string, error) {
	ms, err := n.members(ctx, cpIPs, "etcd member hosts")
	if err != nil {
		return nil, err
	}
	var hosts []string
	for _, m := range ms {
		h := ""
		for _, u := range m.ClientURLs {
			if uh := urlHost(u); uh != "" && !isLoopbackHost(uh) {
				h = uh
				break
			}
		}
		if h == "" && len(m.PeerURLs) > 0 {
			h = urlHost(m.PeerURLs[0])
		}
		if h == "" && len(m.ClientURLs) > 0 {
			h = urlHost(m.ClientURLs[0])
		}
		if h == "" {
			return nil, fmt.Errorf("etcd member hosts: member %q (ID %x) has no client or peer URL with a host, so it cannot be placed on any node; remove it (etcdctl member remove %x) if it is stale", m.Name, m.ID, m.ID)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// MemberClientIPsVia is the package-level MemberClientIPsVia on this node: the
// host of each member's first client URL; a member that has not started has
// none, and no backend.
func (n *Node) MemberClientIPsVia(ctx context.Context, cpIPs []string) ([]string, error) {
	ms, err := n.members(ctx, cpIPs, "etcd member client IPs")
	if err != nil {
		return nil, err
	}
	return startedClientIPs(ms), nil
}

// startedClientIPs is the host of each member's first client URL; a member
// that has not started has none and is left out.
func startedClientIPs(ms []*etcdserverpb.Member) []string {
	var ips []string
	for _, m := range ms {
		if h := startedClientIP(m); h != "" {
			ips = append(ips, h)
		}
	}
	return ips
}

// startedClientIP is the IP of a started member's first client URL, "" for
// a member that has not started.
func startedClientIP(m *etcdserverpb.Member) string {
	if len(m.ClientURLs) == 0 {
		return ""
	}
	return urlHost(m.ClientURLs[0])
}

// JoinState is the package-level JoinState on this node.
func (n *Node) JoinState(ctx context.Context, cpIP string) (members int, bundle bool, err error) {
	ep := EtcdEndpoint(cpIP)
	cli, err := n.etcdClient(ep)
	if err != nil {
		return 0, false, err
	}
	defer cli.Close()
	ml, err := n.memberList(ctx, cli)
	if err != nil {
		return 0, false, fmt.Errorf("join state: etcd member list from %s: %w", ep, err)
	}
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	get, err := cli.Get(rctx, JoinBundleEtcdKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, false, fmt.Errorf("join state: read of %s from %s: %w", JoinBundleEtcdKey, ep, err)
	}
	return len(ml.Members), get.Count > 0, nil
}

// OtherVotersCountOnThisMember reports whether this node's etcd member is a
// voter of a cluster with other voters, asked of the member itself: then
// stopping it lowers what the cluster has towards its quorum (a cluster of
// two voters loses it at once, one of three with another down too). The
// supervisor keeps such a member running when the rest of a start fails,
// rather than take the cluster's writes away with it. It returns the
// number of voters too. The member answers from its own view (a
// serializable read): a start fails most often for want of a quorum, which
// a linearizable read needs, and going without the answer stopped the very
// voter the quorum waited for.
func (n *Node) OtherVotersCountOnThisMember(ctx context.Context) (bool, int, error) {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return false, 0, err
	}
	const op = "this member's role"
	var ms []*etcdserverpb.Member
	err = n.viaEach(ctx, []string{urlHostOf(st.Etcd.ClientURL)}, op, func(ctx context.Context, cli *clientv3.Client, ep string) error {
		rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
		defer cancel()
		ml, err := cli.MemberList(rctx, clientv3.WithSerializable())
		if err != nil {
			return fmt.Errorf("%s: its own member list from %s: %w", op, ep, err)
		}
		ms = ml.Members
		return nil
	})
	if err != nil {
		return false, 0, err
	}
	voters, self := 0, false
	for _, m := range ms {
		if m.IsLearner {
			continue
		}
		voters++
		if slices.Contains(m.PeerURLs, st.Etcd.PeerURL) {
			self = true
		}
	}
	return self && voters > 1, voters, nil
}
