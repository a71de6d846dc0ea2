package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"stratum.dev/stratum/cmd/stratum/cli"
	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/sim"
)

// interrupted is one check of TestInterruptedMemberAdd: joins of the spare
// hosts crashed at drawn checkpoints, then reboots (`stratum up`, ha's
// StartControlPlane) and join re-runs in drawn order.
type interrupted struct {
	*world
	spares []*sim.Host
	g      *grant
	// offset and crashes make the checkpoints round-robin from a drawn
	// offset: a check that crashes len(ha.JoinCheckpoints) joins crashes one
	// at every checkpoint; a drawn bool picks a random one instead.
	offset, crashes int
	// drawn records the checkpoints armed and reached, for coverage.
	drawn map[string]int
	// replaced counts the machines replaced (replaceMachine).
	replaced int
	// restarted says a voter was restarted under a join this check
	// (restartVoter).
	restarted bool
}

func TestInterruptedMemberAdd(t *testing.T) {
	var mu sync.Mutex
	covered := map[string]int{}
	checks, replaced := 0, 0
	t.Cleanup(func() {
		var missing []string
		for _, cp := range ha.JoinCheckpoints {
			if covered[cp] == 0 {
				missing = append(missing, cp)
			}
		}
		t.Logf("InterruptedMemberAdd: crashes by checkpoint %v; never crashed at %v; machines replaced: %d", covered, missing, replaced)
		// Every check's crash chain crashes a join at every checkpoint.
		if !t.Failed() && checks > 0 && len(missing) > 0 {
			t.Errorf("%d checks never crashed a join at %v", checks, missing)
		}
	})
	property(t, func(rt *rapid.T) {
		var s *interrupted
		explored.part("prologue: the world", func() {
			s = &interrupted{world: newWorld(rt, 2), drawn: map[string]int{}}
			s.spares = s.c.Hosts()[1:]
			s.g = s.mint(time.Hour)
		})
		s.offset = rapid.IntRange(0, len(ha.JoinCheckpoints)-1).Draw(rt, "checkpoint offset")
		explored.part("prologue: crash chain", func() { s.crashChain(rt) })
		rt.Repeat(explored.actions(map[string]func(*rapid.T){
			"crashJoin":    s.crashJoin,
			"reboot":       s.reboot,
			"rejoin":       s.rejoin,
			"replace":      s.replaceMachine,
			"crashStart":   s.crashStart,
			"restartVoter": s.restartVoter,
			"write":        func(t *rapid.T) { s.writeSentinel(fmt.Sprintf("step %d", len(s.sentinels))) },
			"":             s.check,
		}))
		explored.part("finish", s.finish)
		mu.Lock()
		checks++
		replaced += s.replaced
		for k, v := range s.drawn {
			covered[k] += v
		}
		mu.Unlock()
	})
}

func (s *interrupted) spareNames() []string {
	var out []string
	for _, h := range s.spares {
		out = append(out, h.Name())
	}
	return out
}

// learnerBesides reports whether a host other than h has an unpromoted
// learner member.
func (s *interrupted) learnerBesides(h *sim.Host) bool {
	ms, _ := s.members()
	for _, m := range ms {
		if m.Learner && m.PeerURL != h.PeerURL() {
			return true
		}
	}
	return false
}

// downMemberBesides reports whether a host other than h has a started etcd
// member whose etcd does not run.
func (s *interrupted) downMemberBesides(h *sim.Host) bool {
	ms, _ := s.members()
	for _, m := range ms {
		if o := s.hostOfPeer(m.PeerURL); o != nil && o != h && o != s.cp1 && m.Name != "" && !o.EtcdRunning() {
			return true
		}
	}
	return false
}

func (s *interrupted) unjoined() []string {
	var out []string
	for _, h := range s.spares {
		if !hasFile(h, nodestate.Path) {
			out = append(out, h.Name())
		}
	}
	return out
}

// crashChain crashes one drawn spare's join at every checkpoint in order,
// re-running the join after each crash (and, when drawn, trying `stratum up`
// first): each run starts from what every crash before it left. Every check
// reaches every checkpoint this way; the host ends with its node state saved
// and its services down (crashed at the last checkpoint).
func (s *interrupted) crashChain(t *rapid.T) {
	h := s.c.Host(rapid.SampledFrom(s.spareNames()).Draw(t, "chain host"))
	for _, cp := range ha.JoinCheckpoints {
		if rapid.Bool().Draw(t, "stratum up before the re-run") {
			s.rebootHost(t, h)
			s.check(t)
		}
		s.crashJoinAt(t, h, cp)
		s.check(t)
	}
}

