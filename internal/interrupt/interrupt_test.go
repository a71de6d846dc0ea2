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
