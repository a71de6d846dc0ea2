package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdserverErrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// certsSecret is the Secret in kube-system holding the encrypted shared-cert
// bundle a control-plane join downloads.
const certsSecret = "stratum-certs"

// JoinBundleEtcdKey is where the apiserver stores the stratum-certs Secret,
// the encrypted shared-cert bundle a control-plane join downloads. Its
// existence is what tells an etcd reader that a join can still be made with
// it.
//
// This couples to the apiserver's storage layout, not to any API: "/registry"
// is kube-apiserver's default --etcd-prefix, which staticpod's apiserver args
// do not override, and "secrets/<namespace>/<name>" is how it keys a Secret
// under that prefix. A change to either one makes this key name nothing, and
// the bundle gate then reads every cluster as having no bundle published --
// which is why it is checked against a database written by the etcd this
// repo ships (fixtures/).
const JoinBundleEtcdKey = "/registry/secrets/kube-system/" + certsSecret

// ErrEtcdNoStatus matches an EtcdStorageAt that failed because the member did
// not answer its status request, as opposed to a failure to set up the client
// or to read the membership of a member that did answer.
var ErrEtcdNoStatus = errors.New("etcd status")

// etcdReadTimeout bounds one read (status, alarms, member list) from one
// member: clientv3 waits for a connection until its context ends, so an
// unreachable member costs exactly this much.
const etcdReadTimeout = 2 * time.Second

// etcdWriteTimeout bounds one membership or maintenance request, which goes
// through raft and may be forwarded to the leader.
const etcdWriteTimeout = 5 * time.Second

// EtcdMemberHealth is one member's answer. Err set means the member did not
// answer, which is never treated as healthy.
type EtcdMemberHealth struct {
	// Endpoint is the client URL asked.
	Endpoint string
	// ID is the member's etcd ID; Leader the ID of the leader it knows, 0
	// for none.
	ID, Leader uint64
	// IsLearner reports a learner (not yet a voter).
	IsLearner bool
	// Version is the etcd version the member runs.
	Version string
	// Alarms are the alarms raised by this member: its status errors and
	// the cluster's alarms naming it (or why those could not be listed:
	// alarms go through raft, so a member cut off from its quorum cannot
	// list them). A member that knows no leader is not asked for the
	// cluster's alarms.
	Alarms []string
	// DBSize is the size of the member's database file, DBSizeInUse what of
	// it holds data (the rest is free space only a defragmentation gives
	// back), and DBQuota the size at which the member raises NOSPACE (its
	// --quota-backend-bytes; etcd's 2 GiB default when unset). etcd counts
	// the file's size against the quota.
	DBSize, DBSizeInUse, DBQuota int64
	// Err is why the member did not answer its status request; nil when it
	// did.
	Err error
}

// Healthy reports whether this member answered, knows a leader, and raised no
// alarms of its own.
func (m EtcdMemberHealth) Healthy() bool {
	return m.Err == nil && m.Leader != 0 && len(m.Alarms) == 0
}

// EtcdStorage is the etcd at one address as a rollback needs it: the version
// its data is stored at, how many members its cluster has, and whether a
// downgrade is enabled.
type EtcdStorage struct {
	StorageVersion string
	Members        int
	Downgrading    bool
	// DowngradeTarget is the version an enabled downgrade is taking the
	// cluster to, "" when none is enabled.
	DowngradeTarget string
}

// EtcdMemberStatus asks the etcd at cpIP how it is. A member with no leader is
// reported, not hidden: it is up, it is answering, and it is not part of a
// working quorum.
func EtcdMemberStatus(cpIP string) EtcdMemberHealth {
	n, err := local()
	if err != nil {
		return EtcdMemberHealth{Endpoint: EtcdEndpoint(cpIP), Err: err}
	}
	return n.EtcdMemberStatus(context.Background(), cpIP)
}

