package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/token"
)

// fenceLease is the maintenance fence: the Lease (kube-system) that joins,
// mints' uploads, rekeys, re-uploads and CA rotations hold while they change
// the cluster's shared state.
const fenceLease = "stratum-maintenance"

// Fence errors a caller branches on.
var (
	// ErrFenceHeld: another holder has the fence and its lease has not run out.
	ErrFenceHeld = errors.New("maintenance fence is held")
	// ErrFenceLost: the fence is no longer this holder's, or its lease ran out.
	ErrFenceLost = errors.New("maintenance fence lost")
)

// Fence is a held maintenance fence. Expiry is judged by stratum's own clock
// (the host's), never the server's.
type Fence struct {
	cs       kubernetes.Interface
	holder   string
	duration time.Duration
	now      func() time.Time

	mu sync.Mutex
	// acquired is the acquireTime this holder wrote: a fence taken by someone
	// else and retaken by us would carry another, so confirm sees the gap.
	acquired time.Time
	renewed  time.Time
}

// TakeFence takes the maintenance fence for holder for d through cs: it
// creates the Lease when absent, takes it when unheld, released, its own, or
// run out (by this host's clock), and refuses with ErrFenceHeld, naming the
// holder, otherwise. A concurrent taker makes the write conflict and the take
// is judged again from fresh state.
func (n *Node) TakeFence(ctx context.Context, cs kubernetes.Interface, holder string, d time.Duration) (*Fence, error) {
	if holder == "" || d < time.Second {
		return nil, fmt.Errorf("take maintenance fence: holder %q and duration %s: need a holder and at least 1s", holder, d)
	}
	f := &Fence{cs: cs, holder: holder, duration: d, now: n.env.Host.Now}
	leases := cs.CoordinationV1().Leases(certsNamespace)
	// take is one judged take. A concurrent taker, or a create that lost
	// the race, is a conflict; a write whose answer was lost may have been
	// applied. Either way apiretry.Ensure runs it again on fresh state, where
	// a take of ours that was applied reads as our own fence.
	take := func() error {
		now := metav1.NewMicroTime(f.now().Truncate(time.Microsecond))
		secs := int32(d / time.Second)
		cur, err := leases.Get(ctx, fenceLease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: fenceLease, Namespace: certsNamespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs,
					AcquireTime: &now, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Lease %s/%s: %w", certsNamespace, fenceLease, raceAsConflict(err))
			}
			f.acquired, f.renewed = now.Time, now.Time
			return nil
		}
		if err != nil {
			return fmt.Errorf("read Lease %s/%s: %w", certsNamespace, fenceLease, err)
		}
		if other := leaseHolder(cur); other != "" && other != holder && !leaseRanOut(cur, now.Time) {
			return fmt.Errorf("%w by %q until %s; nothing was changed, retry once it is released", ErrFenceHeld, other, leaseEnd(cur).Format(time.RFC3339))
		}
		transitions := int32(0)
		if cur.Spec.LeaseTransitions != nil {
			transitions = *cur.Spec.LeaseTransitions
		}
		if leaseHolder(cur) != holder {
			transitions++
		}
		cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds = &holder, &secs
		cur.Spec.AcquireTime, cur.Spec.RenewTime, cur.Spec.LeaseTransitions = &now, &now, &transitions
		if _, err := leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Lease %s/%s: %w", certsNamespace, fenceLease, err)
		}
		f.acquired, f.renewed = now.Time, now.Time
		return nil
	}
	if err := apiretry.Ensure(ctx, take); err != nil {
		if apierrors.IsConflict(err) {
			return nil, fmt.Errorf("take maintenance fence: Lease %s/%s kept changing under the take (%w); nothing was taken, retry", certsNamespace, fenceLease, err)
		}
		return nil, fmt.Errorf("take maintenance fence: %w", err)
	}
	return f, nil
}

// Holder is the identity the fence is held as.
func (f *Fence) Holder() string { return f.holder }

// Confirm fails with ErrFenceLost unless the Lease is still this holder's,
// from this take, and unexpired by this host's clock. Hand it to a
// publication as its confirm.
func (f *Fence) Confirm(ctx context.Context) error {
	_, err := f.confirmed(ctx)
	return err
}