// crashJoin runs a join on a drawn unjoined spare and crashes the host at the
// next checkpoint of a round-robin from a drawn offset (or a random one).
func (s *interrupted) crashJoin(t *rapid.T) {
	cands := s.unjoined()
	if len(cands) == 0 {
		t.Skip("every spare has joined")
	}
	h := s.c.Host(rapid.SampledFrom(cands).Draw(t, "joiner"))
	cps := ha.JoinCheckpoints
	if s.learnerBesides(h) {
		// etcd holds one learner at a time: another host's unpromoted member
		// makes this join's add wait (MemberAdd retries "too many learner
		// members") until that host is finished. An operator finishes that
		// one first; here this join is crashed before its add.
		cps = cps[:slices.Index(cps, ha.CheckpointAfterIntent)+1]
	}
	if s.downMemberBesides(h) {
		// A started member whose etcd is down (a start crashed after etcd
		// started) fails the join's health gate, before its intent: an
		// operator brings it up first; here the join is crashed before
		// the gate.
		cps = cps[:slices.Index(cps, ha.CheckpointBeforeIntent)]
	}
	cp := cps[(s.offset+s.crashes)%len(cps)]
	if rapid.Bool().Draw(t, "random checkpoint") {
		cp = rapid.SampledFrom(cps).Draw(t, "checkpoint")
	}
	s.crashes++
	s.crashJoinAt(t, h, cp)
}

// crashJoinAt runs the join on h and crashes h at cp. The join must reach
// it: every checkpoint is reachable.
func (s *interrupted) crashJoinAt(t *rapid.T, h *sim.Host, cp string) {
	s.crashRunAt(t, h, cp, "the join", func() error {
		_, err := nodeOn(h).PrepareControlPlaneJoin(s.ctx, s.g.JoinOptions)
		return err
	})
}

// crashStart is `stratum up` on a drawn spare whose saved join left its
// member an unpromoted learner, crashed right after its etcd started
// (CheckpointStartAfterEtcd): the member is then a started learner whose
// etcd is down, what a machine that dies between etcd's start and the
// promotion leaves. A later `stratum up` must promote it; a replaced
// machine's join must refuse it. Only a learner's start is crashed: a voter
// down would take the quorum of cp1 and one voter with it.
func (s *interrupted) crashStart(t *rapid.T) {
	ms, _ := s.members()
	var cands []string
	for _, h := range s.spares {
		for _, m := range ms {
			if m.PeerURL == h.PeerURL() && m.Learner && hasFile(h, nodestate.Path) {
				cands = append(cands, h.Name())
			}
		}
	}
	if len(cands) == 0 {
		t.Skip("no spare with saved state has an unpromoted learner")
	}
	h := s.c.Host(rapid.SampledFrom(cands).Draw(t, "started learner"))
	s.crashRunAt(t, h, ha.CheckpointStartAfterEtcd, "stratum up", func() error {
		_, err := nodeOn(h).StartControlPlane(s.ctx)
		return err
	})
}

// crashRunAt runs what (a join or a start) on h and crashes h at cp, which
// it must reach.
func (s *interrupted) crashRunAt(t *rapid.T, h *sim.Host, cp, what string, run func() error) {
	inc := h.Incarnation()
	armed := s.c.CrashAt(h.Name(), cp)
	returned := make(chan error, 1)
	go func() { returned <- run() }()
	select {
	case <-armed.Reached():
	case err := <-returned:
		s.c.Disarm(h.Name(), cp)
		t.Fatalf("%s on %s returned (error: %v) without reaching checkpoint %s", what, h.Name(), err, cp)
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s on %s never reached checkpoint %s", what, h.Name(), cp)
	}
	if ok, _ := eventually(s.ctx, 30*time.Second, func() (bool, string) { return h.Incarnation() != inc, "" }); !ok {
		t.Fatalf("%s did not crash at %s", h.Name(), cp)
	}
	s.drawn[cp]++
}

// reboot is `stratum up` on a drawn spare: with node state it must start the
// control plane; with an intent journal and no state it must refuse with
// ErrIntentSurvives (never bootstrap a cluster over it); with neither it
// must refuse and start nothing.
func (s *interrupted) reboot(t *rapid.T) {
	s.rebootHost(t, s.c.Host(rapid.SampledFrom(s.spareNames()).Draw(t, "host")))
}

