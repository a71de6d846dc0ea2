package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"stratum.dev/stratum/sim"
)

// TestKlogShowsOnlyAtDebug: client-go's klog messages (the simulator's VIP
// leader election) reach stderr at --log-level debug, also after a
// simulated cluster starts (sim.New silences klog on its first start in a
// process), and nowhere at the default level.
func TestKlogShowsOnlyAtDebug(t *testing.T) {
	var out, debug bytes.Buffer
	if code := Run(context.Background(), []string{"--log-level", "debug", "version"}, &out, &debug, Options{}); code != ExitOK {
		t.Fatalf("version at debug: exit %d\n%s", code, debug.String())
	}
	sim.QuietKlog() // what a cluster's start does
	klog.Info("client-go says hello at debug")
	klog.Flush()
	if !strings.Contains(debug.String(), "client-go says hello at debug") || !strings.Contains(debug.String(), "level=DEBUG") {
		t.Fatalf("klog at --log-level debug: stderr %q, want the message at debug level", debug.String())
	}

	var quiet bytes.Buffer
	if code := Run(context.Background(), []string{"version"}, &out, &quiet, Options{}); code != ExitOK {
		t.Fatalf("version: exit %d\n%s", code, quiet.String())
	}
	klog.Error("client-go says hello at warn")
	klog.Flush()
	if strings.Contains(quiet.String()+debug.String(), "hello at warn") {
		t.Fatalf("klog at the default level reached stderr: %q / %q", quiet.String(), debug.String())
	}
}