// EtcdClusterHealthy fails closed: every named member must answer, must know
// a leader, and every member must name the SAME leader.
//
// The agreement check is the point. Per-member health is satisfied by a split
// brain -- two partitions, each with a leader, each locally convinced it is
// fine -- and a split brain is the one condition under which narrowing etcd's
// trust cluster-wide cannot be walked back.
func EtcdClusterHealthy(cpIPs []string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.EtcdClusterHealthy(context.Background(), cpIPs)
}

// EtcdStorageAt reads the storage version of the etcd member at cpIP, the size
// of its cluster and whether a downgrade is enabled. Both reads are the
// member's own view: a member of a cluster that has lost quorum still answers
// them, so it is not mistaken for one that is down.
func EtcdStorageAt(cpIP string) (EtcdStorage, error) {
	n, err := local()
	if err != nil {
		return EtcdStorage{}, err
	}
	return n.EtcdStorageAt(context.Background(), cpIP)
}

// EtcdMemberStatus is the package-level EtcdMemberStatus on this node: the
// member's Status (its own view, no quorum needed) and the cluster's alarms
// that name it.
func (n *Node) EtcdMemberStatus(ctx context.Context, cpIP string) EtcdMemberHealth {
	ep := EtcdEndpoint(cpIP)
	m := EtcdMemberHealth{Endpoint: ep}
	// A refused connection ends the asking at once: the etcd client would
	// dial the closed port again until the read timeout.
	ctx, down := context.WithCancelCause(ctx)
	defer down(nil)
	cfg, err := n.etcdConfigDialing(func(err error) {
		if errors.Is(err, syscall.ECONNREFUSED) {
			down(fmt.Errorf("%w: %w", errNothingListens, err))
		}
	}, ep)
	if err != nil {
		m.Err = err
		return m
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		m.Err = fmt.Errorf("etcd client for %s: %w", ep, err)
		return m
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	st, err := cli.Status(rctx, ep)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errNothingListens) {
			err = cause
		}
		m.Err = fmt.Errorf("%w of %s: %w", ErrEtcdNoStatus, ep, err)
		return m
	}
	m.ID, m.Leader, m.IsLearner, m.Version = st.Header.GetMemberId(), st.Leader, st.IsLearner, st.Version
	m.DBSize, m.DBSizeInUse, m.DBQuota = st.DbSize, st.DbSizeInUse, st.DbSizeQuota
	for _, e := range st.Errors {
		if e == etcdserverErrors.ErrNoLeader.Error() {
			// What etcd's status adds whenever it names no leader: that is
			// Leader == 0, judged as such, not an alarm.
			continue
		}
		m.Alarms = append(m.Alarms, statusError(e, m.ID))
	}
	if m.Leader == 0 {
		// Unhealthy whatever its alarms; and listing them is a raft request
		// a member without a leader cannot serve: it would wait out the
		// read timeout for nothing.
		return m
	}
	actx, cancel2 := context.WithTimeout(ctx, n.readTimeout())
	defer cancel2()
	al, err := cli.AlarmList(actx)
	if err != nil {
		// Not known to be alarm-free is not healthy; the leader it named is
		// kept, so a split is still reported as one.
		m.Alarms = append(m.Alarms, fmt.Sprintf("%s (%v)", alarmsUnreadable, err))
		return m
	}
	for _, a := range al.Alarms {
		if a.MemberID == m.ID && !slices.Contains(m.Alarms, a.Alarm.String()) {
			m.Alarms = append(m.Alarms, a.Alarm.String())
		}
	}
	return m
}

// statusAlarm is how etcd's status names a raised alarm among its errors
// ("memberID:8686640375938063857 alarm:NOSPACE"): every member's status
// lists every member's alarms.
var statusAlarm = regexp.MustCompile(`^memberID:\s*(\d+)\s+alarm:\s*(\w+)$`)

