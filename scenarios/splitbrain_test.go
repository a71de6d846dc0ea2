package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"pgregory.net/rapid"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/sim"
)

// splitBrain is one check of TestSplitBrain: an etcd-only cluster of 3 or 5
// members under drawn partitions, isolations, member stops, crashes and
// restarts and leadership transfers, with an observer that reaches every
// member whatever the network (an operator's `stratum etcd health`).
//
// The join's gate is what is checked for "a join attempted meanwhile refuses
// before its member-add": PrepareControlPlaneJoin calls EtcdClusterHealthy on
// the published endpoints (BeforeRuntimeConfigs) before it writes its intent
// or adds a member, and refuses with ErrClusterUnhealthy when it fails. Each
// gate sample below is the exact call a join would make at that moment, from
// an observer that is not itself cut off (a cut-off joiner is refused at
// discovery already, which proves nothing about the gate).
type splitBrain struct {
	t     *rapid.T
	ctx   context.Context
	c     *sim.Cluster
	hosts []*sim.Host
	ips   []string
	obs   *ha.Node
	// views are direct clients per member (ground truth), kv one on all.
	views map[string]*clientv3.Client
	kv    *clientv3.Client
	// written are sentinel keys whose put succeeded; maybe are keys whose
	// put failed (written or not, never another value).
	written, maybe map[string]string
	seq            int
	// faulted says a partition or isolation is in force.
	faulted bool
	// stats, for the log: gate samples taken, refused, and truth samples
	// that showed members disagreeing.
	samples, refused, splits int
	// heardSplits are gate samples whose own answers (bracketed) are known
	// and disagree: what a gate without its agreement checks would pass.
	heardSplits int
	// lastGate is the last gate call's error and probe, for the event log.
	lastGate  error
	lastProbe *probe
	// lastAgreed says the last gate call's truth samples, before and after
	// it, both had every member answering and naming one leader.
	lastAgreed bool
	// changedAt is when the last action that may have changed the cluster
	// ended (the cluster's start, at first).
	changedAt time.Time
	// agreedEarly counts checks that ended at their first sample on a
	// whole cluster whose members agreed.
	agreedEarly int
	// load is the clients' workload, checked for linearizability at the end.
	load *workload
	// plant is TestPlantedStall's fault and bug; zero in TestSplitBrain.
	plant stallPlant
}

// stallPlant is a planted bug and the fault that shows it: the gate's
// per-member read timeout replaced (a gate that waits on a member for ever)
// and members whose dial reaches a listener that never answers.
type stallPlant struct {
	readTimeout time.Duration
	stalled     map[string]string // member dial address -> black hole
}

func TestSplitBrain(t *testing.T) {
	var mu sync.Mutex
	var samples, refused, splits, heardSplits, agreedEarly int
	var histories []string
	t.Cleanup(func() {
		t.Logf("SplitBrain: %d gate samples, %d refused, %d with the members' own answers split or silent, %d refused on answers known to disagree; %d checks ended at their first sample on a whole cluster that agreed", samples, refused, splits, heardSplits, agreedEarly)
		for _, h := range histories {
			t.Logf("SplitBrain: %s", h)
		}
	})
	property(t, func(rt *rapid.T) {
		s := newSplitBrain(rt)
		// Every check reads the gate once across a leadership change.
		s.changes(s.skewedGate)(rt)
		rt.Repeat(explored.actions(map[string]func(*rapid.T){
			"partitionLeaderMinority": s.changes(s.partitionLeaderMinority),
			"partitionDrawn":          s.changes(s.partitionDrawn),
			"isolate":                 s.changes(s.isolate),
			"restartMember":           s.changes(s.restartMember),
			"startStopped":            s.changes(s.startStopped),
			"transferLeadership":      s.changes(s.transferLeadership),
			"skewedGate":              s.changes(s.skewedGate),
			"heal":                    s.changes(s.heal),
			"write":                   s.write,
			"":                        s.check,
		}))
		summary := s.converge()
		mu.Lock()
		samples, refused, splits, heardSplits, agreedEarly = samples+s.samples, refused+s.refused, splits+s.splits, heardSplits+s.heardSplits, agreedEarly+s.agreedEarly
		histories = append(histories, summary)
		mu.Unlock()
	})
}

