// Package vip is stratum's virtual IP, the cluster's one client address, as
// kube-vip's ARP mode provides it: the control-plane nodes elect a holder
// through a Lease on their own apiservers, and the holder announces the
// address.
//
// The election (Run) is one implementation for real nodes and the simulator;
// what holding the address means is an Announcer. On a Linux node
// NetlinkAnnouncer puts the address on an interface and sends gratuitous ARP;
// the simulator's points its forwarder at the host.
package vip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The election's defaults, kube-vip's.
const (
	// DefaultLease is the Lease the candidates elect through.
	DefaultLease = "stratum-vip"
	// LeaseNamespace holds the Lease.
	LeaseNamespace = "kube-system"

	DefaultLeaseDuration = 5 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
	// DefaultReannounce is how often a holder sends its gratuitous ARP
	// again (NetlinkAnnouncer.Reannounce).
	DefaultReannounce = 3 * time.Second
	// DefaultAddressLifetime is the VIP address's lifetime in the kernel
	// (NetlinkAnnouncer.Lifetime), renewed every third of it while held. A
	// holder killed at T renewed its Lease at T-RetryPeriod at the latest,
	// so no other node wins the Lease before T-RetryPeriod+LeaseDuration
	// (T+4 s); its address, renewed at T at the latest, is gone by
	// T+Lifetime plus the kernel's rounding up to a whole second (T+3 s).
	DefaultAddressLifetime = DefaultLeaseDuration - DefaultRetryPeriod - 2*time.Second
)

// Config is one node's VIP candidate.
type Config struct {
	// Client reaches the node's own apiserver (admin credentials: the
	// candidate reads and writes a Lease in kube-system).
	Client kubernetes.Interface
	// Identity names the candidate in the Lease: the node name.
	Identity string
	// Lease is the Lease's name in LeaseNamespace; DefaultLease when empty.
	Lease string
	// LeaseDuration, RenewDeadline and RetryPeriod are the client-go leader
	// election timings; each defaults to kube-vip's when zero.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// CanHold, when set, is asked on every win before the address is taken:
	// the node's apiserver certificate must name the VIP, or every client
	// that dials the VIP fails its TLS check. An error refuses the win: the
	// address is not taken, the lease is released for the other nodes and
	// Run returns the error.
	CanHold func() error
	// Announcer holds and releases the address.
	Announcer Announcer
	// Log receives the candidate's decisions; nil discards them.
	Log *slog.Logger

	// after is the wait between terms (time.After; a test records it).
	after func(time.Duration) <-chan time.Time
}

// Announcer makes the node the VIP's holder and stops it being one. Both
// methods are idempotent: Run releases on every stop, held or not.
type Announcer interface {
	// Hold takes the address. It returns early with ctx's error when ctx
	// ends (leadership lost or the candidate stopping).
	Hold(ctx context.Context) error
	// Release gives the address up; not holding it is not an error.
	Release() error
}

// leaseGate is implemented by an Announcer that keeps the address alive
// after Hold (NetlinkAnnouncer's lifetime renewals and re-announcements).
// Before each term Run hands it when this candidate last renewed the lease
// (lastWrite: the start of its last successful write naming itself the
// holder; zero once a write found another holder) and how long after that
// it may keep the address: LeaseDuration less one RetryPeriod, about when
// client-go itself gives the lease up (its renewals fail for RenewDeadline
// after waiting RetryPeriod). No other candidate counts the lease run out
// before lastWrite plus LeaseDuration, so a holder whose renewals stall (an
// apiserver or etcd that stops answering, a process frozen and resumed)
// stops announcing the address before anyone else may take it, instead of
// refreshing it until client-go notices and its release read times out.
type leaseGate interface {
	gate(lastWrite func() time.Time, within time.Duration)
}

// writeClock is a lease lock that records when its last successful renewal
// (a Create or Update naming this candidate the holder) began. client-go's
// release, which writes no holder, is not a renewal; a write refused as a
// conflict (another candidate wrote the lease since it was read) clears it:
// a process whose clock stood still (a VM paused with kvmclock) meets one
// at its first write after it resumes.
type writeClock struct {
	resourcelock.Interface
	mu   sync.Mutex
	last time.Time
}

func (w *writeClock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return w.wrote(time.Now(), r, w.Interface.Create(ctx, r))
}

func (w *writeClock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return w.wrote(time.Now(), r, w.Interface.Update(ctx, r))
}

