// Package interrupt is a run's interrupt context: SIGINT, SIGTERM or SIGHUP ends it,
// so a long operation stops at its next step boundary instead of in the
// middle of one. An operation can open a deferral window around steps that
// must not be separated — the join's member-add and the node-state save that
// records it: the first signal inside the window is held until the window
// closes, then ends the context. A second SIGINT or SIGTERM inside the
// window ends it at once, and with it the window's own context
// (WindowContext), which the first signal leaves running: the operator
// insists, and the join's intent journal is what recovers that node (a
// second SIGHUP does not: a closing terminal sends two). Hold keeps a
// second signal from ending the process while a cleanup runs.
package interrupt

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// Run is one command run's interrupt state.
type Run struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *slog.Logger

	mu        sync.Mutex
	deferring int
	pending   os.Signal
	// interrupted is set once a signal has ended the run: every signal after
	// it is a second one.
	interrupted bool
	// windows cancel the open window contexts (WindowContext) on a second
	// signal.
	windows map[*windowCtx]struct{}
	stop    func()
}

// windowCtx is one open WindowContext's cancel.
type windowCtx struct{ cancel context.CancelCauseFunc }

// ErrInterrupted is the context's cause after a signal.
type ErrInterrupted struct{ Signal os.Signal }

func (e ErrInterrupted) Error() string { return "interrupted by " + e.Signal.String() }

// Signals are the signals that end a command: SIGINT, SIGTERM and SIGHUP
// (the terminal of a foreground command closing), unless the process started
// with SIGHUP ignored (nohup): asking for it would stop ignoring it.
func Signals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// New starts a run that Signals interrupt. Call Stop when the run ends.
func New(parent context.Context, log *slog.Logger) *Run {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, Signals()...)
	r := NewWithSignals(parent, sigs, log)
	prev := r.stop
	r.stop = func() { signal.Stop(sigs); prev() }
	return r
}

// NewWithSignals is New with the signals delivered on sigs, for tests.
func NewWithSignals(parent context.Context, sigs <-chan os.Signal, log *slog.Logger) *Run {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(parent)
	r := &Run{cancel: cancel, log: log, windows: map[*windowCtx]struct{}{}}
	r.ctx = context.WithValue(ctx, runKey{}, r)
	done := make(chan struct{})
	var once sync.Once
	r.stop = func() { once.Do(func() { close(done) }) }
	// The loop outlives an interrupt (it ends with the parent or Stop): a
	// window opened after the first signal must still see a second one.
	go func() {
		for {
			select {
			case <-done:
				return
			case <-parent.Done():
				return
			case s := <-sigs:
				r.signal(s)
			}
		}
	}()
	return r
}

func (r *Run) signal(s os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s == syscall.SIGHUP && (r.pending != nil || r.interrupted) {
		// A terminal that closes sends two SIGHUPs (its shell passes one on
		// to its jobs, the kernel sends one to the foreground process group
		// as the shell exits): the second is not an operator insisting.
		r.log.Warn("a SIGHUP after the first signal is not taken as a second one (a closing terminal sends two); a second SIGINT or SIGTERM stops at once")
		return
	}
	if r.deferring > 0 && r.pending == nil && !r.interrupted {
		r.pending = s
		r.log.Warn("signal deferred: this step must finish together with the one before it; a second signal stops at once", "signal", s.String())
		return
	}
	if r.deferring > 0 {
		r.log.Warn("second signal inside a deferral window: stopping at once", "signal", s.String())
	}
	r.interrupted = true
	r.cancel(ErrInterrupted{s})
	for w := range r.windows {
		w.cancel(ErrInterrupted{s})
	}
}

type runKey struct{}

// DeferFrom opens a deferral window on the run ctx belongs to (Defer), and is
// a no-op for a context that is not a run's: an operation called from a test
// or a library caller without signal handling defers nothing.
func DeferFrom(ctx context.Context) (end func()) {
	if r, ok := ctx.Value(runKey{}).(*Run); ok {
		return r.Defer()
	}
	return func() {}
}

// WindowContext opens a deferral window on the run ctx belongs to, as
// DeferFrom does, and returns the context the window's work runs on: one that
// keeps ctx's values, is not ended by ctx nor by the first signal (which is
// held until end), but is ended, with ErrInterrupted as its cause, by a second
// signal received while the window is open — the operator insists, and the
// work must stop at its next check instead of finishing the window. A signal
// that arrives when the run was already interrupted before the window opened
// counts as a second one. end closes the window and delivers a held signal to
// the run's context; wctx stays usable after end and no later signal ends it.
// For a ctx that is not a run's, wctx is context.WithoutCancel(ctx), which no
// signal ends, and end does nothing.
//
// A window's work uses it so:
//
//	wctx, end := interrupt.WindowContext(ctx)
//	defer end()
//	... steps on wctx ...
//	end() // the window's last step is done: a held signal now ends ctx
func WindowContext(ctx context.Context) (wctx context.Context, end func()) {
	r, ok := ctx.Value(runKey{}).(*Run)
	if !ok {
		return context.WithoutCancel(ctx), func() {}
	}
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	return wctx, r.open(&windowCtx{cancel: cancel})
}

// SignalHeld reports whether the run ctx belongs to holds a signal in a
// deferral window: the operator asked to stop while a window's work runs.
// Work inside a window that has not yet made the change the window protects
// (a member-add whose lookup is done but whose add RPC is not sent) checks
// it and stops there, changing nothing, as a signal before the window would
// have. False for a context that is not a run's.
func SignalHeld(ctx context.Context) bool {
	r, ok := ctx.Value(runKey{}).(*Run)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending != nil
}

// Context ends when the run is interrupted. It carries the run, so code
// handed only the context can open a deferral window (DeferFrom).
func (r *Run) Context() context.Context { return r.ctx }

// Defer opens a deferral window; the returned function closes it, and then
// delivers a signal held meanwhile. Windows nest.
func (r *Run) Defer() (end func()) { return r.open(nil) }

// open opens a deferral window and registers w (nil for none) as its context
// in the same step, so no signal falls between the two.
func (r *Run) open(w *windowCtx) (end func()) {
	r.mu.Lock()
	r.deferring++
	if w != nil {
		r.windows[w] = struct{}{}
	}
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if w != nil {
				delete(r.windows, w)
			}
			r.deferring--
			if r.deferring == 0 && r.pending != nil {
				s := r.pending
				r.pending = nil
				r.interrupted = true
				r.cancel(ErrInterrupted{s})
			}
		})
	}
}

// Stop releases the run's signal handling.
func (r *Run) Stop() {
	r.stop()
	r.cancel(context.Canceled)
}

// held counts the open Holds of this process.
var held atomic.Int64

// Hold opens a span that a second signal must not cut short. A second
// SIGINT or SIGTERM otherwise ends a command still stopping (the process
// dies of it: cmd/stratum's notifyInterrupts); a command that handles its
// signals itself (`stratum up` and `server`: a forced shutdown, a join's
// held window) holds for its life, and a cleanup that puts back what an
// interrupted operation changed holds while it runs (the VIP candidate
// started again after a renewal's restarts, a minted token deleted again,
// the maintenance fence released). end closes the span; a second call does
// nothing.
func Hold() (end func()) {
	held.Add(1)
	var once sync.Once
	return func() { once.Do(func() { held.Add(-1) }) }
}

// Held reports whether a Hold is open.
func Held() bool { return held.Load() > 0 }