// statusError is one error of member self's status as its Alarms say it: an
// alarm of its own by its name ("NOSPACE"), another member's as "NOSPACE of
// member 7890abcd" (an alarm caps the whole cluster: while NOSPACE is raised
// no member takes a write), anything else as etcd says it.
func statusError(e string, self uint64) string {
	sm := statusAlarm.FindStringSubmatch(strings.TrimSpace(e))
	if sm == nil {
		return e
	}
	id, err := strconv.ParseUint(sm[1], 10, 64)
	if err != nil {
		return e
	}
	if id == self {
		return sm[2]
	}
	return fmt.Sprintf("%s of member %x", sm[2], id)
}

// errNothingListens marks a member whose client port refused the
// connection: no etcd runs there. EtcdMemberStatus reports it at once.
var errNothingListens = errors.New("nothing listens on the member's client port (its etcd is not running)")

// EtcdClusterHealthy is the package-level EtcdClusterHealthy on this node. The
// members are asked concurrently; the error names every member that did not
// answer, knew no leader, raised an alarm, or named a leader other than the
// one most members name.
func (n *Node) EtcdClusterHealthy(ctx context.Context, cpIPs []string) error {
	_, err := n.EtcdClusterHealth(ctx, cpIPs)
	return err
}

// waitClusterHealthy is EtcdClusterHealthy judged again, every
// clusterRecoveryPoll for up to clusterRecoveryWait, while what makes the
// cluster unhealthy is what a member restarting or an election under way
// shows for a few seconds (healthWaitReason: a member not answering, its
// alarms unread, no leader or another one), saying what it waits for and
// before what; an alarm raised is returned at once, and the verdict after
// the wait says that it waited.
func (n *Node) waitClusterHealthy(ctx context.Context, cpIPs []string, before string) error {
	report := waitReporter{n: n}
	deadline := time.Now().Add(clusterRecoveryWait)
	for {
		health, err := n.EtcdClusterHealth(ctx, cpIPs)
		reason := healthWaitReason(health)
		switch {
		case err == nil || reason == "":
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("%w (stopped while it waited: %w)", err, context.Cause(ctx))
		case !time.Now().Before(deadline):
			return fmt.Errorf("%w (judged again for %s: still so)", err, clusterRecoveryWait)
		}
		report.waitingBecause(reason, "the cluster's etcd to become healthy %s (%s)", before, reason)
		select {
		case <-ctx.Done():
		case <-time.After(clusterRecoveryPoll):
		}
	}
}

// EtcdClusterHealth asks every named member for its status at once and
// returns the answers together with EtcdClusterHealthy's verdict on them
// (nil when healthy), so a caller can show, or check, what the verdict was
// based on.
func (n *Node) EtcdClusterHealth(ctx context.Context, cpIPs []string) ([]EtcdMemberHealth, error) {
	if len(cpIPs) == 0 {
		return nil, errors.New("etcd cluster health: no members named; nothing was checked")
	}
	res := make([]EtcdMemberHealth, len(cpIPs))
	var wg sync.WaitGroup
	for i, ip := range cpIPs {
		wg.Go(func() { res[i] = n.EtcdMemberStatus(ctx, ip) })
	}
	wg.Wait()
	return res, clusterVerdict(res)
}

// leaderVotes counts, for each leader the answering members name, how many
// name it.
func leaderVotes(res []EtcdMemberHealth) map[uint64]int {
	votes := map[uint64]int{}
	for _, m := range res {
		if m.Err == nil && m.Leader != 0 {
			votes[m.Leader]++
		}
	}
	return votes
}

// likeliestLeader is the leader most votes name (the lowest ID among
// equals), 0 when none names one.
func likeliestLeader(votes map[uint64]int) uint64 {
	var leader uint64
	best := -1
	for id, v := range votes {
		if v > best || (v == best && id < leader) {
			leader, best = id, v
		}
	}
	return leader
}

