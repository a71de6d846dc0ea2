package host

import (
	"context"
	"fmt"
	"testing"
)

// TestNotRunning: a stopped service, an unknown one and a host with no
// service manager are not running; a running one is, and an error that is
// no answer (a supervisor that did not reply) is not taken for "stopped".
func TestNotRunning(t *testing.T) {
	noManager := fmt.Errorf("no stratum supervisor is running on this node: %w", ErrNoServiceManager)
	for _, c := range []struct {
		name string
		ss   ServiceStatus
		err  error
		want bool
	}{
		{"stopped", ServiceStatus{Running: false}, nil, true},
		{"running", ServiceStatus{Running: true}, nil, false},
		{"unknown", ServiceStatus{}, fmt.Errorf("cp1: %w %q", ErrUnknownService, "etcd"), true},
		{"no manager", ServiceStatus{}, noManager, true},
		{"no answer", ServiceStatus{}, context.DeadlineExceeded, false},
	} {
		if got := NotRunning(c.ss, c.err); got != c.want {
			t.Errorf("%s: NotRunning = %v, want %v", c.name, got, c.want)
		}
	}
	if NotRunHere(nil) || NotRunHere(context.Canceled) || !NotRunHere(noManager) {
		t.Error("NotRunHere takes a non-answer for a service not run here, or misses one")
	}
}
