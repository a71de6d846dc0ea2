package vip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
)

// Short election timings, so failover fits in a test. The holder gives up
// a full second before a rival may take an unrenewed lease: with 250 ms
// between the two (the earlier timings), a CI machine busy with the
// apiserver's start delayed a holder's renewals past the lease, and its
// rival won the lease while the holder still held (the overlap every lease
// election allows when a holder stalls, and the VIP's kernel lifetime bounds
// on real hosts).
const (
	testLeaseDuration = 2 * time.Second
	testRenewDeadline = time.Second
	testRetryPeriod   = 200 * time.Millisecond
)

// startAPIServer runs a real kube-apiserver on its own etcd (both from the
// asset cache) for the test, stopped in cleanup, and returns an admin client.
func startAPIServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	assetstest.Require(t, assets.KubeAPIServerName, assets.EtcdName(version.Etcd))
	apiserver, err := assets.KubeAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := assets.Etcd(version.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: apiserver},
			Etcd:      &envtest.Etcd{Path: etcd},
		},
		ControlPlaneStartTimeout: time.Minute,
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the test apiserver: %v", err)
		}
	})
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start a kube-apiserver with etcd: %v", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// board tracks which recording announcers hold the VIP, and records every
// moment two held it at once.
type board struct {
	mu      sync.Mutex
	holding map[string]bool
	overlap []string
}

func newBoard() *board { return &board{holding: map[string]bool{}} }

// recorder is an Announcer that records its calls on a board.
type recorder struct {
	b    *board
	name string
	// failHolds is how many Holds fail before one succeeds.
	failHolds int
	calls     []string // "hold", "hold-failed", "release"
}

func (b *board) recorder(name string) *recorder { return &recorder{b: b, name: name} }

func (r *recorder) Hold(context.Context) error {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.failHolds > 0 {
		r.failHolds--
		r.calls = append(r.calls, "hold-failed")
		return errors.New("injected Hold failure")
	}
	for other, h := range r.b.holding {
		if h && other != r.name {
			r.b.overlap = append(r.b.overlap, fmt.Sprintf("%s took the VIP while %s held it", r.name, other))
		}
	}
	r.b.holding[r.name] = true
	r.calls = append(r.calls, "hold")
	return nil
}

func (r *recorder) Release() error {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	r.b.holding[r.name] = false
	r.calls = append(r.calls, "release")
	return nil
}

// holds reports whether r holds the VIP now.
func (r *recorder) holds() bool {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return r.b.holding[r.name]
}

// history is r's calls so far.
func (r *recorder) history() []string {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	return slices.Clone(r.calls)
}

// candidate is a Run in the background.
type candidate struct {
	cancel context.CancelFunc
	done   chan error
}

// startCandidate runs Run as identity on lease with the test timings; it is
// stopped in cleanup.
func startCandidate(t *testing.T, cs kubernetes.Interface, lease, identity string, a Announcer, canHold func() error) *candidate {
	t.Helper()
	return startCandidateLogging(t, cs, lease, identity, a, canHold, nil)
}

// startCandidateLogging is startCandidate with the candidate's log, and its
// waits between terms, each in turn, sent to waits when that is not nil.
func startCandidateLogging(t *testing.T, cs kubernetes.Interface, lease, identity string, a Announcer, canHold func() error, log *slog.Logger, waits ...chan<- time.Duration) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{cancel: cancel, done: make(chan error, 1)}
	cfg := Config{
		Client: cs, Identity: identity, Lease: lease,
		LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod,
		CanHold: canHold, Announcer: a, Log: log,
	}
	if len(waits) > 0 {
		cfg.after = func(d time.Duration) <-chan time.Time {
			select {
			case waits[0] <- d:
			default:
			}
			return time.After(d)
		}
	}
	go func() { c.done <- Run(ctx, cfg) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels the candidate and returns Run's result.
func (c *candidate) stop(t *testing.T) error {
	t.Helper()
	c.cancel()
	return c.wait(t, 10*time.Second)
}

// wait returns Run's result once it returns, failing the test after d.
func (c *candidate) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // a later wait sees it too
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %s", d)
		return nil
	}
}

