package ha_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestBootstrapInterruptedWritingTheCAsConverges interrupts a first
// `stratum up` while it writes the cluster CAs, part of them written: by a
// disk error (the run undoes what it wrote and refuses, nothing changed) and
// by a crash losing unsynced data (the re-run finds the marker and makes the
// CAs anew). Each re-run must bring up a control plane that an admin client
// verifying with only the CA on disk reaches. A partial set an operator
// placed (no marker) is refused and left as it was.
func TestBootstrapInterruptedWritingTheCAsConverges(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 3, APIServers: true})
	// Each subtest's own bound, from when it runs: parallel subtests wait
	// for a slot after this function returns (one waited 12 minutes in a
	// busy CI run, past a bound taken here).
	within := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		t.Cleanup(cancel)
		return ctx
	}
	hosts := c.Hosts()
	thirdCA := func() *faultfs.Rule {
		return &faultfs.Rule{Ops: []faultfs.Op{faultfs.OpRename}, Prefix: version.PKIDir, Nth: 3, Errno: syscall.ENOSPC}
	}

	t.Run("disk error", func(t *testing.T) {
		t.Parallel()
		ctx := within(t)
		h := hosts[0]
		defer h.Crash()
		h.FailDisk(thirdCA())
		_, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{})
		h.DisarmDisk()
		if !errors.Is(err, syscall.ENOSPC) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("stratum up with the third CA's write failing = %v, want a refusal naming ENOSPC", err)
		}
		if left := sharedFilesOn(t, h); len(left) > 0 {
			t.Fatalf("the refused bring-up left CA files %v", left)
		}
		if _, err := h.Files().Stat(nodestate.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the refused bring-up left a node state: %v", err)
		}
		upAndReach(t, ctx, h)
	})

	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		ctx := within(t)
		h := hosts[1]
		defer h.Crash()
		armed := h.CrashAtDisk(thirdCA())
		returned := make(chan error, 1)
		go func() { _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); returned <- err }()
		select {
		case <-armed.Reached():
		case err := <-returned:
			t.Fatalf("stratum up returned (%v) before the crash", err)
		case <-ctx.Done():
			t.Fatal("stratum up never reached the third CA file")
		}
		if left := sharedFilesOn(t, h); len(left) != 2 {
			t.Fatalf("after a crash before the third CA file's rename: CA files %v, want two", left)
		}
		upAndReach(t, ctx, h)
	})

	t.Run("operator's partial set", func(t *testing.T) {
		t.Parallel()
		ctx := within(t)
		h := hosts[2]
		placed := map[string][]byte{pki.CACertFile: []byte("an operator's CA"), pki.CAKeyFile: []byte("its key")}
		for name, data := range placed {
			if err := h.Files().WriteFile(version.PKIFile(name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{})
		if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "put back the missing ones") {
			t.Fatalf("stratum up over an operator's partial CA set = %v, want a refusal", err)
		}
		for name, data := range placed {
			if got, err := h.Files().ReadFile(version.PKIFile(name)); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the refusal changed the operator's %s: %q, %v", name, got, err)
			}
		}
		if left := sharedFilesOn(t, h); len(left) != len(placed) {
			t.Fatalf("the refusal wrote CA files: %v", left)
		}
		if h.EtcdRunning() || h.APIServerRunning() {
			t.Fatal("the refused bring-up started a service")
		}
	})
}

// sharedFilesOn lists the cluster CA files present on h.
func sharedFilesOn(t *testing.T, h *sim.Host) []string {
	t.Helper()
	var out []string
	for _, name := range pki.SharedFileNames() {
		_, err := h.Files().Stat(version.PKIFile(name))
		switch {
		case err == nil:
			out = append(out, name)
		case !errors.Is(err, fs.ErrNotExist):
			t.Fatal(err)
		}
	}
	return out
}

// upAndReach runs `stratum up` on h again and reaches its apiserver as an
// admin that verifies it with only the cluster CA on h's disk: the CAs the
// re-run kept are the ones its certificates were issued from.
func upAndReach(t *testing.T, ctx context.Context, h *sim.Host) {
	t.Helper()
	if _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up re-run: %v", err)
	}
	if left := sharedFilesOn(t, h); len(left) != len(pki.SharedFileNames()) {
		t.Fatalf("after the re-run: CA files %v, want all", left)
	}
	if _, err := h.Files().Stat(ha.CAsMakingPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the CA marker outlived a bring-up: %v", err)
	}
	cfg, err := h.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := h.Files().ReadFile(version.PKIFile(pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg.CAData, cfg.CAFile = ca, ""
	cfg.Timeout = 5 * time.Second
	if err := readyThroughVIP(ctx, kubernetes.NewForConfigOrDie(cfg), 30*time.Second); err != nil {
		t.Fatalf("the re-run's apiserver, verified with the CA on disk: %v", err)
	}
	checkFileModes(t, h)
}