func newSplitBrain(t *rapid.T) *splitBrain {
	n := rapid.SampledFrom([]int{3, 5}).Draw(t, "members")
	// 50 ms elections (half etcd's integration-test timing): the property
	// is about the order of answers, not their pace, and each step waits
	// out an election; the join properties keep the simulator's default
	// timing.
	c := startCluster(t, sim.Config{ControlPlanes: n, Etcd: sim.LoopbackEtcdTiming})
	s := &splitBrain{t: t, ctx: checkCtx(t, 10*time.Minute), c: c, hosts: c.Hosts(), views: map[string]*clientv3.Client{},
		written: map[string]string{}, maybe: map[string]string{}}
	s.ips = ipsOf(s.hosts...)
	s.obs = observerOn(s.hosts[0], c.Config().Etcd)
	for _, h := range s.hosts {
		cli, err := directEtcd(h)
		if err != nil {
			t.Fatalf("etcd client for %s: %v", h.Name(), err)
		}
		t.Cleanup(func() { cli.Close() })
		s.views[h.Name()] = cli
	}
	s.kv = s.clientOnAll()
	if ok, last := eventually(s.ctx, 30*time.Second, func() (bool, string) {
		err := s.obs.EtcdClusterHealthy(s.ctx, s.ips)
		return err == nil, fmt.Sprint(err)
	}); !ok {
		t.Fatalf("a fresh cluster of %d never reported healthy: %s", n, last)
	}
	// Three clients on every member's endpoint, as an application's etcd
	// client is configured; each dials directly, so a partition leaves it
	// talking to whichever side its connection reaches.
	stores := make([]kvStore, 3)
	for i := range stores {
		stores[i] = etcdKV{cli: s.clientOnAll(), prefix: workloadPrefix}
	}
	s.load = startWorkload(t, s.ctx, c.Events(), "etcd", s.clientBound(), stores...)
	s.changedAt = time.Now()
	return s
}

// clientOnAll is an etcd client on every member's endpoint, dialing
// directly, closed when the check ends.
func (s *splitBrain) clientOnAll() *clientv3.Client {
	cli, err := directEtcd(s.hosts[0], clientURLsOf(s.hosts...)...)
	if err != nil {
		s.t.Fatalf("etcd client on every member: %v", err)
	}
	s.t.Cleanup(func() { cli.Close() })
	return cli
}

// workloadPrefix is where the etcd workload's keys live.
const workloadPrefix = "workload/"

