package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"stratum.dev/stratum/internal/nodestate"
)

// lostPublishGrace is how long a new member may show its own publish applied
// while its client port stays silent before startEtcd takes the publish as
// lost: a member that applied the entry itself serves within milliseconds.
const lostPublishGrace = 200 * time.Millisecond

// lostPublishPoll is how often startEtcd looks at a starting new member, and
// bounds each look (a client port that does not answer within it is silent;
// a restart it mistakes costs half a second, not safety).
const lostPublishPoll = 50 * time.Millisecond

// startEtcd starts this node's etcd and waits until it serves.
//
// A member added to the cluster that has never published its name and client
// URLs (a join's or a rejoin's first start) is watched while it starts. Its
// publish can be lost: a leader that commits the publish at once (a one-voter
// cluster needs no round trip) and then builds the snapshot it sends the new
// member from its applied index hands the member a snapshot that already holds
// the publish; the member restores it, never applies its own entry, and etcd
// retries only after its request timeout (5 s plus two election timeouts,
// not configurable), serving no client until then (docs/performance.md). Once
// the member's own view shows its publish applied while its client port stays
// silent for lostPublishGrace, etcd is restarted once: it publishes again from
// a log that is caught up, and serves within a second. The restart is safe:
// the member is still a learner, so no quorum depends on it.
//
// A member that has served before (the node state's Etcd.Started) is not
// started on a data directory without etcd's data (RefuseMissingEtcdData);
// one that serves for the first time is recorded as started, a failure to
// record it an error (etcd runs on; a re-run records it).
func (n *Node) startEtcd(ctx context.Context, st *nodestate.NodeState) error {
	if err := RefuseMissingEtcdData(n.env.Host, st); err != nil {
		return err
	}
	never, err := n.firstStart(ctx, st)
	if err != nil {
		return err
	}
	if err := n.startEtcdService(ctx, st, never); err != nil {
		return err
	}
	if !st.Etcd.Started {
		st.Etcd.Started = true
		if err := nodestate.Save(n.env.Host, st); err != nil {
			// A disk failure is said, never swallowed; a re-run records it
			// (etcd runs on).
			st.Etcd.Started = false
			return fmt.Errorf("start etcd: it serves, but recording that in the node state failed: %w; re-run the same command", err)
		}
	}
	if st.Etcd.ClusterID == "" && st.Etcd.InitialClusterState == "new" {
		n.recordClusterID(ctx, st)
	}
	return nil
}

// firstStart asks the other members, before this node's member starts,
// whether it has ever started, for a member added to an existing cluster
// whose node state does not record a start (a join's or a rejoin's first).
// never is true when they list it as added but never started: its start is
// then watched for a lost publish. Its initial cluster, saved from its add's
// answer, is brought up to the members the cluster has now: etcd starts a
// member without data only when its --initial-cluster lists exactly the
// members the others know ("member count is unequal" otherwise, at every
// start), so a member removed between the add and this start (another
// control plane's reset, `stratum etcd member remove`) would keep this one
// from ever starting. A changed list is saved before the start. Not knowing
// (no member answers, each asked for the read timeout: one on a machine
// that is down stays silent rather than refusing, and the next is asked)
// is never false with the saved list standing: etcd's own check decides.
func (n *Node) firstStart(ctx context.Context, st *nodestate.NodeState) (never bool, err error) {
	if st.Etcd.Started || st.Etcd.InitialClusterState != "existing" {
		return false, nil
	}
	peers := peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)
	if len(peers) == 0 {
		return false, nil
	}
	actx, cancel := context.WithTimeout(ctx, time.Duration(len(peers)+1)*n.readTimeout())
	ms, err := n.membersOf(actx, peers, "etcd member list", st.Etcd.ClusterID)
	cancel()
	if err != nil {
		n.log.Debug("the other members did not answer before this member's start: its start is not watched, and its saved initial cluster stands", "err", err)
		return false, nil
	}
	own := memberByPeerURL(ms, st.Etcd.PeerURL)
	if own == nil || started(own) {
		return false, nil
	}
	now := initialCluster(ms, own.ID, st.Etcd.Name)
	if sameMemberSet(now, st.Etcd.InitialCluster) {
		return true, nil
	}
	n.log.Info("the cluster's membership changed since this member was added: starting it with the members the cluster has now", "was", st.Etcd.InitialCluster, "now", now)
	was := st.Etcd.InitialCluster
	st.Etcd.InitialCluster = now
	if err := nodestate.Save(n.env.Host, st); err != nil {
		st.Etcd.InitialCluster = was
		return false, fmt.Errorf("start etcd: the cluster's membership changed since this member was added (now %s), and recording that in the node state failed: %w; nothing was started: re-run the same command", now, err)
	}
	return true, nil
}