// clusterVerdict is EtcdClusterHealthy's judgement of the members' answers.
func clusterVerdict(res []EtcdMemberHealth) error {
	votes := leaderVotes(res)
	leader := likeliestLeader(votes)
	var problems []string
	for _, m := range res {
		switch {
		case m.Err != nil:
			problems = append(problems, fmt.Sprintf("%s did not answer: %v", m.Endpoint, m.Err))
		case m.Leader == 0:
			problems = append(problems, fmt.Sprintf("%s (member %x) knows no leader", m.Endpoint, m.ID))
		case m.Leader != leader:
			problems = append(problems, fmt.Sprintf("%s (member %x) names leader %x, others %x", m.Endpoint, m.ID, m.Leader, leader))
		}
		if m.Err == nil && len(m.Alarms) > 0 {
			problems = append(problems, fmt.Sprintf("%s (member %x) raised alarms %v%s", m.Endpoint, m.ID, m.Alarms, alarmAdvice(m.Alarms)))
		}
	}
	if len(votes) > 1 {
		problems = append(problems, fmt.Sprintf("members name %d different leaders (split leadership)", len(votes)))
	}
	if len(problems) > 0 {
		advice := "wait for it to recover (heal the network, restart or clear the named members) and check again"
		if slices.ContainsFunc(res, func(m EtcdMemberHealth) bool { return m.Err != nil }) {
			advice += "; a member that did not answer because its control plane is gone for good (a dead machine, or one replaced at another address) does not recover: remove it with `stratum etcd member remove NAME` on a running control plane (`stratum etcd members` names each member with its address)"
		}
		return fmt.Errorf("etcd cluster is not healthy: %s; %s", strings.Join(problems, "; "), advice)
	}
	return nil
}

// alarmsUnreadable begins the alarm a member's health carries when the
// member named a leader but its alarm list went unanswered (a raft request,
// which a member that just lost its quorum cannot serve).
const alarmsUnreadable = "alarms unreadable"

// healthWaitReason is why members' answers that fail clusterVerdict may pass
// a few seconds later: the members that did not answer, knew no leader or
// named another than most (a member restarting, an election under way), in
// the order given. It is "" when waiting cannot cure the verdict: an alarm
// raised (NOSPACE, CORRUPT) is cleared by no wait, and members that agree on
// a leader and raised none fail nothing waiting would change.
func healthWaitReason(res []EtcdMemberHealth) string {
	leader := likeliestLeader(leaderVotes(res))
	var why []string
	for _, m := range res {
		for _, a := range m.Alarms {
			if m.Err == nil && !strings.HasPrefix(a, alarmsUnreadable) {
				return ""
			}
		}
		switch {
		case m.Err != nil:
			why = append(why, m.Endpoint+" does not answer")
		case m.Leader == 0:
			why = append(why, m.Endpoint+" knows no leader")
		case m.Leader != leader:
			why = append(why, m.Endpoint+" names another leader than most")
		case len(m.Alarms) > 0:
			why = append(why, m.Endpoint+"'s alarms went unread")
		}
	}
	return strings.Join(why, "; ")
}

// alarmAdvice says what clears an etcd alarm, which no wait or restart does:
// NOSPACE (the backend reached its quota; every write is refused, Lease
// renewals with them, so the VIP is held nowhere) and CORRUPT.
func alarmAdvice(alarms []string) string {
	var advice []string
	if slices.ContainsFunc(alarms, isNoSpace) {
		advice = append(advice, "NOSPACE stays until the space is freed and the alarm disarmed: `stratum etcd defrag` compacts the history, defragments every member one at a time and disarms it")
	}
	if slices.ContainsFunc(alarms, func(a string) bool { return strings.HasPrefix(a, "CORRUPT") }) {
		advice = append(advice, "CORRUPT means a member's data differs from the others': take the named member out (`stratum etcd member remove`) and rejoin it with empty data (`stratum etcd rejoin --server <a healthy member's IP>` on it)")
	}
	if len(advice) == 0 {
		return ""
	}
	return " (" + strings.Join(advice, "; ") + ")"
}

