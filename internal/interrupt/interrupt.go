// Package interrupt is a run's interrupt context: SIGINT or SIGTERM ends it,
// so a long operation stops at its next step boundary instead of in the
// middle of one. An operation can open a deferral window around steps that
// must not be separated — the join's member-add and the node-state save that
// records it: the first signal inside the window is held until the window
// closes, then ends the context. A second signal inside the window ends it
// at once: the operator insists, and the join's intent journal is what
// recovers that node.
package interrupt

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
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
	stop      func()
}

// ErrInterrupted is the context's cause after a signal.
type ErrInterrupted struct{ Signal os.Signal }

func (e ErrInterrupted) Error() string { return "interrupted by " + e.Signal.String() }

// New starts a run that SIGINT and SIGTERM interrupt. Call Stop when the run
// ends.
func New(parent context.Context, log *slog.Logger) *Run {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
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
	r := &Run{cancel: cancel, log: log}
	r.ctx = context.WithValue(ctx, runKey{}, r)
	done := make(chan struct{})
	var once sync.Once
	r.stop = func() { once.Do(func() { close(done) }) }
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
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
	if r.deferring > 0 && r.pending == nil {
		r.pending = s
		r.log.Warn("signal deferred: this step must finish together with the one before it; a second signal stops at once", "signal", s.String())
		return
	}
	r.cancel(ErrInterrupted{s})
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

// Context ends when the run is interrupted. It carries the run, so code
// handed only the context can open a deferral window (DeferFrom).
func (r *Run) Context() context.Context { return r.ctx }

// Defer opens a deferral window; the returned function closes it, and then
// delivers a signal held meanwhile. Windows nest.
func (r *Run) Defer() (end func()) {
	r.mu.Lock()
	r.deferring++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.deferring--
			if r.deferring == 0 && r.pending != nil {
				s := r.pending
				r.pending = nil
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