// truth is every member's own answer, asked directly.
func (s *splitBrain) truth() map[string]memberView {
	out := make(map[string]memberView, len(s.hosts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range s.hosts {
		wg.Go(func() {
			v := s.viewOfHost(h)
			mu.Lock()
			out[h.Name()] = v
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// clientBound bounds one sentinel read or write and one leadership move:
// the gate's read timeout (readTimeoutFor). A read or write that does not
// answer within it found no quorum (a write is then maybe-written, a read
// judges nothing); a move not done within it failed (raft gives a transfer
// one election timeout).
func (s *splitBrain) clientBound() time.Duration {
	return readTimeoutFor(s.c.Config().Etcd)
}

// viewOfHost is h's member's own answer; a member whose etcd is not running
// does not answer, without waiting out a client timeout to learn it.
func (s *splitBrain) viewOfHost(h *sim.Host) memberView {
	if !h.EtcdRunning() {
		return memberView{Err: errNotRunning}
	}
	return viewOf(s.ctx, s.views[h.Name()], h.ClientURL())
}

// errNotRunning is a stopped member's answer.
var errNotRunning = errors.New("etcd is not running")

// disagreement says what in a truth sample makes the cluster unfit for a
// member-add: a member that does not answer, knows no leader, or names a
// leader other members do not. "" when they all agree.
func disagreement(views map[string]memberView) string {
	leaders := map[uint64][]string{}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(views)) {
		v := views[name]
		switch {
		case v.Err != nil:
			problems = append(problems, name+" does not answer")
		case v.Leader == 0:
			problems = append(problems, name+" knows no leader")
		default:
			leaders[v.Leader] = append(leaders[v.Leader], name)
		}
	}
	if len(leaders) > 1 {
		var parts []string
		for l, names := range leaders {
			parts = append(parts, fmt.Sprintf("%v name %x", names, l))
		}
		slices.Sort(parts)
		problems = append(problems, "split leadership: "+strings.Join(parts, ", "))
	}
	return strings.Join(problems, "; ")
}

// sameViews reports whether two truth samples name the same leaders in the
// same terms and the same members answering.
func sameViews(a, b map[string]memberView) bool {
	for k, x := range a {
		y := b[k]
		if (x.Err == nil) != (y.Err == nil) || x.Leader != y.Leader || x.Term != y.Term {
			return false
		}
	}
	return true
}

// gate takes one sample of the join's health gate between two samples of the
// members' own answers. The gate passing is a violation when both samples
// around it show the same disagreement (the state was stable across the
// gate's call) or a member's etcd was stopped throughout.
func (s *splitBrain) gate(slow *sim.Host, delay time.Duration) string {
	return s.gateHooked(slow, delay, nil)
}

// gateHooked is gate with the probe's onClose hook.
func (s *splitBrain) gateHooked(slow *sim.Host, delay time.Duration, onClose func(int)) string {
	explored.invariant("the join's gate refuses members that disagree")
	downBefore := s.stopped()
	before := s.truth()
	p, err := s.probedGateHooked(slow, delay, onClose)
	s.lastGate, s.lastProbe = err, p
	after := s.truth()
	downAfter := s.stopped()
	s.samples++
	d := disagreement(before)
	s.lastAgreed = d == "" && disagreement(after) == ""
	if d != "" {
		s.splits++
	}
	if err != nil {
		s.refused++
		if heard, ok := p.heard(5 * time.Second); ok && len(heard) == len(s.hosts) && disagreement(heard) != "" {
			s.heardSplits++
		}
		return ""
	}
	if d := judgedDisagreement(p.answers); d != "" {
		return fmt.Sprintf("the join's health gate (EtcdClusterHealthy) passed on answers that disagree: %s; a join would go on to its member-add", d)
	}
	for _, name := range downBefore {
		if slices.Contains(downAfter, name) {
			return fmt.Sprintf("the join's health gate (EtcdClusterHealthy) passed while %s's etcd was stopped: a join would go on to its member-add", name)
		}
	}
	if d != "" && sameViews(before, after) {
		return fmt.Sprintf("the join's health gate (EtcdClusterHealthy) passed while the members, asked before and after, stably disagreed: %s (%v); a join would go on to its member-add", d, before)
	}
	if heard, ok := p.heard(5 * time.Second); ok && len(heard) == len(s.hosts) {
		byName := map[string]memberView{}
		for _, h := range s.hosts {
			byName[h.Name()] = heard[hostPort(h.ClientURL())]
		}
		if d := disagreement(byName); d != "" {
			return fmt.Sprintf("the join's health gate (EtcdClusterHealthy) passed on the answers it was given, which disagree: %s (%v; each member's answer bracketed by its own status just before the gate dialed it and just after the gate closed the connection, same term and leader both times); a join would go on to its member-add", d, byName)
		}
	}
	return ""
}

// stopped are the hosts whose etcd is not running.
func (s *splitBrain) stopped() []string {
	var out []string
	for _, h := range s.hosts {
		if !h.EtcdRunning() {
			out = append(out, h.Name())
		}
	}
	return out
}

// check is the invariant after every action: the gate sampled until a window
// long enough to span an election (the election timeout, randomized up to
// twice that, and a fifth more) has passed since the last action that
// changed the cluster, at least once, and, read meanwhile, every sentinel a
// member reads has the value written. After an action that changed nothing
// (a write) whose cluster was sampled over a whole window already, one
// sample is the check.
//
// On a whole cluster (no partition in force, every member running) whose
// members agree, before and after its first sample, on one leader, that
// sample is the check too: with no fault in force no election is pending (a
// follower hears the leader every heartbeat, and a member that was cut off
// and has not yet heard it shows as knowing no leader or naming another),
// so the rest of the window would sample the same agreement. A cluster with
// a fault in force, or one caught disagreeing, is sampled over the window.
func (s *splitBrain) check(t *rapid.T) {
	end := s.changedAt.Add(s.window())
	whole := !s.faulted && len(s.stopped()) == 0
	// The sentinel read runs beside the gate's samples, bounded by their
	// end (at least sentinelReadFloor): a healthy read answers within a
	// round trip to the leader, and one that finds no quorum judges nothing
	// whenever it gives up.
	rctx, cancel := context.WithTimeout(s.ctx, max(time.Until(end), sentinelReadFloor))
	defer cancel()
	type answer struct {
		got map[string]string
		err error
	}
	read := make(chan answer, 1)
	go func() {
		got, err := s.readSentinels(rctx)
		read <- answer{got, err}
	}()
	for first := true; first || time.Now().Before(end); first = false {
		if f := s.gate(nil, 0); f != "" {
			t.Fatal(f)
		}
		if time.Now().Before(end) && whole && s.lastAgreed && s.lastGate == nil {
			s.agreedEarly++
			break
		}
	}
	if a := <-read; a.err == nil {
		s.judgeSentinels(a.got)
	}
}

// sentinelReadFloor bounds a check's sentinel read from below: a
// linearizable read on loopback takes a round trip to the leader, a
// millisecond or two.
const sentinelReadFloor = 30 * time.Millisecond

// window is how long the gate is sampled after a change: the election
// timeout, randomized up to twice that, and a fifth more.
func (s *splitBrain) window() time.Duration { return s.c.Config().Etcd.Election() * 12 / 5 }

// changes marks the end of an action that may change the cluster (its
// topology, its members' running, its leader): the check after it samples
// the gate over a whole window from then.
func (s *splitBrain) changes(action func(*rapid.T)) func(*rapid.T) {
	return func(t *rapid.T) {
		defer func() { s.changedAt = time.Now() }()
		action(t)
	}
}

// read reads the sentinels with a linearizable get, bounded like any
// sentinel read; one that answers must return what was written (a
// maybe-written key may be absent).
func (s *splitBrain) read() {
	rctx, cancel := context.WithTimeout(s.ctx, s.clientBound())
	defer cancel()
	if got, err := s.readSentinels(rctx); err == nil {
		s.judgeSentinels(got)
	}
	// An error is no quorum reachable: nothing to judge.
}

// readSentinels is a linearizable get of every sentinel.
func (s *splitBrain) readSentinels(ctx context.Context) (map[string]string, error) {
	resp, err := s.kv.Get(ctx, "sentinel/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got, nil
}

// judgeSentinels fails the check unless a read that answered holds every
// acknowledged sentinel and nothing never written.
func (s *splitBrain) judgeSentinels(got map[string]string) {
	explored.invariant("acknowledged sentinels read back")
	for k, v := range s.written {
		if got[k] != v {
			s.t.Fatalf("sentinel %s: read %q, want %q (written earlier, acknowledged)", k, got[k], v)
		}
	}
	for k, v := range got {
		if w, ok := s.written[k]; ok && w == v {
			continue
		}
		if w, ok := s.maybe[k]; ok && w == v {
			continue
		}
		s.t.Fatalf("sentinel %s reads %q, which was never written", k, v)
	}
}

// leader is the member most members name, "" when none.
func (s *splitBrain) leader() string {
	votes := map[uint64]int{}
	for _, v := range s.truth() {
		if v.Err == nil && v.Leader != 0 {
			votes[v.Leader]++
		}
	}
	var best uint64
	for id, n := range votes {
		if n > votes[best] {
			best = id
		}
	}
	for _, h := range s.hosts {
		if v := s.viewOfHost(h); v.Err == nil && v.ID == best && best != 0 {
			return h.Name()
		}
	}
	return ""
}

func (s *splitBrain) names() []string {
	var out []string
	for _, h := range s.hosts {
		out = append(out, h.Name())
	}
	return out
}

// partitionLeaderMinority strands the current leader in a minority of drawn
// size with drawn companions.
func (s *splitBrain) partitionLeaderMinority(t *rapid.T) {
	leader := s.leader()
	if leader == "" {
		t.Skip("no leader to strand")
	}
	var others []string
	for _, n := range s.names() {
		if n != leader {
			others = append(others, n)
		}
	}
	size := rapid.IntRange(1, len(s.hosts)/2).Draw(t, "minority size")
	perm := rapid.Permutation(others).Draw(t, "companions")
	minority := append([]string{leader}, perm[:size-1]...)
	s.c.Partition(minority, perm[size-1:])
	s.faulted = true
}

// partitionDrawn puts each member on a drawn side of up to three.
func (s *splitBrain) partitionDrawn(t *rapid.T) {
	groups := make([][]string, 3)
	for _, n := range s.names() {
		g := rapid.IntRange(0, 2).Draw(t, "side of "+n)
		groups[g] = append(groups[g], n)
	}
	var nonEmpty [][]string
	for _, g := range groups {
		if len(g) > 0 {
			nonEmpty = append(nonEmpty, g)
		}
	}
	s.c.Partition(nonEmpty...)
	s.faulted = true
}

func (s *splitBrain) isolate(t *rapid.T) {
	s.c.Isolate(rapid.SampledFrom(s.names()).Draw(t, "isolated"))
	s.faulted = true
}

// restartMember stops (gracefully or as a crash) a drawn member and, unless
// drawn otherwise, starts it again from its data.
func (s *splitBrain) restartMember(t *rapid.T) {
	h := s.c.Host(rapid.SampledFrom(s.names()).Draw(t, "member"))
	if rapid.Bool().Draw(t, "crash") {
		h.CrashEtcd()
	} else {
		h.StopEtcd()
	}
	if rapid.Bool().Draw(t, "stay down") {
		return
	}
	s.startMember(h)
}

func (s *splitBrain) startMember(h *sim.Host) {
	// A member restarted inside a minority cannot become ready until healed;
	// its start is bounded (six election timeouts, at least 300 ms: one in
	// the majority was ready within 22 to 157 ms at 50 ms elections, over
	// 34 starts) and its failure is not the property's: the member is
	// stopped again, and the run goes on.
	s.startMemberWithin(h, max(300*time.Millisecond, 6*s.c.Config().Etcd.Election()))
}

// startMemberWithin starts h's member, bounded by d; a start that does not
// become ready within it is stopped again.
func (s *splitBrain) startMemberWithin(h *sim.Host, d time.Duration) {
	ctx, cancel := context.WithTimeout(s.ctx, d)
	defer cancel()
	if err := h.StartEtcd(ctx); err != nil {
		s.c.Events().Record(h.Name(), "action", "etcd start did not become ready: %v", err)
	}
}

// startTogether starts the named members at once, each bounded by
// convergeStartBound: members of which too few run for a quorum become
// ready only together (each start waits for a leader), as machines that
// come back on their own do. One after another, each start would give up
// and stop before the next began.
func (s *splitBrain) startTogether(names []string) {
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { s.startMemberWithin(s.c.Host(name), convergeStartBound) })
	}
	wg.Wait()
}

// convergeStartBound bounds each member's start in converge: every member
// is connected then, so a start that is not ready within it is a failure
// the cluster's health check goes on to name.
const convergeStartBound = 10 * time.Second

func (s *splitBrain) startStopped(t *rapid.T) {
	down := s.stopped()
	if len(down) == 0 {
		t.Skip("every member runs")
	}
	s.startMember(s.c.Host(rapid.SampledFrom(down).Draw(t, "member")))
}

// transferLeadership moves leadership a drawn number of times while the gate
// is sampled concurrently: the members learn of a new leader at different
// moments, the window a gate without the leader-agreement check could pass in.
func (s *splitBrain) transferLeadership(t *rapid.T) {
	moves := rapid.IntRange(1, 4).Draw(t, "moves")
	// A slow link from the joiner to one member skews the gate's reading
	// of that member against the others, across the change.
	slow := s.c.Host(rapid.SampledFrom(s.names()).Draw(t, "slow member"))
	delay := drawDuration(t, "its delay", "0s", "100ms", "300ms")
	targets := make([]string, moves)
	for i := range targets {
		targets[i] = rapid.SampledFrom(s.names()).Draw(t, "to")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var failure string
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if f := s.gate(slow, delay); f != "" && failure == "" {
				failure = f
			}
		}
	}()
	for _, to := range targets {
		leader := s.leader()
		h := s.c.Host(to)
		v := s.viewOfHost(h)
		if leader == "" || leader == to || v.Err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.clientBound())
		_, err := s.views[leader].MoveLeader(ctx, v.ID)
		cancel()
		s.c.Events().Record("", "fault", "move leader %s -> %s: %v", leader, to, err)
	}
	close(stop)
	<-done
	if failure != "" {
		t.Fatal(failure)
	}
}

// skewedGate runs the gate with the dial to one drawn member slowed and
// moves leadership to a drawn member while the gate waits on that dial: the
// gate then reads the other members before the change and the slow one
// after it, every read answered and alarm-free. Only the gate's
// leader-agreement check stands between that reading and a member-add.
func (s *splitBrain) skewedGate(t *rapid.T) {
	leader := s.leader()
	if leader == "" || len(s.stopped()) > 0 || s.faulted {
		t.Skip("needs a healthy cluster with a leader")
	}
	slow := s.c.Host(rapid.SampledFrom(s.names()).Draw(t, "slow member"))
	var others []string
	for _, n := range s.names() {
		if n != leader {
			others = append(others, n)
		}
	}
	to := s.c.Host(rapid.SampledFrom(others).Draw(t, "new leader"))
	toID := s.viewOfHost(to).ID
	fastDone := make(chan struct{})
	var once sync.Once
	result := make(chan string, 1)
	go func() {
		result <- s.gateHooked(slow, 700*time.Millisecond, func(closed int) {
			if closed >= len(s.hosts)-1 {
				once.Do(func() { close(fastDone) })
			}
		})
	}()
	select {
	case <-fastDone:
	case <-time.After(2 * time.Second):
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	_, err := s.views[leader].MoveLeader(ctx, toID)
	cancel()
	s.c.Events().Record("", "fault", "move leader %s -> %s while the gate waits on a slow dial to %s: %v", leader, to.Name(), slow.Name(), err)
	f := <-result
	s.c.Events().Record("", "action", "the gate across the change: %v; it was told %s", s.lastGate, s.lastProbe.describe())
	if f != "" {
		t.Fatal(f)
	}
}

func (s *splitBrain) heal(t *rapid.T) {
	s.c.Heal()
	s.faulted = false
}

func (s *splitBrain) write(t *rapid.T) {
	s.seq++
	k, v := fmt.Sprintf("sentinel/%03d", s.seq), fmt.Sprintf("v%d", s.seq)
	ctx, cancel := context.WithTimeout(s.ctx, s.clientBound())
	defer cancel()
	if _, err := s.kv.Put(ctx, k, v); err != nil {
		s.maybe[k] = v
		return
	}
	s.written[k] = v
}

// converge heals everything and starts every member; within the bound the
// gate passes, every member answers in one cluster, there are N voters whose
// on-disk node state agrees with etcd's member list, every sentinel reads
// back, and the clients' history is linearizable. It returns the history's
// summary.
func (s *splitBrain) converge() string {
	t := s.t
	explored.invariant("converges: one healthy cluster, node state agrees")
	s.c.Heal()
	s.startTogether(s.stopped())
	if ok, last := eventually(s.ctx, 60*time.Second, func() (bool, string) {
		if down := s.stopped(); len(down) > 0 {
			s.startTogether(down)
			return false, fmt.Sprintf("etcd not running on %v", down)
		}
		err := s.obs.EtcdClusterHealthy(s.ctx, s.ips)
		return err == nil, fmt.Sprint(err)
	}); !ok {
		t.Fatalf("after heal and restart, the cluster did not become healthy within 60s: %s", last)
	}
	// After a stretch with every member down, the property's own client
	// can sit in gRPC's reconnect backoff (growing towards two minutes)
	// past the bounds below: the checks after convergence use a fresh
	// client, as an operator's etcdctl would.
	s.kv = s.clientOnAll()
	views := s.truth()
	var cluster uint64
	for name, v := range views {
		if v.Err != nil {
			t.Fatalf("after convergence %s does not answer: %v", name, v.Err)
		}
		if cluster == 0 {
			cluster = v.Cluster
		}
		if v.Cluster != cluster {
			t.Fatalf("two clusters: %v", views)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	ml, err := s.kv.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list after convergence: %v", err)
	}
	if len(ml.Members) != len(s.hosts) {
		t.Fatalf("%d members after convergence, want %d", len(ml.Members), len(s.hosts))
	}
	for _, m := range ml.Members {
		if m.IsLearner {
			t.Fatalf("member %s is a learner after convergence", m.Name)
		}
		h := s.c.Host(m.Name)
		if h == nil {
			t.Fatalf("member %s is no host", m.Name)
		}
		st, err := nodestate.Load(h.Files())
		if err != nil {
			t.Fatalf("%s's node state: %v", m.Name, err)
		}
		if len(m.PeerURLs) != 1 || st.Etcd.PeerURL != m.PeerURLs[0] || st.Etcd.Name != m.Name {
			t.Fatalf("%s's node state (etcd %s at %s) disagrees with its member (%s at %v)", m.Name, st.Etcd.Name, st.Etcd.PeerURL, m.Name, m.PeerURLs)
		}
	}
	s.read()
	rctx, rcancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer rcancel()
	resp, err := s.kv.Get(rctx, "sentinel/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("read the sentinels after convergence: %v", err)
	}
	if len(resp.Kvs) < len(s.written) {
		t.Fatalf("%d sentinels read back, %d were acknowledged", len(resp.Kvs), len(s.written))
	}
	summary, err := s.load.check(s.ctx, etcdPersisted(s.kv, workloadPrefix), artifactPath(s.load.name+"-linearizability.html"))
	if err != nil {
		t.Fatal(err)
	}
	return summary
}

// judgedDisagreement says what, in the answers the gate judged, should have
// refused it: a member that did not answer, knew no leader, or named another
// leader than the rest. "" when the answers agree.
func judgedDisagreement(answers []ha.EtcdMemberHealth) string {
	var problems []string
	leaders := map[uint64][]string{}
	for _, a := range answers {
		switch {
		case a.Err != nil:
			problems = append(problems, a.Endpoint+" did not answer")
		case a.Leader == 0:
			problems = append(problems, a.Endpoint+" knows no leader")
		default:
			leaders[a.Leader] = append(leaders[a.Leader], a.Endpoint)
		}
	}
	if len(leaders) > 1 {
		var parts []string
		for id, eps := range leaders {
			parts = append(parts, fmt.Sprintf("%s name %x", strings.Join(eps, ","), id))
		}
		slices.Sort(parts)
		problems = append(problems, "split leadership: "+strings.Join(parts, "; "))
	}
	return strings.Join(problems, "; ")
}
