package cli

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// Options.Checkpoint is the hook of the node a command builds: a join on a
// temporary root reaches join-start (its refusals passed, nothing written
// yet), and the hook's error is the command's.
func TestRunPassesTheCheckpointHook(t *testing.T) {
	opts, h := onTempHost(t)
	addrs := []netip.Addr{netip.MustParseAddr("198.18.7.5")} // detected, whatever this machine's network
	h.nodeAddrs = &addrs
	var seen []string
	stop := errors.New("test stops the join at its first checkpoint")
	opts.Checkpoint = func(_ context.Context, name string) error {
		seen = append(seen, name)
		return stop
	}
	code, out, errOut := runCLI(t, opts, "server", "--server", "https://10.0.0.10:6443", "--token", "abcdef.0123456789abcdef",
		"--ca-hash", "sha256:"+strings.Repeat("ab", 32), "--certificate-key", strings.Repeat("cd", 32))
	// Stopped before its member-add, with what it wrote removed: nothing
	// was changed, so it exits as a refusal.
	if code != ExitRefused || !strings.Contains(errOut, stop.Error()) {
		t.Fatalf("server stopped by its checkpoint hook: exit %d, stderr %q; want exit %d naming the hook's error", code, errOut, ExitRefused)
	}
	if len(seen) != 1 || seen[0] != "join-start" {
		t.Errorf("checkpoints reached: %v, want [join-start]", seen)
	}
	if out != "" {
		t.Errorf("stopped, yet printed:\n%s", out)
	}
	if len(h.starts) > 0 {
		t.Errorf("a join stopped at join-start started services: %v", h.starts)
	}
}