// isNoSpace reports whether a member's alarm is a NOSPACE alarm, its own or
// another member's (statusError).
func isNoSpace(alarm string) bool { return strings.HasPrefix(alarm, "NOSPACE") }

// EtcdStorageAt is the package-level EtcdStorageAt on this node. The member
// count is a serializable member list, so a member without quorum answers it.
func (n *Node) EtcdStorageAt(ctx context.Context, cpIP string) (EtcdStorage, error) {
	ep := EtcdEndpoint(cpIP)
	cli, err := n.etcdClient(ep)
	if err != nil {
		return EtcdStorage{}, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	st, err := cli.Status(rctx, ep)
	if err != nil {
		return EtcdStorage{}, fmt.Errorf("%w of %s: %w; the member may be down or unreachable", ErrEtcdNoStatus, ep, err)
	}
	ml, err := cli.MemberList(rctx, clientv3.WithSerializable())
	if err != nil {
		return EtcdStorage{}, fmt.Errorf("etcd member list from %s (its status answered): %w", ep, err)
	}
	s := EtcdStorage{StorageVersion: st.StorageVersion, Members: len(ml.Members)}
	if d := st.DowngradeInfo; d != nil && d.Enabled {
		s.Downgrading, s.DowngradeTarget = true, d.TargetVersion
	}
	return s, nil
}

// etcdErrIs reports whether err is etcd's error target: target itself, a
// client-side rpctypes value or a gRPC status with exactly its description,
// or (an answer kept only as text) a text holding that description whole.
// A description that only begins another is no match: etcd's "can only
// promote a learner member" begins its "... which is in sync with leader",
// and taking that refusal for the member being a voter already ended a
// promotion as done while its member was still a learner.
func etcdErrIs(err, target error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, target) {
		return true
	}
	desc := rpctypes.ErrorDesc(target)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Error() == desc
	}
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) && gs.GRPCStatus() != nil {
		return gs.GRPCStatus().Message() == desc
	}
	return holdsWhole(err.Error(), desc)
}

// holdsWhole reports whether text holds desc not continued by more of a
// longer description: followed by its end or by punctuation that ends it
// (")", ";", ":", a quote or a line's end), not by a word or a comma.
func holdsWhole(text, desc string) bool {
	for rest := text; ; {
		i := strings.Index(rest, desc)
		if i < 0 {
			return false
		}
		rest = rest[i+len(desc):]
		if rest == "" || strings.ContainsRune(");:\"'\n", rune(rest[0])) {
			return true
		}
	}
}

// unreachable reports whether err means the endpoint did not answer (so
// another endpoint may), rather than that etcd answered with a refusal.
func unreachable(err error) bool {
	if etcdErrIs(err, rpctypes.ErrUnhealthy) { // a refusal, though its gRPC code is Unavailable
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	// The client turns etcd's known answers into rpctypes values, which
	// carry their code but no gRPC status: a member stopping ("server
	// stopped") or between leaders ("leader changed") did not answer.
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) && ee.Code() == codes.Unavailable {
		return true
	}
	return etcdErrIs(err, rpctypes.ErrNoLeader) || etcdErrIs(err, rpctypes.ErrTimeout) ||
		etcdErrIs(err, rpctypes.ErrTimeoutDueToLeaderFail) || etcdErrIs(err, rpctypes.ErrTimeoutDueToConnectionLost) ||
		strings.Contains(err.Error(), notGRPCAnswer)
}

// notGRPCAnswer is grpc-go's text for an answer that is no gRPC response. An
// etcd member stopping (a control plane restarting) can give one: its HTTP
// server still takes a request on a kept-alive connection once its gRPC
// server has stopped, whose ServeHTTP then returns without answering, and
// net/http sends 200 OK with no content type. It is that member not
// answering, not a refusal: another member, or the same one once back, is
// asked (met by TestClientsThroughVIP: a join's promotion through a member
// restarted under it failed with "unexpected HTTP status code received from
// server: 200 (OK); malformed header: missing HTTP content-type").
const notGRPCAnswer = "malformed header: missing HTTP content-type"