// confirmed is Confirm returning the Lease as read: with ErrFenceLost too,
// when it was read.
func (f *Fence) confirmed(ctx context.Context) (*coordinationv1.Lease, error) {
	cur, err := f.cs.CoordinationV1().Leases(certsNamespace).Get(ctx, fenceLease, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Lease %s/%s is gone", ErrFenceLost, certsNamespace, fenceLease)
	}
	if err != nil {
		return nil, fmt.Errorf("confirm maintenance fence: read Lease %s/%s: %w", certsNamespace, fenceLease, err)
	}
	f.mu.Lock()
	acquired := f.acquired
	f.mu.Unlock()
	now := f.now()
	switch {
	case leaseHolder(cur) != f.holder:
		return cur, fmt.Errorf("%w: held by %q now, not %q", ErrFenceLost, leaseHolder(cur), f.holder)
	case cur.Spec.AcquireTime == nil || !cur.Spec.AcquireTime.Time.Equal(acquired):
		return cur, fmt.Errorf("%w: %q took it again since (a different acquisition)", ErrFenceLost, f.holder)
	case leaseRanOut(cur, now):
		return cur, fmt.Errorf("%w: its lease ran out at %s (now %s)", ErrFenceLost, leaseEnd(cur).Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return cur, nil
}

// Renew extends the fence by its duration from now, if it is still ours.
// A renewal that conflicts or lost its answer is judged again on fresh
// state: still ours, it is written again; taken or run out, it is
// ErrFenceLost.
func (f *Fence) Renew(ctx context.Context) error {
	err := apiretry.Ensure(ctx, func() error {
		cur, err := f.confirmed(ctx)
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(f.now().Truncate(time.Microsecond))
		cur.Spec.RenewTime = &now
		if _, err := f.cs.CoordinationV1().Leases(certsNamespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
		f.mu.Lock()
		f.renewed = now.Time
		f.mu.Unlock()
		return nil
	})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("renew maintenance fence: %w: the Lease kept changing under the renewal (%w)", ErrFenceLost, err)
	}
	if err != nil {
		return fmt.Errorf("renew maintenance fence: %w", err)
	}
	return nil
}

// Release gives the fence up (clears the holder) if it is still ours. A
// fence already lost is ErrFenceLost; the Lease is then left as it is.
// A release whose answer was lost is judged again: a Lease found unheld then
// was released by it.
func (f *Fence) Release(ctx context.Context) error {
	sent := false
	err := apiretry.Ensure(ctx, func() error {
		cur, err := f.confirmed(ctx)
		if sent && errors.Is(err, ErrFenceLost) && cur != nil && leaseHolder(cur) == "" {
			return nil
		}
		if err != nil {
			return err
		}
		cur.Spec.HolderIdentity = nil
		_, err = f.cs.CoordinationV1().Leases(certsNamespace).Update(ctx, cur, metav1.UpdateOptions{})
		sent = sent || apiretry.LostConnection(err)
		return err
	})
	if err != nil {
		return fmt.Errorf("release maintenance fence: %w", err)
	}
	return nil
}

// ensureFenceLease creates the fence Lease unheld when absent, so a
// bootstrap-group holder, which RBAC lets update but not create it, can take it.
func ensureFenceLease(ctx context.Context, cs kubernetes.Interface) error {
	err := apiretry.Ensure(ctx, func() error {
		_, err := cs.CoordinationV1().Leases(certsNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: fenceLease, Namespace: certsNamespace},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create fence Lease %s/%s: %w", certsNamespace, fenceLease, err)
	}
	return nil
}

func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseEnd is when the lease runs out: renew (or acquire) time plus duration.
func leaseEnd(l *coordinationv1.Lease) time.Time {
	var t time.Time
	switch {
	case l.Spec.RenewTime != nil:
		t = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		t = l.Spec.AcquireTime.Time
	default:
		return time.Time{}
	}
	if l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}
	}
	return t.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
}

// fenceHeldDenial is the join fence policy's refusal of a take while
// another holder's lease has not run out by the renew time the take writes.
const fenceHeldDenial = "the fence is held by another holder whose lease has not run out"

// fenceFutureSlack is how far ahead of this machine's clock a hold's renewal
// (or take) may be and still count as a holder's: far beyond what two clocks
// differ by when each passes a join's skew check (2 × maxClockSkew), or an
// admin node's clock that no join checks is plausibly off by, and far short
// of a hold that never ends.
const fenceFutureSlack = 30 * time.Minute

// leaseRanOut reports whether l's hold has run out by now. A hold renewed
// (or taken) further ahead of now than fenceFutureSlack is judged run out
// too: no holder's clock wrote it, and the admission policy, which cannot
// read the time, lets a control-plane bootstrap token write its own hold so
// (until 2126, as far as renewTime plus duration goes), which refused every
// mint, rekey and join until the Lease was deleted by hand.
func leaseRanOut(l *coordinationv1.Lease, now time.Time) bool {
	for _, t := range []*metav1.MicroTime{l.Spec.RenewTime, l.Spec.AcquireTime} {
		if t != nil && t.Time.After(now.Add(fenceFutureSlack)) {
			return true
		}
	}
	return !now.Before(leaseEnd(l))
}

// fenceOpLease is how long an operation's hold of the fence lasts between
// renewals (withFence renews it every third of that): short, so a holder that
// crashed frees the fence within a minute, yet far above one renewal's round
// trip.
const fenceOpLease = time.Minute

// fenceReleaseTimeout bounds releasing the fence after the operation, on a
// context its caller's cancellation does not end.
const fenceReleaseTimeout = 30 * time.Second

// fenceHolder is the identity an operation of this node holds the fence as:
// "<operation>@<node name>", which a refused operation elsewhere names.
func (n *Node) fenceHolder(op string) string { return op + "@" + n.env.Host.Name() }

// withFence runs fn while holding the maintenance fence as holder for d
// through cs: it takes the fence (refusing with ErrFenceHeld, naming the
// holder, before fn runs, so nothing is written), renews it every d/3 while fn
// runs, hands fn the fence's Confirm to recheck immediately before each write,
// and releases it when fn returns, also on error or cancellation. A renewal
// that fails is logged and renewal stops: the fence may then run out, which
// the next confirm refuses. A release that fails is logged, not returned:
// fn's outcome stands, and the fence frees itself when its lease runs out.
func (n *Node) withFence(ctx context.Context, cs kubernetes.Interface, holder string, d time.Duration, fn func(ctx context.Context, confirm func(context.Context) error) error) error {
	f, err := n.TakeFence(ctx, cs, holder, d)
	if err != nil {
		return Refusal(err) // fn has not run: nothing is written
	}
	rctx, stopRenew := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(d / 3)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if err := f.Renew(rctx); err != nil {
					if rctx.Err() == nil {
						n.log.Warn("maintenance fence renewal failed; the operation's next fence recheck decides", "holder", holder, "err", err)
					}
					return
				}
			}
		}
	}()
	defer func() {
		defer interrupt.Hold()() // released, not left to run out, after a second Ctrl-C too
		stopRenew()
		<-renewed
		relctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fenceReleaseTimeout)
		defer cancel()
		if err := f.Release(relctx); err != nil {
			n.log.Warn("maintenance fence not released; it frees itself when its lease runs out", "holder", holder, "lease", d, "err", err)
		}
	}()
	return fn(ctx, f.Confirm)
}

