package interrupt

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

func waitDone(t *testing.T, ctx context.Context, want bool) {
	t.Helper()
	select {
	case <-ctx.Done():
		if !want {
			t.Fatal("context ended")
		}
	case <-time.After(200 * time.Millisecond):
		if want {
			t.Fatal("context did not end")
		}
	}
}

func TestSignalEndsTheContext(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	sigs <- syscall.SIGINT
	waitDone(t, r.Context(), true)
	var ie ErrInterrupted
	if !errors.As(context.Cause(r.Context()), &ie) || ie.Signal != syscall.SIGINT {
		t.Fatalf("cause = %v", context.Cause(r.Context()))
	}
}

func TestFirstSignalInWindowIsDeferredUntilItCloses(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	end := r.Defer()
	sigs <- syscall.SIGTERM
	waitDone(t, r.Context(), false)
	end()
	waitDone(t, r.Context(), true)
}

func TestSecondSignalInWindowStopsAtOnce(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	end := r.Defer()
	defer end()
	sigs <- syscall.SIGINT
	waitDone(t, r.Context(), false)
	sigs <- syscall.SIGINT
	waitDone(t, r.Context(), true)
}

// TestAClosingTerminalIsOneSignal: the two SIGHUPs a closing terminal sends
// (its shell's to its jobs, the kernel's to the foreground process group)
// are one signal: held until the window closes, not a second that stops at
// once; a SIGINT after them still is.
func TestAClosingTerminalIsOneSignal(t *testing.T) {
	sigs := make(chan os.Signal, 3)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	end := r.Defer()
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGHUP
	waitDone(t, r.Context(), false)
	end()
	waitDone(t, r.Context(), true)

	sigs2 := make(chan os.Signal, 3) // r's loop still reads sigs
	r2 := NewWithSignals(context.Background(), sigs2, nil)
	defer r2.Stop()
	ctx, endWindow := WindowContext(r2.Context())
	defer endWindow()
	sigs2 <- syscall.SIGHUP
	sigs2 <- syscall.SIGHUP
	waitDone(t, ctx, false)
	sigs2 <- syscall.SIGINT
	waitDone(t, ctx, true)
}

func TestWindowWithoutSignalChangesNothing(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	r.Defer()()
	waitDone(t, r.Context(), false)
}

func TestDeferFromContext(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	ctx, cancel := context.WithCancel(r.Context()) // a derived context still carries the run
	defer cancel()
	end := DeferFrom(ctx)
	sigs <- syscall.SIGINT
	waitDone(t, ctx, false)
	end()
	waitDone(t, ctx, true)
	DeferFrom(context.Background())() // no run: a no-op
}

func causeIsSignal(t *testing.T, ctx context.Context, want os.Signal) {
	t.Helper()
	var ie ErrInterrupted
	if !errors.As(context.Cause(ctx), &ie) || ie.Signal != want {
		t.Fatalf("cause = %v, want ErrInterrupted{%v}", context.Cause(ctx), want)
	}
}

// TestWindowContextSecondSignalEndsTheWindow: the first signal inside the
// window ends neither the window's context nor the run's; the second ends
// both at once, the window's with ErrInterrupted as its cause.
func TestWindowContextSecondSignalEndsTheWindow(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	wctx, end := WindowContext(r.Context())
	defer end()
	sigs <- syscall.SIGINT
	waitDone(t, wctx, false)
	waitDone(t, r.Context(), false)
	sigs <- syscall.SIGTERM
	waitDone(t, wctx, true)
	causeIsSignal(t, wctx, syscall.SIGTERM)
	waitDone(t, r.Context(), true)
}

// TestWindowContextHeldSignalDeliveredAtEnd: one signal inside the window is
// held, then ends the run's context when the window closes; the window's
// context is not ended by it nor by any later signal.
func TestWindowContextHeldSignalDeliveredAtEnd(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	ctx, cancel := context.WithCancel(r.Context()) // a derived context still carries the run
	defer cancel()
	wctx, end := WindowContext(ctx)
	sigs <- syscall.SIGINT
	waitDone(t, ctx, false)
	end()
	waitDone(t, ctx, true)
	causeIsSignal(t, r.Context(), syscall.SIGINT)
	sigs <- syscall.SIGINT
	waitDone(t, wctx, false)
	end() // a second end is a no-op
}

// TestWindowContextAfterInterrupt: a window opened on a run a signal already
// ended is not ended by that signal, but any signal inside it is a second one.
func TestWindowContextAfterInterrupt(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	sigs <- syscall.SIGINT
	waitDone(t, r.Context(), true)
	wctx, end := WindowContext(r.Context())
	defer end()
	waitDone(t, wctx, false)
	sigs <- syscall.SIGINT
	waitDone(t, wctx, true)
}

// TestWindowContextNestedWindows: a second signal ends every open window's
// context, and the values of the run's context carry into the window's.
func TestWindowContextNestedWindows(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	outer, endOuter := WindowContext(r.Context())
	defer endOuter()
	inner, endInner := WindowContext(outer) // the window's context carries the run
	defer endInner()
	sigs <- syscall.SIGINT
	waitDone(t, outer, false)
	waitDone(t, inner, false)
	sigs <- syscall.SIGINT
	waitDone(t, outer, true)
	waitDone(t, inner, true)
}

// TestWindowContextWithoutRun: with no run, nothing ends the window's context,
// not even the end of ctx.
func TestWindowContextWithoutRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wctx, end := WindowContext(ctx)
	cancel()
	waitDone(t, wctx, false)
	end()
	waitDone(t, wctx, false)
}

// TestSignalHeldSeesTheSignalAWindowHolds: work inside a window can tell
// that the operator asked to stop, through the window's own context, while
// that context and the run's still run; the held signal ends the run once the
// window closes, and no signal is held then.
func TestSignalHeldSeesTheSignalAWindowHolds(t *testing.T) {
	if SignalHeld(context.Background()) {
		t.Fatal("SignalHeld of a context that is no run's = true")
	}
	sigs := make(chan os.Signal, 1)
	r := NewWithSignals(context.Background(), sigs, nil)
	defer r.Stop()
	wctx, end := WindowContext(r.Context())
	if SignalHeld(wctx) {
		t.Fatal("SignalHeld before any signal = true")
	}
	sigs <- syscall.SIGINT
	for deadline := time.Now().Add(5 * time.Second); !SignalHeld(wctx); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SignalHeld never saw the signal the window holds")
		}
	}
	if !SignalHeld(r.Context()) {
		t.Error("SignalHeld of the run's context = false while its window holds a signal")
	}
	waitDone(t, wctx, false)
	waitDone(t, r.Context(), false)
	end()
	waitDone(t, r.Context(), true)
	if SignalHeld(wctx) {
		t.Error("SignalHeld after the window delivered the signal = true")
	}
}
