package ha

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestAskWhileSilent: a server that does not answer is asked again until it
// answers, with the wait reported; any answer, a wrong one too, ends the
// wait at once; silence is given up after silentWithin.
func TestAskWhileSilent(t *testing.T) {
	t.Parallel() // its give-up case waits silentWithin
	silent := errors.New("nothing answered")
	wrong := errors.New("another cluster's certificate")
	var progress []string
	n := &Node{env: Env{Progress: func(line string) { progress = append(progress, line) }}, log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()

	calls := 0
	err := n.askWhileSilent(ctx, "the VIP 198.18.0.10", silentWithin, silent, func() error {
		if calls++; calls < 3 {
			return silent
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("silent twice, then an answer: %v after %d asks, want nil after 3", err, calls)
	}
	if len(progress) != 1 || !strings.Contains(progress[0], "waiting for the VIP 198.18.0.10 to answer (nothing answered)") {
		t.Fatalf("progress while waiting: %q", progress)
	}

	calls = 0
	if err := n.askWhileSilent(ctx, "x", silentWithin, silent, func() error { calls++; return wrong }); !errors.Is(err, wrong) || calls != 1 {
		t.Fatalf("a wrong answer: %v after %d asks, want it after 1", err, calls)
	}

	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	err = n.askWhileSilent(cctx, "x", silentWithin, silent, func() error {
		if calls++; calls == 2 {
			cancel()
		}
		return silent
	})
	if !errors.Is(err, silent) || calls != 2 {
		t.Fatalf("silence until ctx ends: %v after %d asks, want the silence after 2", err, calls)
	}

	start := time.Now()
	calls = 0
	if err := n.askWhileSilent(ctx, "x", silentWithin, silent, func() error { calls++; return silent }); !errors.Is(err, silent) {
		t.Fatalf("silence throughout: %v, want the silence", err)
	}
	if took := time.Since(start); took < silentWithin || calls < int(silentWithin/silentPoll)/2 {
		t.Fatalf("silence throughout gave up after %s and %d asks, want %s of asks every %s", took, calls, silentWithin, silentPoll)
	}
}
