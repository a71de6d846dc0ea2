package cli

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// TestAdminCommandsWaitOutAStartingAPIServer: an admin command run as the
// node's kube-apiserver begins to serve after a restart (a control plane
// without a VIP, whose admin kubeconfig names that apiserver) gets its
// answer once the server is ready, not the 403 its RBAC authorizer gives
// the admin credential until its informers have synced; it says so on
// stderr, and -o json's stdout is still the document alone.
func TestAdminCommandsWaitOutAStartingAPIServer(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	cp1 := c.Hosts()[0]
	d := cp1.Handle()
	opts := Options{Host: func() (host.Host, error) { return d, nil }, Checkpoint: d.Checkpoint}
	if code, out, errOut := runCLI(t, opts, "up"); code != ExitOK {
		t.Fatalf("up: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for restart := 1; ; restart++ {
		ready, err := cp1.RestartAPIServerUnready(ctx)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, opts, "token", "list", "-o", "json")
		if err := <-ready; err != nil {
			t.Fatalf("restart cp1's kube-apiserver: %v", err)
		}
		if code != ExitOK {
			t.Fatalf("token list, run as cp1's kube-apiserver began to serve after restart %d: exit %d, want its answer once the server was ready\n%s", restart, code, errOut)
		}
		var list []token.Info
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("token list -o json beside the wait: stdout is not the document alone: %v\n%s", err, out)
		}
		if strings.Contains(errOut, "403 Forbidden while not ready") {
			t.Logf("restart %d: %s", restart, strings.TrimSpace(errOut))
			return
		}
		if restart == 3 {
			t.Fatalf("in 3 restarts token list never met the apiserver refusing it before it was ready, so this shows nothing (stderr: %q)", errOut)
		}
	}
}

// TestProgressLeavesAMachineDocumentAlone: under -o json or yaml a
// command's progress and waiting lines (ha's Env.Progress) go to stderr,
// its stdout being the document alone; under its human form, to stdout
// beside its report.
func TestProgressLeavesAMachineDocumentAlone(t *testing.T) {
	for _, tc := range []struct {
		format   string
		toStdout bool
	}{{"json", false}, {"yaml", false}, {"table", true}} {
		var out, errOut strings.Builder
		a := &app{stdout: &out, stderr: &errOut, logLevel: "warn"}
		root := a.rootCmd()
		cmd, _, err := root.Find([]string{"token", "list"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Flags().Set("output", tc.format); err != nil {
			t.Fatal(err)
		}
		if err := root.PersistentPreRunE(cmd, nil); err != nil {
			t.Fatal(err)
		}
		a.progress("waiting for the API server")
		got, other := errOut.String(), out.String()
		if tc.toStdout {
			got, other = other, got
		}
		if !strings.Contains(got, "waiting for the API server") || other != "" {
			t.Errorf("-o %s: progress on stdout %q, stderr %q; want it on %s alone", tc.format, out.String(), errOut.String(), map[bool]string{true: "stdout", false: "stderr"}[tc.toStdout])
		}
	}
}

// blockingServices' starts, restarts and stops return once released.
type blockingServices struct {
	host.Services
	release chan struct{}
}

func (b blockingServices) StartService(context.Context, string) error {
	<-b.release
	return nil
}

// TestSupervisedStartsSayWhatTheyWaitFor: a start through the running
// supervisor that has not returned (the service not ready yet) says, at
// the pace of the lines, what it waits for and how long it has; one that
// returns at once says nothing.
func TestSupervisedStartsSayWhatTheyWaitFor(t *testing.T) {
	var mu sync.Mutex
	var said []string
	progress := func(l string) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, l)
	}
	b := blockingServices{release: make(chan struct{})}
	s := waitedServices{Services: b, progress: progress, every: 20 * time.Millisecond}
	started := make(chan error, 1)
	go func() { started <- s.StartService(context.Background(), "etcd") }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(said)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			close(b.release)
			t.Fatalf("a start not returned said %d lines in 5 s, want one every 20 ms", n)
		}
	}
	close(b.release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	first := said[0]
	said = nil
	mu.Unlock()
	if !strings.Contains(first, "waiting for the supervisor to start etcd (") {
		t.Fatalf("a start not returned said %q, want what it waits for", first)
	}
	s.every = time.Hour // a start that returns at once says nothing
	err := s.StartService(context.Background(), "etcd")
	mu.Lock()
	defer mu.Unlock()
	if err != nil || len(said) != 0 {
		t.Fatalf("a start that returned at once: %v, said %q; want nothing said", err, said)
	}
}

// TestAStartSaysWhatItWaitsForUntilReady: the supervisor's own start of a
// service (up, server, a reset that starts etcd again) returns once the
// service is ready, up to ServiceReadyWithin (a node of three after a power
// cut waits for a leader); it says so at the pace of the lines, with the
// bound, where it said only "starting etcd ..." for up to two minutes.
func TestAStartSaysWhatItWaitsForUntilReady(t *testing.T) {
	release := make(chan struct{})
	sup, err := supervisor.New(supervisor.Config{LogDir: t.TempDir(), Services: []supervisor.Spec{{
		Name: "etcd",
		Run: func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		},
		Ready: func(ctx context.Context) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Shutdown()
	var out syncbuf.Buffer
	p := startProgress{Supervisor: sup, w: &out, every: 20 * time.Millisecond}
	started := make(chan error, 1)
	go func() { started <- p.StartService(context.Background(), "etcd") }()
	want := "waiting for etcd to be ready ("
	for deadline := time.Now().Add(5 * time.Second); strings.Count(out.String(), want) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a start not ready said:\n%s\nwant %q at its pace", out.String(), want)
		}
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  starting etcd ...\n") || !strings.Contains(out.String(), "so far, up to "+controlplane.ServiceReadyWithin.String()+")") {
		t.Fatalf("a start not ready said:\n%s\nwant the start, then how long and the bound", out.String())
	}
}