// eventually polls cond until it holds, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaseHolder is the lease's holder identity as the apiserver has it, "" when
// released.
func leaseHolder(t *testing.T, cs kubernetes.Interface, lease string) string {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get lease %s: %v", lease, err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// errNoCert stands for a certificate that does not cover the VIP.
var errNoCert = errors.New("the apiserver certificate does not cover the VIP")

// TestElection runs VIP candidates against a real kube-apiserver: one holds
// at a time, a stopped holder hands over at once, a holder whose lease is
// taken from it lets the address go, a refused win never takes the address
// and frees the lease, and a failed Hold is retried.
func TestElection(t *testing.T) {
	cs := startAPIServer(t)
	takeover := 4 * testLeaseDuration

	t.Run("failover", func(t *testing.T) {
		b := newBoard()
		ra, rb := b.recorder("a"), b.recorder("b")
		ca := startCandidate(t, cs, "failover", "a", ra, nil)
		cb := startCandidate(t, cs, "failover", "b", rb, nil)
		eventually(t, 30*time.Second, "one candidate holds the VIP", func() bool { return ra.holds() || rb.holds() })
		holder, hc, other, oc := ra, ca, rb, cb
		if rb.holds() {
			holder, hc, other, oc = rb, cb, ra, ca
		}
		if got := leaseHolder(t, cs, "failover"); got != holder.name {
			t.Fatalf("%s holds the VIP but the lease names %q", holder.name, got)
		}
		// The other keeps trying, and never takes the address meanwhile.
		time.Sleep(2 * testLeaseDuration)
		if other.holds() || slices.Contains(other.history(), "hold") || !holder.holds() {
			t.Fatalf("after two lease durations: %s holds %v, %s calls %v", holder.name, holder.holds(), other.name, other.history())
		}

		if err := hc.stop(t); err != nil {
			t.Fatalf("Run of the stopped holder = %v, want nil", err)
		}
		if holder.holds() {
			t.Fatalf("stopped holder %s still holds the VIP: %v", holder.name, holder.history())
		}
		eventually(t, takeover, other.name+" takes the VIP", other.holds)
		if got := leaseHolder(t, cs, "failover"); got != other.name {
			t.Fatalf("%s holds the VIP but the lease names %q", other.name, got)
		}

		if err := oc.stop(t); err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if other.holds() {
			t.Fatalf("stopped %s still holds the VIP", other.name)
		}
		if got := leaseHolder(t, cs, "failover"); got != "" {
			t.Fatalf("lease still names %q after its holder stopped", got)
		}
		if len(b.overlap) > 0 {
			t.Fatalf("two holders at once: %v", b.overlap)
		}
	})

	t.Run("lease lost", func(t *testing.T) {
		// What a holder cut off from the apiservers meets when it can
		// reach them again: another node renewed the lease meanwhile.
		// Its renewals fail, and it must stop answering for the VIP
		// within its renew deadline, not keep it beside the new holder.
		r := newBoard().recorder("cut-off")
		startCandidate(t, cs, "lost", "cut-off", r, nil)
		eventually(t, 30*time.Second, "the candidate holds the VIP", r.holds)
		ctx := context.Background()
		l, err := cs.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "lost", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		other, hour := "elsewhere", int32(3600)
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &other, &hour
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		if _, err := cs.CoordinationV1().Leases(LeaseNamespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("take the lease for another holder: %v", err)
		}
		eventually(t, testRenewDeadline+4*testRetryPeriod+time.Second, "the holder whose lease was taken releases the VIP", func() bool { return !r.holds() })
		if h := r.history(); h[len(h)-1] != "release" {
			t.Fatalf("calls %v: the lost lease did not end in a Release", h)
		}
		time.Sleep(2 * testLeaseDuration)
		if r.holds() || leaseHolder(t, cs, "lost") != other {
			t.Fatalf("after two lease durations: the candidate holds %v, the lease names %q", r.holds(), leaseHolder(t, cs, "lost"))
		}
	})

	t.Run("refused", func(t *testing.T) {
		b := newBoard()
		rr, rg := b.recorder("refuses"), b.recorder("good")
		var asked sync.WaitGroup
		asked.Add(1)
		var once sync.Once
		cr := startCandidate(t, cs, "refused", "refuses", rr, func() error {
			once.Do(asked.Done)
			return fmt.Errorf("refuses: %w", errNoCert)
		})
		err := cr.wait(t, 30*time.Second)
		asked.Wait()
		if !errors.Is(err, errNoCert) || !strings.Contains(err.Error(), "won the VIP lease but did not take the VIP") {
			t.Fatalf("Run of a refusing candidate = %v, want the refusal, wrapped", err)
		}
		if slices.Contains(rr.history(), "hold") || rr.holds() {
			t.Fatalf("a refusing candidate held the VIP: %v", rr.history())
		}
		if got := leaseHolder(t, cs, "refused"); got != "" {
			t.Fatalf("a refusing candidate left the lease held by %q", got)
		}

		// The lease is free: a good candidate takes it at once.
		startCandidate(t, cs, "refused", "good", rg, nil)
		eventually(t, takeover, "the good candidate takes the VIP", rg.holds)
		if got := leaseHolder(t, cs, "refused"); got != "good" {
			t.Fatalf("lease names %q, want good", got)
		}
	})

	// A candidate that cannot take the address (no right to add it, say)
	// says so once while it fails the same way, not at every try, and
	// says when it holds the VIP at last.
	t.Run("hold fails the same way", func(t *testing.T) {
		r := newBoard().recorder("stubborn")
		r.failHolds = 4
		var logs syncbuf.Buffer
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		waits := make(chan time.Duration, 16)
		startCandidateLogging(t, cs, "holdfailsagain", "stubborn", r, nil, log, waits)
		eventually(t, 30*time.Second, "the candidate holds the VIP after four failed Holds", r.holds)
		var got []time.Duration
		for len(waits) > 0 {
			got = append(got, <-waits)
		}
		if want := []time.Duration{testRetryPeriod, 2 * testRetryPeriod, 4 * testRetryPeriod, 8 * testRetryPeriod}; !slices.Equal(got, want) {
			t.Fatalf("the waits after four failed Holds were %v, want %v (doubling)", got, want)
		}
		out := logs.String()
		if loud, quiet := strings.Count(out, `level=ERROR msg="taking the VIP failed`), strings.Count(out, `msg="taking the VIP failed again"`); loud != 1 || quiet != 3 {
			t.Fatalf("four Holds failing the same way logged %d errors and %d debug lines, want 1 and 3:\n%s", loud, quiet, out)
		}
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			return strings.Contains(l, `msg="holds the VIP"`) && strings.Contains(l, `"after failed tries"=4`)
		}) {
			t.Fatalf("the candidate's log does not say it holds the VIP after 4 failed tries:\n%s", out)
		}
	})

	t.Run("hold fails", func(t *testing.T) {
		r := newBoard().recorder("flaky")
		r.failHolds = 1
		startCandidate(t, cs, "holdfails", "flaky", r, nil)
		eventually(t, 30*time.Second, "the candidate holds the VIP after a failed Hold", r.holds)
		h := r.history()
		failed := slices.Index(h, "hold-failed")
		if failed < 0 || failed+1 >= len(h) || h[failed+1] != "release" {
			t.Fatalf("calls %v: a failed Hold is not followed by a Release", h)
		}
	})
}