func (w *writeClock) wrote(began time.Time, r resourcelock.LeaderElectionRecord, err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil && r.HolderIdentity == w.Identity() && r.LeaseDurationSeconds > 1:
		w.last = began
	case apierrors.IsConflict(err):
		w.last = time.Time{}
	}
	return err
}

// lastWrite is when the last successful renewal began; zero before one.
func (w *writeClock) lastWrite() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// withDefaults returns cfg with its zero timings and lease name defaulted, or
// an error for a field Run cannot do without.
func (cfg Config) withDefaults() (Config, error) {
	switch {
	case cfg.Client == nil:
		return cfg, errors.New("vip: Config.Client is nil; the candidate needs its node's apiserver")
	case cfg.Identity == "":
		return cfg, errors.New("vip: Config.Identity is empty; the candidate needs its node name")
	case cfg.Announcer == nil:
		return cfg, errors.New("vip: Config.Announcer is nil; the candidate has nothing to hold the address with")
	}
	if cfg.Lease == "" {
		cfg.Lease = DefaultLease
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	cfg.Log = cfg.Log.With("lease", LeaseNamespace+"/"+cfg.Lease, "identity", cfg.Identity)
	return cfg, nil
}

// Run is a VIP candidate: it runs client-go leader election on the Lease
// (a LeaseLock, released on cancel) until ctx ends, holding the address
// through cfg.Announcer while it holds the lease. After a lost lease it runs
// the election again, RetryPeriod later, as kube-vip does.
//
// When the candidate stops (ctx ends) it releases the address before the
// lease, so the next holder never announces it beside this one. Run releases
// the address once at its start too: a node that crashed while holding it
// must not keep announcing it.
//
// Run returns nil when ctx ends, CanHold's error (wrapped) when a win was
// refused, or the error that stopped the election from starting.
//
// A candidate whose Hold keeps failing (a node that may not add the
// address: no CAP_NET_ADMIN, an interface gone) waits twice as long after
// each failure, up to maxHoldBackoff RetryPeriods, and logs a failure as an
// error once while it fails the same way; the lease it releases each time
// lets another node take the VIP meanwhile.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := cfg.Announcer.Release(); err != nil {
		cfg.Log.Error("releasing the VIP left from an earlier run failed; running for it anyway", "err", err)
	}
	fails := &holdFailures{forgetAfter: 2 * maxHoldBackoff * cfg.RetryPeriod}
	for {
		if err := runElection(ctx, cfg, fails); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-cfg.after(fails.backoff(cfg.RetryPeriod)):
		}
	}
}

// maxHoldBackoff bounds the wait after failed Holds, in RetryPeriods.
const maxHoldBackoff = 16

// holdFailures are a candidate's consecutive failed Holds, across its
// terms: how many, when the last was, and the last failure of a Hold and of
// a release logged as an error. Failures older than forgetAfter are
// forgotten: a candidate that waited long for the lease (another node held
// the VIP) starts afresh, its first failure an error line and a short wait.
type holdFailures struct {
	forgetAfter time.Duration

	mu              sync.Mutex
	n               int
	last            time.Time
	logged          string
	releaseLoggedAs string
}

// forgetStale clears failures older than forgetAfter; f.mu is held.
func (f *holdFailures) forgetStale() {
	if f.n > 0 && time.Since(f.last) > f.forgetAfter {
		f.n, f.logged, f.releaseLoggedAs = 0, "", ""
	}
}

// failed counts a failed Hold and says whether err is worth an error line:
// the first failure, or one that differs from the last logged.
func (f *holdFailures) failed(err error) (loud bool, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetStale()
	f.n++
	f.last = time.Now()
	if msg := err.Error(); msg != f.logged {
		f.logged = msg
		return true, f.n
	}
	return false, f.n
}

// releaseFailed says whether a failed release is worth an error line: one
// outside a run of failed Holds, or one whose error differs from the last
// logged.
func (f *holdFailures) releaseFailed(err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetStale()
	if msg := err.Error(); f.n == 0 || msg != f.releaseLoggedAs {
		f.releaseLoggedAs = msg
		return true
	}
	return false
}

// held clears the failures and returns how many there were.
func (f *holdFailures) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetStale()
	n := f.n
	f.n, f.logged, f.releaseLoggedAs = 0, "", ""
	return n
}