func (s *interrupted) rebootHost(t *rapid.T, h *sim.Host) {
	state, intent := hasFile(h, nodestate.Path), hasFile(h, ha.JoinIntentPath())
	err := upOn(t, s.ctx, h)
	switch {
	case state:
		if err != nil {
			t.Fatalf("stratum up on %s (node state saved): %v", h.Name(), err)
		}
	case intent:
		if !errors.Is(err, ha.ErrIntentSurvives) {
			t.Fatalf("stratum up on %s over a surviving intent journal and no state = %v, want ErrIntentSurvives", h.Name(), err)
		}
		if h.EtcdRunning() {
			t.Fatalf("stratum up on %s refused over the intent journal but started etcd", h.Name())
		}
	default:
		if err == nil || h.EtcdRunning() {
			t.Fatalf("stratum up on %s with neither state nor intent = %v (etcd running %v); want a refusal that starts nothing", h.Name(), err, h.EtcdRunning())
		}
	}
}

// rejoin re-runs the join command on a drawn unjoined spare, then `stratum
// up`: it must finish whatever a crash left.
func (s *interrupted) rejoin(t *rapid.T) {
	cands := s.unjoined()
	if len(cands) == 0 {
		t.Skip("every spare has joined")
	}
	h := s.c.Host(rapid.SampledFrom(cands).Draw(t, "joiner"))
	if s.learnerBesides(h) {
		t.Skip("another host's learner is pending: that join is finished first")
	}
	if err := joinOn(t, s.ctx, h, s.g.JoinOptions); err != nil {
		t.Fatalf("re-run of the join on %s: %v", h.Name(), err)
	}
	if err := upOn(t, s.ctx, h); err != nil {
		t.Fatalf("stratum up after the join on %s: %v", h.Name(), err)
	}
}

// restartCheckpoints are where a restart under a join may come
// (restartVoter here, restartUnderJoin in TestClientsThroughVIP): every
// checkpoint of the join and of the `stratum up` that follows it up to the
// apiserver's start (the member is a voter by then).
var restartCheckpoints = slices.Concat(ha.JoinCheckpoints,
	[]string{ha.CheckpointStartAfterEtcd, ha.CheckpointStartAfterPromote, ha.CheckpointStartAfterConfirm})