// TestHoldFailuresBackOff: after failed Holds a candidate waits twice as
// long each time, from the retry period up to maxHoldBackoff of them.
func TestHoldFailuresBackOff(t *testing.T) {
	f := &holdFailures{forgetAfter: time.Hour}
	want := []time.Duration{1, 1, 2, 4, 8, 16, 16, 16}
	for i, w := range want {
		if got := f.backoff(time.Second); got != w*time.Second {
			t.Fatalf("backoff after %d failed Holds = %s, want %s", i, got, w*time.Second)
		}
		f.failed(errors.New("operation not permitted"))
	}
	if f.held(); f.backoff(time.Second) != time.Second {
		t.Fatal("a held VIP did not clear the backoff")
	}
	// Failures long past (a candidate that then waited for the lease) are
	// forgotten: the next failure is the first again, said and short.
	f = &holdFailures{forgetAfter: time.Minute}
	for range 5 {
		f.failed(errors.New("operation not permitted"))
	}
	f.last = f.last.Add(-2 * time.Minute)
	if loud, n := f.failed(errors.New("operation not permitted")); !loud || n != 1 || f.backoff(time.Second) != time.Second {
		t.Fatalf("a failure after old ones: loud %v, count %d, backoff %s; want said, 1, 1s", loud, n, f.backoff(time.Second))
	}
}