// backoff is the wait before the next term: retry, doubled for each
// consecutive failed Hold after the first, up to maxHoldBackoff times retry.
func (f *holdFailures) backoff(retry time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetStale()
	if f.n <= 1 {
		return retry
	}
	return retry * time.Duration(min(1<<min(f.n-1, 30), maxHoldBackoff))
}

// term is one run of the leader elector: from the first attempt to acquire
// the lease to the lease lost or given up. Its mutex orders Hold before
// Release, as the elector calls OnStartedLeading in a goroutine of its own.
type term struct {
	cfg   Config
	fails *holdFailures

	mu      sync.Mutex
	over    bool  // the term ended: no more Hold
	held    bool  // Hold succeeded and Release has not
	refused error // CanHold's answer to a win
}

// end marks the term over and releases the address if it is held. A failed
// release keeps held, so the term's last end tries again.
func (t *term) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.over = true
	if !t.held {
		return
	}
	if err := t.cfg.Announcer.Release(); err != nil {
		if t.fails.releaseFailed(err) {
			t.cfg.Log.Error("releasing the VIP failed", "err", err)
		} else {
			t.cfg.Log.Debug("releasing the VIP failed again", "err", err)
		}
		return
	}
	t.held = false
	t.cfg.Log.Info("released the VIP")
}

// won is the elector's OnStartedLeading: unless the term is over, it asks
// CanHold and then takes the address. It reports whether the term must stop
// (and so the lease be released): a refused win, or a Hold that failed.
func (t *term) won(ctx context.Context) (stop bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over {
		return false
	}
	if t.cfg.CanHold != nil {
		if err := t.cfg.CanHold(); err != nil {
			t.refused = err
			t.over = true
			t.cfg.Log.Error("won the VIP lease but may not hold the VIP; releasing the lease and stopping", "err", err)
			return true
		}
	}
	if err := t.cfg.Announcer.Hold(ctx); err != nil {
		if ctx.Err() == nil {
			if loud, n := t.fails.failed(err); loud {
				t.cfg.Log.Error("taking the VIP failed; releasing it and the lease, then running again, after a wait that grows while it fails (logged again when the failure changes)", "err", err, "tries", n)
			} else {
				t.cfg.Log.Debug("taking the VIP failed again", "err", err, "tries", n)
			}
		}
		if rerr := t.cfg.Announcer.Release(); rerr != nil {
			t.held = true // let end try again
			if t.fails.releaseFailed(rerr) {
				t.cfg.Log.Error("releasing the half-taken VIP failed", "err", rerr)
			} else {
				t.cfg.Log.Debug("releasing the half-taken VIP failed again", "err", rerr)
			}
		}
		return true
	}
	t.held = true
	if n := t.fails.held(); n > 0 {
		t.cfg.Log.Info("holds the VIP", "after failed tries", n)
	} else {
		t.cfg.Log.Info("holds the VIP")
	}
	return false
}

// runElection runs one term and returns the error that ends the candidate:
// a refused win or an election that cannot be built; nil to run again.
func runElection(ctx context.Context, cfg Config, fails *holdFailures) error {
	t := &term{cfg: cfg, fails: fails}
	// The elector's context ends only after the address is released, so the
	// elector releases the lease (ReleaseOnCancel) with the address gone.
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopAfterRelease := func() { t.end(); cancel() }
	defer context.AfterFunc(ctx, stopAfterRelease)()

	lock := &writeClock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: cfg.Lease, Namespace: LeaseNamespace},
		Client:     cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
	}}
	if g, ok := cfg.Announcer.(leaseGate); ok {
		g.gate(lock.lastWrite, cfg.LeaseDuration-cfg.RetryPeriod)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Lease + "@" + cfg.Identity,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				// Hold also stops early when the candidate stops.
				hctx, hcancel := context.WithCancel(lctx)
				defer hcancel()
				defer context.AfterFunc(ctx, hcancel)()
				if t.won(hctx) {
					stopAfterRelease()
				}
			},
			OnStoppedLeading: t.end,
		},
	})
	if err != nil {
		return fmt.Errorf("vip: start the election on lease %s/%s as %s: %w; the VIP is not held here; fix the timings", LeaseNamespace, cfg.Lease, cfg.Identity, err)
	}
	le.Run(ectx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refused != nil {
		return fmt.Errorf("%s won the VIP lease but did not take the VIP; it released the lease and stopped its candidate: %w", cfg.Identity, t.refused)
	}
	return nil
}