// restartVoter runs the join command and `stratum up` on a drawn unjoined
// spare while the cluster's other voter restarts: at a drawn checkpoint, a
// drawn moment after it, the other spare's host crashes, and after a drawn
// pause `stratum up` brings it back, which is what its handover to systemd's
// unit, an upgrade or a reboot does. With cp1 and that spare the only
// voters, the cluster has no quorum for those seconds. The join and its `up`
// must wait them out, every wait bounded well past them, and join as a
// voter. The other spare is brought up first when it is down. Skipped
// unless exactly one spare has joined (its node state saved); at most once
// a check (it costs two or three apiserver starts).
func (s *interrupted) restartVoter(t *rapid.T) {
	if s.restarted {
		t.Skip("a voter was restarted under a join in this check already")
	}
	cands := s.unjoined()
	if len(cands) != 1 {
		t.Skip("needs one spare joined (node state saved) and the other not")
	}
	h := s.c.Host(cands[0])
	var v *sim.Host
	for _, o := range s.spares {
		if o != h {
			v = o
		}
	}
	if !v.EtcdRunning() || !v.APIServerRunning() {
		// Brought up first, as an operator heals the cluster before
		// growing it; its `up` promotes a learner it left.
		if err := upOn(t, s.ctx, v); err != nil {
			t.Fatalf("stratum up on %s (node state saved) before %s's join: %v", v.Name(), h.Name(), err)
		}
	}
	ms, _ := s.members()
	var voters []string
	for _, m := range ms {
		if !m.Learner {
			voters = append(voters, m.PeerURL)
		}
	}
	if want := []string{s.cp1.PeerURL(), v.PeerURL()}; !slices.Equal(slices.Sorted(slices.Values(voters)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("after stratum up on %s, the cluster is not cp1 and %s as its two voters: %v", v.Name(), v.Name(), ms)
	}
	cp := rapid.SampledFrom(restartCheckpoints).Draw(t, "restart at")
	// Half the time the crash comes at the checkpoint itself, before the
	// join goes on: the step after it meets the outage from its start.
	after := time.Duration(rapid.OneOf(rapid.Just(0), rapid.IntRange(1, 300)).Draw(t, "restart ms after the checkpoint")) * time.Millisecond
	down := time.Duration(rapid.IntRange(0, 4000).Draw(t, "ms down before stratum up")) * time.Millisecond
	s.restarted = true
	pause := s.c.PauseAt(h.Name(), cp)
	joined := make(chan error, 1)
	jctx, cancel := context.WithTimeout(s.ctx, opBound)
	defer cancel()
	// A check that fails before the restart leaves no join parked at the
	// pause, nor one that reaches it later.
	defer func() {
		s.c.Disarm(h.Name(), cp)
		pause.Release()
	}()
	go func() { // bounded below, not by joinOn: t fails on the test's goroutine only
		n := nodeOn(h)
		if _, err := n.PrepareControlPlaneJoin(jctx, s.g.JoinOptions); err != nil {
			joined <- fmt.Errorf("the join: %w", err)
			return
		}
		if _, err := n.StartControlPlane(jctx); err != nil {
			joined <- fmt.Errorf("stratum up after the join: %w", err)
			return
		}
		joined <- nil
	}()
	select {
	case <-pause.Reached():
	case err := <-joined:
		t.Fatalf("the join on %s ended before checkpoint %s: %v", h.Name(), cp, err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("the join on %s never reached checkpoint %s", h.Name(), cp)
	}
	if after > 0 {
		pause.Release()
		time.Sleep(after)
	}
	s.c.Events().Record(v.Name(), "fault", "restarting: crashed %s after %s's checkpoint %s; stratum up in %s", after, h.Name(), cp, down)
	v.Crash()
	pause.Release() // a second release is nothing
	time.Sleep(down)
	if err := upOn(t, s.ctx, v); err != nil {
		t.Fatalf("stratum up on %s, restarted %s after %s of %s's join and down %s: %v", v.Name(), after, cp, h.Name(), down, err)
	}
	select {
	case err := <-joined:
		if err != nil {
			t.Fatalf("on %s, while %s (the other voter of two) restarted %s after its checkpoint %s, down %s before its `stratum up`: %v", h.Name(), v.Name(), after, cp, down, err)
		}
	case <-time.After(opBound + boundGrace):
		t.Fatalf("the join and `stratum up` on %s did not return within %s: an operator would hang on them", h.Name(), opBound+boundGrace)
	}
	after2, _ := s.members()
	if !slices.ContainsFunc(after2, func(m member) bool { return m.PeerURL == h.PeerURL() && !m.Learner }) {
		t.Fatalf("%s joined through %s's restart, but is not a voter: %v", h.Name(), v.Name(), after2)
	}
	when := "at "
	if after > 0 {
		when = "just after "
	}
	explored.ran("restartVoter: joined through the other voter's restart " + when + cp)
}

// removeCommand is the command a join's refusal of a started member names.
var removeCommand = regexp.MustCompile("`stratum (etcd member remove [^`]+)`")

// replaceMachine replaces a drawn spare's machine (sim's Reimage: a crash,
// then every file gone) and does what docs/cli.md tells an operator to: the
// same join command on the new machine; when it is refused naming the old
// machine's member (one that started), the command the refusal names run on
// cp1, and the join again; then `stratum up`. The refusal must have changed
// no member; a member the old machine added but never started is taken over
// by the join itself, without a refusal.
//
// At most one machine is replaced a check. Skipped while another host's
// learner is pending (etcd holds one learner at a time: that join is
// finished first), and when the old machine's voter could not be removed
// with a quorum of the others (cp1 and it the only voters: the cluster is
// lost with the machine, a restore's case). The other voters are started
// first, as an operator heals the cluster before replacing a member.
func (s *interrupted) replaceMachine(t *rapid.T) {
	if s.replaced > 0 {
		// Each costs a join and an apiserver start (about 5 s): one a
		// check keeps the property's rate.
		t.Skip("a machine was replaced in this check already")
	}
	h := s.c.Host(rapid.SampledFrom(s.spareNames()).Draw(t, "replaced machine"))
	if s.learnerBesides(h) {
		t.Skip("another host's learner is pending: that join is finished first")
	}
	var old *member
	voters := 0
	ms, _ := s.members()
	for i, m := range ms {
		if m.PeerURL == h.PeerURL() {
			old = &ms[i]
		}
		if !m.Learner {
			voters++
		}
	}
	if old != nil && !old.Learner {
		if voters-1 < voters/2+1 {
			t.Skip(fmt.Sprintf("%s's voter is one of %d: without it there is no quorum to remove it", h.Name(), voters))
		}
		for _, o := range s.spares {
			if o != h && hasFile(o, nodestate.Path) && !o.EtcdRunning() {
				if err := upOn(t, s.ctx, o); err != nil {
					t.Fatalf("stratum up on %s before replacing %s: %v", o.Name(), h.Name(), err)
				}
			}
		}
	}
	if err := h.Reimage(); err != nil {
		t.Fatal(err)
	}
	started := old != nil && old.Name != ""
	err := joinOn(t, s.ctx, h, s.g.JoinOptions)
	switch {
	case err == nil && started:
		t.Fatalf("the join on the replaced %s succeeded over its old started member %s (%s)", h.Name(), old.Name, old.PeerURL)
	case err != nil && !started:
		t.Fatalf("the join on the replaced %s (its old member %+v, unstarted or none): %v", h.Name(), old, err)
	case err != nil:
		if !ha.IsRefusal(err) {
			t.Fatalf("the join on the replaced %s over its old member %s: %v, want a refusal", h.Name(), old.Name, err)
		}
		if after, _ := s.members(); !slices.Equal(after, ms) {
			t.Fatalf("the refused join on the replaced %s changed the members: %v -> %v", h.Name(), ms, after)
		}
		cmd := removeCommand.FindStringSubmatch(err.Error())
		if cmd == nil {
			t.Fatalf("the refusal on the replaced %s names no `stratum etcd member remove`: %v", h.Name(), err)
		}
		if code, out, errOut := runStratum(t, s.ctx, s.c, opBound, s.cp1, strings.Fields(cmd[1])...); code != cli.ExitOK {
			t.Fatalf("stratum %s on cp1, as the refusal on %s says: exit %d\n%s\n%s", cmd[1], h.Name(), code, out, errOut)
		}
		if err := joinOn(t, s.ctx, h, s.g.JoinOptions); err != nil {
			t.Fatalf("the join on the replaced %s after its old member's removal: %v", h.Name(), err)
		}
	}
	if err := upOn(t, s.ctx, h); err != nil {
		t.Fatalf("stratum up after the join on the replaced %s: %v", h.Name(), err)
	}
	s.replaced++
	switch {
	case old == nil:
		explored.ran("replace: no old member")
	case !started:
		explored.ran("replace: the old unstarted learner taken over")
	case old.Learner:
		explored.ran("replace: the old started learner refused, removed, joined again")
	default:
		explored.ran("replace: the old voter refused, removed, joined again")
	}
}

// check: one cluster among the running members; no member without an intent
// journal or node state on its host; data written earlier survives; the
// worker token is refused the bundle.
func (s *interrupted) check(t *rapid.T) {
	s.checkOneCluster()
	s.checkNoOrphan()
	s.checkSentinels(s.admin, "cp1")
	s.checkWorkerRefused()
}

// finish: the operator re-runs what is pending (the join on every spare
// without state, `stratum up` on every one with state), in drawn order; the
// cluster converges to 1+spares voters.
func (s *interrupted) finish() {
	t := s.t
	var order []*sim.Host
	for _, name := range rapid.Permutation(s.spareNames()).Draw(t, "finish order") {
		order = append(order, s.c.Host(name))
	}
	// A host whose member is an unpromoted learner goes first (etcd takes one
	// learner at a time); the drawn order stands among the rest.
	slices.SortStableFunc(order, func(a, b *sim.Host) int {
		la, lb := s.learnerBesides(b), s.learnerBesides(a)
		switch {
		case la && !lb:
			return -1
		case lb && !la:
			return 1
		}
		return 0
	})
	for _, h := range order {
		if !hasFile(h, nodestate.Path) {
			if err := joinOn(t, s.ctx, h, s.g.JoinOptions); err != nil {
				t.Fatalf("finishing: the join on %s: %v", h.Name(), err)
			}
		}
		if err := upOn(t, s.ctx, h); err != nil {
			t.Fatalf("finishing: stratum up on %s: %v", h.Name(), err)
		}
		s.check(t)
	}
	s.converge(s.spares)
	t.Logf("crashed at %v", slices.Sorted(maps.Keys(s.drawn)))
}