// TestRunRefusesIncompleteConfig: Run needs a client, an identity and an
// announcer, and election timings client-go accepts.
func TestRunRefusesIncompleteConfig(t *testing.T) {
	cs := fake.NewClientset()
	a := newBoard().recorder("x")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no client", Config{Identity: "n", Announcer: a}, "Client"},
		{"no identity", Config{Client: cs, Announcer: a}, "Identity"},
		{"no announcer", Config{Client: cs, Identity: "n"}, "Announcer"},
		{"renew deadline beyond the lease", Config{Client: cs, Identity: "n", Announcer: a, LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}, "leaseDuration must be greater than renewDeadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Run(ctx, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// gatedRecorder is a recorder that keeps the address alive after Hold, as
// NetlinkAnnouncer does, so Run hands it the lease gate.
type gatedRecorder struct {
	*recorder
	mu        sync.Mutex
	lastWrite func() time.Time
	within    time.Duration
}

func (g *gatedRecorder) gate(lastWrite func() time.Time, within time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastWrite, g.within = lastWrite, within
}

func (g *gatedRecorder) written() (time.Time, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lastWrite == nil {
		return time.Time{}, 0
	}
	return g.lastWrite(), g.within
}

// TestRunGatesTheAnnouncerOnItsLeaseWrites: Run hands an announcer that keeps
// the address alive when the candidate last wrote its lease and the renew
// deadline; each renewal moves that time on, and once the lease's writes
// fail (an apiserver that stops answering) it stays where the last one left
// it, so the announcer stops keeping the address before the lease can pass
// to another node (TestNetlinkAnnouncerKeepsTheVIPOnlyWhileTheLeaseIsFresh).
func TestRunGatesTheAnnouncerOnItsLeaseWrites(t *testing.T) {
	cs := fake.NewClientset()
	// The lease writes' faults are switched on below; the reactor is
	// registered before the candidate writes (the fake's reactor list is not
	// safe to change while it is used).
	var slow, failing atomic.Bool
	cs.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("injected: the apiserver does not answer")
		}
		if slow.Load() {
			time.Sleep(testRenewDeadline / 2)
		}
		return false, nil, nil // then the tracker writes it
	})
	g := &gatedRecorder{recorder: newBoard().recorder("cp1")}
	startCandidate(t, cs, DefaultLease, "cp1", g, nil)
	eventually(t, 10*time.Second, "cp1 holds the VIP", g.holds)
	first, within := g.written()
	if want := testLeaseDuration - testRetryPeriod; within != want || time.Since(first) > 3*testRetryPeriod {
		t.Fatalf("the gate Run handed: last write %s ago, within %s; want a write in the last %s and the lease less a retry period, %s", time.Since(first), within, 3*testRetryPeriod, want)
	}
	eventually(t, 10*time.Second, "a renewal moves the last write on", func() bool {
		w, _ := g.written()
		return w.After(first)
	})
	// Slow writes (a loaded apiserver, an etcd slow to fsync) that client-go
	// still renews in time keep the gate open: renewals start a retry
	// period after the last one ended, so the gate's age peaks at a retry
	// period plus two writes' latency. A gate at the renew deadline closed
	// so, dropping a VIP whose lease no one else could take.
	slow.Store(true)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		w, within := g.written()
		if age := time.Since(w); age >= within || !g.holds() {
			t.Fatalf("with writes of %s, the gate closed (last write %s ago, within %s; holding: %v)", testRenewDeadline/2, age.Round(time.Millisecond), within, g.holds())
		}
	}
	failing.Store(true)
	time.Sleep(2 * testRetryPeriod) // a write in flight lands or fails
	stalled, _ := g.written()
	// The term ends after the renew deadline and the next one has no
	// write of its own yet (zero, as stale as can be): never a newer one.
	time.Sleep(2 * testRenewDeadline)
	if w, _ := g.written(); w.After(stalled) {
		t.Fatalf("the last write moved from %s to %s while every lease update failed", stalled.Format(time.StampMilli), w.Format(time.StampMilli))
	}
}

// scriptedLock is a lease lock whose writes answer err, as identity.
type scriptedLock struct {
	resourcelock.Interface
	identity string
	err      error
}

func (l *scriptedLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *scriptedLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return l.err }
func (l *scriptedLock) Identity() string                                                { return l.identity }

// TestWriteClockRecordsRenewalsOnly: the gate's clock moves on a successful
// write naming this candidate the holder, not on client-go's release (no
// holder, a one-second lease) nor on a failed write, and a conflict (another
// candidate wrote the lease since it was read: what a process whose clock
// stood still meets when it resumes) clears it.
func TestWriteClockRecordsRenewalsOnly(t *testing.T) {
	lock := &scriptedLock{identity: "cp1"}
	w := &writeClock{Interface: lock}
	renewal := resourcelock.LeaderElectionRecord{HolderIdentity: "cp1", LeaseDurationSeconds: 5}
	if err := w.Update(context.Background(), renewal); err != nil || w.lastWrite().IsZero() {
		t.Fatalf("a renewal: %v, last write %v", err, w.lastWrite())
	}
	renewed := w.lastWrite()
	for _, tc := range []struct {
		name string
		r    resourcelock.LeaderElectionRecord
		err  error
	}{
		{"the release", resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}, nil},
		{"a renewal that failed", renewal, errors.New("injected: timeout")},
		{"another holder's record", resourcelock.LeaderElectionRecord{HolderIdentity: "cp2", LeaseDurationSeconds: 5}, nil},
	} {
		lock.err = tc.err
		_ = w.Update(context.Background(), tc.r)
		if !w.lastWrite().Equal(renewed) {
			t.Fatalf("%s moved the last write from %v to %v", tc.name, renewed, w.lastWrite())
		}
	}
	lock.err = apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, DefaultLease, errors.New("the object has been modified"))
	_ = w.Update(context.Background(), renewal)
	if !w.lastWrite().IsZero() {
		t.Fatalf("a conflicting write left the last write at %v, want it cleared", w.lastWrite())
	}
}