// sameMemberSet reports whether two initial-cluster lists name the same
// name=peerURL pairs, in any order.
func sameMemberSet(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// recordClusterID records in the node state the ID of the etcd cluster this
// node's member serves, for a member that began its cluster (a first
// control plane, a restore's seed) whose state has none: a snapshot restore
// clears it and records the new cluster's once its start is done, so one
// stopped in that start left none, and the reset's guard against the old
// cluster's members and `stratum status` read it. A joined member's state
// is left as it is: its recorded cluster tells a rejoin its state-save is
// done. A member that does not tell it, or a state not saved, is warned
// of: etcd serves either way, and the next start records it.
func (n *Node) recordClusterID(ctx context.Context, st *nodestate.NodeState) {
	s, err := n.etcdStatus(ctx, urlHostOf(st.Etcd.ClientURL))
	if err != nil {
		n.log.Warn("the etcd cluster ID is not recorded in the node state: this node's member did not tell it", "err", err)
		return
	}
	st.Etcd.ClusterID = fmt.Sprintf("%x", s.Header.ClusterId)
	if err := nodestate.Save(n.env.Host, st); err != nil {
		st.Etcd.ClusterID = ""
		n.log.Warn("the etcd cluster ID is not recorded in the node state", "err", err)
	}
}

// startEtcdService is startEtcd's start of the service, watching a new
// member's first start (never: it never started) for a lost publish.
func (n *Node) startEtcdService(ctx context.Context, st *nodestate.NodeState, never bool) error {
	h := n.env.Host
	peer, err := n.peerClient()
	if err != nil || !never {
		if err := h.StartService(ctx, ServiceEtcd); err != nil {
			return fmt.Errorf("start etcd: %w", err)
		}
		return nil
	}
	defer peer.CloseIdleConnections()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- h.StartService(sctx, ServiceEtcd) }()
	tick := time.NewTicker(lostPublishPoll)
	defer tick.Stop()
	var lostSince time.Time
	for {
		select {
		case err := <-started:
			if err != nil {
				return fmt.Errorf("start etcd: %w", err)
			}
			return nil
		case <-tick.C:
		}
		if !n.publishLost(ctx, peer, st) {
			lostSince = time.Time{}
			continue
		}
		if lostSince.IsZero() {
			lostSince = time.Now()
		}
		if time.Since(lostSince) >= lostPublishGrace {
			break
		}
	}
	cancel()
	<-started
	n.log.Info("etcd: the new member's publish was lost in the leader's snapshot; restarting it so that it publishes again", "peerURL", st.Etcd.PeerURL)
	if n.env.Progress != nil {
		n.env.Progress("etcd start: the new member's publish was lost in the leader's snapshot (etcd would retry in about 7 s); restarting etcd")
	}
	if err := h.RestartService(ctx, ServiceEtcd); err != nil {
		return fmt.Errorf("start etcd (restarted after its publish was lost): %w", err)
	}
	return nil
}

// publishLost reports whether this node's member shows its own publish
// applied (its peer port lists it with client URLs) while its client port
// does not answer: the lost publish startEtcd mends.
func (n *Node) publishLost(ctx context.Context, peer *http.Client, st *nodestate.NodeState) bool {
	ctx, cancel := context.WithTimeout(ctx, lostPublishPoll)
	defer cancel()
	published, err := ownViewPublished(ctx, peer, st.Etcd.PeerURL)
	if err != nil || !published {
		return false
	}
	return n.EtcdMemberStatus(ctx, urlHostOf(st.Etcd.ClientURL)).Err != nil
}

// peerMember is a member as etcd's peer port lists it (GET /members).
type peerMember struct {
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

// peerClient is an HTTPS client for etcd peer ports with this node's etcd
// client certificate, dialing through the host.
func (n *Node) peerClient() (*http.Client, error) {
	tlsCfg, err := n.etcdTLS()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DialContext: n.env.Host.DialContext}}, nil
}

// ownViewPublished asks the member at peerURL for its own view of the
// membership (etcd's peer port serves it before the member serves clients)
// and reports whether that view has the member's client URLs: its publish is
// applied there.
func ownViewPublished(ctx context.Context, peer *http.Client, peerURL string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL+"/members", nil)
	if err != nil {
		return false, err
	}
	resp, err := peer.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s/members: %s", peerURL, resp.Status)
	}
	var members []peerMember
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&members); err != nil {
		return false, fmt.Errorf("GET %s/members: %w", peerURL, err)
	}
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			return len(m.ClientURLs) > 0, nil
		}
	}
	return false, nil
}