// endpointFailures collects which endpoints failed and why, for the error of
// an operation that tried several.
type endpointFailures struct {
	what  []string
	last  error
	tried int
	// local: an endpoint failed here, before it was asked (no client:
	// this node's credentials), which asking again does not mend.
	local bool
}

func (f *endpointFailures) add(ep string, err error) {
	f.what = append(f.what, ep+": "+err.Error())
	f.last = err
	f.tried++
}

// addLocal adds an endpoint that failed here, before it was asked.
func (f *endpointFailures) addLocal(ep string, err error) {
	f.add(ep, err)
	f.local = true
}

func (f *endpointFailures) err(op string) error {
	if f.tried == 0 {
		return fmt.Errorf("%s: no etcd endpoints given; nothing was asked of etcd", op)
	}
	// The same words either way; the sentinel only when every endpoint
	// was asked, since one that could not be asked from here is not
	// mended by asking again.
	unanswered := errNoEndpointAnswered
	if f.local {
		unanswered = errors.New(errNoEndpointAnswered.Error())
	}
	return fmt.Errorf("%s: %w (%s); nothing was changed through them -- check that a quorum of members is up and reachable from this node: %w",
		op, unanswered, strings.Join(f.what, "; "), f.last)
}

// errOtherCluster is an endpoint's answer for another etcd cluster than the
// one asked about (the old cluster a snapshot restore left running, whose
// members the cluster may still publish): viaEach passes over it, as over
// one that did not answer, and asks the next.
var errOtherCluster = errors.New("an answer for another etcd cluster")

// errNoEndpointAnswered matches an operation through viaEach that every
// endpoint was asked and none answered: each unreachable, without a quorum
// to answer, or a learner (which answers nothing that needs a voter). One
// that could not be asked from here (no client) does not match.
var errNoEndpointAnswered = errors.New("no etcd endpoint answered")

// viaEach runs f with a client on each cpIP's endpoint in turn until one
// answers: an endpoint that fails to answer (unreachable), that cannot (a
// learner refuses what needs a voter: a joiner's own member, asked after its
// peers), or that answers for another cluster (errOtherCluster) moves on to
// the next; any other error from f is returned at once.
func (n *Node) viaEach(ctx context.Context, cpIPs []string, op string, f func(ctx context.Context, cli *clientv3.Client, ep string) error) error {
	var fails endpointFailures
	for _, ip := range cpIPs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		ep := EtcdEndpoint(ip)
		cli, err := n.etcdClient(ep)
		if err != nil {
			fails.addLocal(ep, err)
			continue
		}
		err = f(ctx, cli, ep)
		cli.Close()
		if err == nil {
			return nil
		}
		if ctx.Err() == nil && etcdErrIs(err, rpctypes.ErrGRPCNotSupportedForLearner) {
			n.log.Debug("etcd endpoint is a learner, which cannot answer this", "op", op, "endpoint", ep, "err", err)
			fails.add(ep, fmt.Errorf("a learner, which cannot answer this: %w", err))
			continue
		}
		if ctx.Err() == nil && errors.Is(err, errOtherCluster) {
			n.log.Debug("etcd endpoint answers for another cluster", "op", op, "endpoint", ep, "err", err)
			fails.add(ep, err)
			continue
		}
		if ctx.Err() == nil && unreachable(err) {
			n.log.Debug("etcd endpoint did not answer", "op", op, "endpoint", ep, "err", err)
			fails.add(ep, err)
			continue
		}
		return err
	}
	return fails.err(op)
}

// memberList is a linearizable member list with the read timeout.
func (n *Node) memberList(ctx context.Context, cli *clientv3.Client) (*clientv3.MemberListResponse, error) {
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	return cli.MemberList(rctx)
}

// urlHost is the host part of a URL ("" when it has none).
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// isLoopbackHost reports whether h is a loopback IP or "localhost".
func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