// TakeJoinFence takes the maintenance fence for a control-plane join that
// authenticates with the control-plane bootstrap token tokenID, through cs
// (a client authenticating with that token). The holder is the token's own
// username, system:bootstrap:<tokenID>, the only holder the stratum-join-fence
// admission policy lets such a client write, and d may be at most
// fenceMaxLeaseSeconds, the longest hold it admits; both are refused here,
// before anything is written. The Lease must exist — every control-plane mint
// creates it (GrantCertsReader) — since the token may update it but not create
// it. Refusals are as TakeFence's: ErrFenceHeld, naming the holder, while
// another holder's lease has not run out.
func (n *Node) TakeJoinFence(ctx context.Context, cs kubernetes.Interface, tokenID string, d time.Duration) (*Fence, error) {
	if !token.ValidID(tokenID) {
		return nil, fmt.Errorf("take join fence: token ID %q is not 6 [a-z0-9]; nothing was changed", tokenID)
	}
	if d > fenceMaxLeaseSeconds*time.Second {
		return nil, fmt.Errorf("take join fence: a bootstrap token may hold the fence for at most %ds, not %s; nothing was changed", fenceMaxLeaseSeconds, d)
	}
	f, err := n.TakeFence(ctx, cs, bootstrapapi.BootstrapUserPrefix+tokenID, d)
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), fenceHeldDenial) {
		// The take judged the hold run out because its renewal lies more
		// than fenceFutureSlack ahead of this clock; the policy judges by
		// the renew times written, and the hold is live.
		return nil, fmt.Errorf("take join fence: %w: the cluster's admission policy refused the take (%v): the holder's last renewal is dated more than %s ahead of this machine's clock, which took it for no live hold, and by the renew times written it has not run out (the holder's clock runs ahead of this machine's, or this one's behind); nothing was changed: check both machines' time (timedatectl), and run the join again once the holder is done", ErrFenceHeld, err, fenceFutureSlack)
	}
	if apierrors.IsUnauthorized(err) {
		return nil, fmt.Errorf("take join fence: the apiserver does not accept token %s (%v): deleted or expired, or an API server that did not become ready within %s; nothing was changed: %s (%w)", tokenID, err, apiretry.LostWait, mintHint, ErrTokenRefused)
	}
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("take join fence: %w; nothing was changed: the token may update the fence Lease %s/%s but not create it, so it must be a live control-plane token of a cluster that has minted one (%s)", err, certsNamespace, fenceLease, mintHint)
	}
	if err != nil {
		return nil, fmt.Errorf("take join fence: %w", err)
	}
	return f, nil
}
