package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/sim"
)

// playedMachine is a handoffHost whose systemd and processes a test plays:
// it records every systemctl call and signal, answers `systemctl show` from
// its fields, and runs the test's hooks for the rest. Paths a real machine
// takes rarely (a supervisor that begins stopping meanwhile, one that does
// not end, a start past its bound) are played by it.
type playedMachine struct {
	mu sync.Mutex
	// notRoot: this process does not run as root.
	notRoot bool
	// noSystemd: systemd does not run.
	noSystemd bool
	// starts is each running process's start time; a process that ends
	// is deleted.
	starts map[int]string
	units  map[int]string
	// mainPID is stratum.service's main process, others other services',
	// fragment and dropIns what `systemctl show` says it loaded.
	mainPID  int
	others   map[string]int
	fragment string
	dropIns  []string
	// calls records each systemctl call ("daemon-reload", "start
	// stratum.service", ...) and each signal ("signal 4242 terminated"),
	// in order.
	calls []string
	// onSignal runs on a signal, onStart on `systemctl start`; fail
	// makes the systemctl call whose first argument it names fail.
	onSignal func(pid int)
	onStart  func(ctx context.Context) error
	fail     map[string]string
}

func (m *playedMachine) root() bool        { return !m.notRoot }
func (m *playedMachine) systemdRuns() bool { return !m.noSystemd }

func (m *playedMachine) unitOf(pid int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.units[pid]
}

func (m *playedMachine) processStart(pid int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.starts[pid]
}

// end ends process pid.
func (m *playedMachine) end(pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.starts, pid)
}

func (m *playedMachine) record(call string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, call)
}

func (m *playedMachine) called() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *playedMachine) signal(pid int, sig syscall.Signal) error {
	m.record(fmt.Sprintf("signal %d %v", pid, sig))
	if m.processStart(pid) == "" {
		return syscall.ESRCH
	}
	if m.onSignal != nil {
		m.onSignal(pid)
	}
	return nil
}

func (m *playedMachine) systemctl(ctx context.Context, args ...string) ([]byte, error) {
	m.record(strings.Join(args, " "))
	if msg, ok := m.fail[args[0]]; ok {
		return []byte(msg), errors.New("exit status 1")
	}
	switch args[0] {
	case "show":
		m.mu.Lock()
		defer m.mu.Unlock()
		if slices.Contains(args, "--property=MainPID") {
			if service := args[len(args)-1]; service != unitName {
				return fmt.Appendf(nil, "%d\n", m.others[service]), nil
			}
			return fmt.Appendf(nil, "%d\n", m.mainPID), nil
		}
		return fmt.Appendf(nil, "FragmentPath=%s\nDropInPaths=%s\n", m.fragment, strings.Join(m.dropIns, " ")), nil
	case "start":
		if m.onStart != nil {
			if err := m.onStart(ctx); err != nil {
				return []byte("signal: killed"), err
			}
		}
	}
	return nil, nil
}

// runUnit makes the played systemd run stratum.service's supervisor as
// pid, which then answers sup.
func (m *playedMachine) runUnit(pid int, sup *playedSupervisor, state string) {
	m.mu.Lock()
	m.mainPID = pid
	m.starts[pid] = "9000"
	m.units[pid] = unitName
	m.mu.Unlock()
	sup.set(supervisor.About{Identity: sup.about.Identity, PID: pid, Instance: "unit", State: state}, nil)
}

// playedSupervisor is the node's supervisor as a test plays it: what it
// says when asked, changed as the test goes.
type playedSupervisor struct {
	mu    sync.Mutex
	about supervisor.About
	err   error
	asked int
}

func (s *playedSupervisor) About(context.Context) (supervisor.About, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	return s.about, s.err
}

func (s *playedSupervisor) set(a supervisor.About, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.about, s.err = a, err
}

const handPID = 4242

// playedHandoff is a handover, as check leaves it, of a supervisor started
// by hand (handPID) that supervises, to a unit written in a test directory
// that the played systemd loads.
func playedHandoff(t *testing.T) (*unitHandoff, *playedMachine, *playedSupervisor, *bytes.Buffer) {
	t.Helper()
	unitPath := filepath.Join(t.TempDir(), unitName)
	if err := os.WriteFile(unitPath, []byte(systemdUnit("/usr/local/bin/stratum", "/opt/stratum/bin")), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &playedMachine{starts: map[int]string{handPID: "1234"}, units: map[int]string{}, fragment: unitPath}
	about := supervisor.About{Identity: supervisor.Identity{Version: Version, BinDir: "/opt/stratum/bin", Operator: true},
		PID: handPID, Instance: "hand", State: supervisor.StateSupervising}
	sup := &playedSupervisor{about: about}
	var out bytes.Buffer
	o := newUnitHandoff(&app{stdout: &out, stderr: &out, log: slog.New(slog.DiscardHandler)}, "install --now", unitPath, "/usr/local/bin/stratum", "/opt/stratum/bin", time.Minute)
	o.sys, o.client = m, sup
	o.running, o.runningStart = &about, "1234"
	// The hand supervisor ends on its SIGTERM, as its services stop; the
	// unit's supervisor then starts.
	m.onSignal = func(pid int) { go func() { time.Sleep(50 * time.Millisecond); m.end(pid) }() }
	m.onStart = func(context.Context) error {
		if m.processStart(handPID) != "" {
			t.Errorf("systemctl start ran while the supervisor started by hand still ran")
		}
		m.runUnit(5151, sup, supervisor.StateSupervising)
		return nil
	}
	return o, m, sup, &out
}

func TestHandoffStopsTheHandSupervisorThenStartsTheUnit(t *testing.T) {
	o, m, _, out := playedHandoff(t)
	if err := o.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	want := []string{
		"daemon-reload",
		"show --property=FragmentPath --property=DropInPaths stratum.service",
		"enable --quiet stratum.service",
		"signal 4242 terminated",
		"start stratum.service",
		"show --property=MainPID --value stratum.service",
	}
	if got := m.called(); !slices.Equal(got, want) {
		t.Errorf("the steps ran as\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, line := range []string{"stopping the supervisor started by hand (pid 4242)", "the supervisor started by hand ended", "stratum.service runs this control plane (supervisor pid 5151"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the output does not say %q:\n%s", line, out)
		}
	}
}

// A supervisor that began stopping after check judged it (Ctrl-C in its
// terminal, another install --now) takes a second signal as "kill what
// still runs at once": it is only waited for.
func TestHandoffOnlyWaitsForASupervisorThatBeganStopping(t *testing.T) {
	o, m, sup, out := playedHandoff(t)
	stopping := *o.running
	stopping.State = supervisor.StateStopping
	sup.set(stopping, nil)
	go func() { time.Sleep(300 * time.Millisecond); m.end(handPID) }()
	if err := o.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if slices.ContainsFunc(m.called(), func(c string) bool { return strings.HasPrefix(c, "signal") }) {
		t.Errorf("a supervisor already stopping was signalled: %q", m.called())
	}
	if !slices.Contains(m.called(), "start stratum.service") {
		t.Errorf("the unit was not started once it ended: %q", m.called())
	}
	if !strings.Contains(out.String(), "already stopping, to end") {
		t.Errorf("the output does not say it waits for a supervisor already stopping:\n%s", out)
	}
}

// A re-run after an interruption past the SIGTERM finds the supervisor
// stopping at its check: it waits, without asking or signalling again.
func TestHandoffRerunWaitsForTheStopItBegan(t *testing.T) {
	o, m, sup, out := playedHandoff(t)
	o.stopping = true
	go func() { time.Sleep(200 * time.Millisecond); m.end(handPID) }()
	if err := o.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if slices.ContainsFunc(m.called(), func(c string) bool { return strings.HasPrefix(c, "signal") }) {
		t.Errorf("a supervisor already stopping was signalled: %q", m.called())
	}
	if sup.asked != 1 { // once, by startUnit's check of the unit's supervisor
		t.Errorf("the supervisor was asked %d times, want once (after the start)", sup.asked)
	}
}

func TestHandoffSupervisorThatDoesNotEndStopsBeforeTheStart(t *testing.T) {
	o, m, _, out := playedHandoff(t)
	m.onSignal = func(int) {} // it never ends
	o.stopWithin = 300 * time.Millisecond
	err := o.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not end within 300ms of its SIGTERM; the unit is written and enabled") {
		t.Fatalf("run: %v, want the supervisor that did not end named\n%s", err, out)
	}
	if slices.Contains(m.called(), "start stratum.service") {
		t.Errorf("the unit was started beside a supervisor that still runs: %q", m.called())
	}
}

// A supervisor answering that is not the one check judged (another
// instance, or the PID taken by another process) is not signalled.
func TestHandoffSignalsOnlyTheSupervisorItJudged(t *testing.T) {
	for name, change := range map[string]func(*playedMachine, *playedSupervisor, supervisor.About){
		"another instance": func(_ *playedMachine, s *playedSupervisor, a supervisor.About) {
			a.Instance = "started meanwhile"
			s.set(a, nil)
		},
		"the pid reused": func(m *playedMachine, _ *playedSupervisor, _ supervisor.About) {
			m.mu.Lock()
			m.starts[handPID] = "5678"
			m.mu.Unlock()
		},
	} {
		t.Run(name, func(t *testing.T) {
			o, m, sup, out := playedHandoff(t)
			change(m, sup, *o.running)
			err := o.run(context.Background())
			if err == nil || !strings.Contains(err.Error(), "is not the one judged") || !strings.Contains(err.Error(), "nothing was stopped") {
				t.Fatalf("run: %v, want a refusal naming another supervisor\n%s", err, out)
			}
			for _, c := range m.called() {
				if strings.HasPrefix(c, "signal") || strings.HasPrefix(c, "start") {
					t.Errorf("%q ran", c)
				}
			}
		})
	}
}

func TestHandoffSupervisorEndedMeanwhileStartsTheUnit(t *testing.T) {
	o, m, sup, out := playedHandoff(t)
	m.end(handPID)
	sup.set(supervisor.About{}, supervisor.ErrNotRunning)
	if err := o.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if got := m.called(); slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "signal") }) || !slices.Contains(got, "start stratum.service") {
		t.Errorf("steps %q: want the unit started and nothing signalled", got)
	}
}

// systemctl start is bounded by --timeout: past it, and on an interruption,
// the command says that systemd's start goes on, not that it failed.
func TestHandoffStartPastItsBound(t *testing.T) {
	blockStart := func(m *playedMachine) {
		m.onStart = func(ctx context.Context) error { <-ctx.Done(); return errors.New("signal: killed") }
	}
	t.Run("timeout", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		blockStart(m)
		o.timeout = 200 * time.Millisecond
		err := o.run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "did not say it serves within 200ms; systemd's start goes on") {
			t.Fatalf("run: %v, want the bound named and the start said to go on\n%s", err, out)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		ctx, cancel := context.WithCancel(context.Background())
		m.onStart = func(sctx context.Context) error { cancel(); <-sctx.Done(); return errors.New("signal: killed") }
		err := o.run(ctx)
		if err == nil || !strings.Contains(err.Error(), "interrupted while stratum.service started") || !strings.Contains(err.Error(), o.restart) {
			t.Fatalf("run: %v, want the interruption said and %q named\n%s", err, o.restart, out)
		}
	})
	t.Run("failed", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		m.fail = map[string]string{"start": "Job for stratum.service failed"}
		err := o.run(context.Background())
		if err == nil || !strings.Contains(err.Error(), "`systemctl start stratum` failed") || !strings.Contains(err.Error(), "Job for stratum.service failed") {
			t.Fatalf("run: %v, want systemctl's failure quoted\n%s", err, out)
		}
		// The supervisor started by hand was stopped for the handover.
		if !o.stoppedHere || !strings.Contains(err.Error(), "this control plane is stopped") || !strings.Contains(err.Error(), o.restart) {
			t.Fatalf("run after the hand-started supervisor stopped (%t): %v, want the control plane said stopped and %q named", o.stoppedHere, err, o.restart)
		}
	})
}

// After the start, the supervisor answering must be the unit's main
// process, and supervise.
func TestHandoffChecksTheUnitsSupervisor(t *testing.T) {
	t.Run("another process answers", func(t *testing.T) {
		o, m, sup, out := playedHandoff(t)
		m.onStart = func(context.Context) error {
			m.runUnit(5151, sup, supervisor.StateSupervising)
			m.mu.Lock()
			m.mainPID = 6161
			m.mu.Unlock()
			return nil
		}
		if err := o.run(context.Background()); err == nil || !strings.Contains(err.Error(), "is not stratum.service's main process (pid 6161)") {
			t.Fatalf("run: %v, want the main process named\n%s", err, out)
		}
	})
	t.Run("in a wait", func(t *testing.T) {
		o, m, sup, out := playedHandoff(t)
		m.onStart = func(context.Context) error {
			m.runUnit(5151, sup, "waiting for etcd's data")
			return nil
		}
		if err := o.run(context.Background()); err == nil || !strings.Contains(err.Error(), "which is waiting for etcd's data, not serving") {
			t.Fatalf("run: %v, want the wait named\n%s", err, out)
		}
	})
}

// A unit systemd does not load as written is not enabled, and nothing is
// stopped.
func TestHandoffRefusesAUnitSystemdLoadsOtherwise(t *testing.T) {
	t.Run("ExecStart drop-in", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		dropIn := filepath.Join(t.TempDir(), "override.conf")
		if err := os.WriteFile(dropIn, []byte("[Service]\nExecStart=\nExecStart=/bin/sh -c true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		m.dropIns = []string{dropIn}
		if err := o.run(context.Background()); err == nil || !strings.Contains(err.Error(), "the drop-in "+dropIn+" sets ExecStart") {
			t.Fatalf("run: %v, want the drop-in named\n%s", err, out)
		}
		for _, c := range m.called() {
			if strings.HasPrefix(c, "enable") || strings.HasPrefix(c, "signal") {
				t.Errorf("%q ran", c)
			}
		}
	})
	t.Run("another fragment", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		other := filepath.Join(t.TempDir(), unitName)
		if err := os.WriteFile(other, []byte("[Service]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		m.fragment = other
		if err := o.run(context.Background()); err == nil || !strings.Contains(err.Error(), "systemd loads stratum.service from "+other) {
			t.Fatalf("run: %v, want the loaded unit named\n%s", err, out)
		}
		if slices.ContainsFunc(m.called(), func(c string) bool { return strings.HasPrefix(c, "signal") }) {
			t.Errorf("the supervisor was stopped: %q", m.called())
		}
	})
}

// A failed reload says what state the control plane is in: untouched for
// install --now, stopped for --install (its services stopped first), with
// the command that starts the unit once mended.
func TestHandoffReloadFailureSaysWhatRuns(t *testing.T) {
	for _, stoppedHere := range []bool{false, true} {
		o, m, _, out := playedHandoff(t)
		o.stoppedHere = stoppedHere
		m.fail = map[string]string{"daemon-reload": "Access denied"}
		err := o.run(context.Background())
		want := "the running control plane was not touched"
		if stoppedHere {
			want = "this control plane is stopped"
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Access denied") || !strings.Contains(err.Error(), "`"+o.restart+"`") {
			t.Errorf("stoppedHere=%v: run: %v, want %q, systemctl's words and %q\n%s", stoppedHere, err, want, o.restart, out)
		}
		if got := m.called(); len(got) != 1 {
			t.Errorf("stoppedHere=%v: steps after the failed reload: %q", stoppedHere, got)
		}
	}
}

// Already under the unit: nothing is handed over, and the start only
// waits for the unit's own.
func TestHandoffUnderTheUnitStopsNothing(t *testing.T) {
	o, m, sup, out := playedHandoff(t)
	m.runUnit(5151, sup, supervisor.StateSupervising)
	o.running, o.underUnit = &sup.about, true
	m.onStart = nil
	if err := o.run(context.Background()); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if slices.ContainsFunc(m.called(), func(c string) bool { return strings.HasPrefix(c, "signal") }) {
		t.Errorf("the unit's own supervisor was signalled: %q", m.called())
	}
}

func TestHandoffCheckSystemdRefusals(t *testing.T) {
	loaded := filepath.Join(t.TempDir(), unitName)
	if err := os.WriteFile(loaded, []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, unitPath string
		m              *playedMachine
		want           string
	}{
		{"no systemd", "/etc/systemd/system/stratum.service", &playedMachine{noSystemd: true}, "systemd is not running on this machine"},
		{"a directory systemd does not read", "/opt/units/stratum.service", &playedMachine{}, "systemd does not read units from --unit-dir /opt/units"},
		{"/run", "/run/systemd/system/stratum.service", &playedMachine{}, "is emptied at every boot"},
		{"a unit loaded from a directory read first", "/usr/lib/systemd/system/stratum.service", &playedMachine{fragment: loaded}, "systemd loads stratum.service from " + loaded},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			o := newUnitHandoff(&app{stdout: &out, stderr: &out}, "install --now", c.unitPath, "/usr/local/bin/stratum", "/opt/stratum/bin", time.Minute)
			o.sys = c.m
			err := o.checkSystemd(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was written or changed") {
				t.Fatalf("checkSystemd: %v, want a refusal saying %q", err, c.want)
			}
		})
	}
}

// --install's end: the unit written and started once every service
// stopped; a failure says the control plane is stopped and how to start it.
func TestFinishHandover(t *testing.T) {
	t.Run("hands over", func(t *testing.T) {
		o, m, _, out := playedHandoff(t)
		m.end(handPID) // this supervisor itself, ended its services
		o.running = nil
		if err := os.Remove(o.unitPath); err != nil {
			t.Fatal(err)
		}
		if err := o.a.finishHandover(context.Background(), o); err != nil {
			t.Fatalf("finishHandover: %v\n%s", err, out)
		}
		b, err := os.ReadFile(o.unitPath)
		if err != nil || string(b) != systemdUnit(o.self, o.binDir) {
			t.Errorf("the unit written: %q, %v", b, err)
		}
		if !slices.Contains(m.called(), "start stratum.service") {
			t.Errorf("the unit was not started: %q", m.called())
		}
	})
	t.Run("a stop signal came", func(t *testing.T) {
		o, m, _, _ := playedHandoff(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := o.a.finishHandover(ctx, o)
		if err == nil || !strings.Contains(err.Error(), "the unit was not written") || !strings.Contains(err.Error(), o.restart) {
			t.Errorf("finishHandover: %v, want the stopped control plane and %q named", err, o.restart)
		}
		if len(m.called()) != 0 {
			t.Errorf("systemctl ran after a stop signal: %q", m.called())
		}
	})
	t.Run("the unit cannot be written", func(t *testing.T) {
		o, m, _, _ := playedHandoff(t)
		notDir := filepath.Join(t.TempDir(), "a-file")
		if err := os.WriteFile(notDir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		o.unitPath = filepath.Join(notDir, unitName)
		err := o.a.finishHandover(context.Background(), o)
		if err == nil || !strings.Contains(err.Error(), "could not be written") || !strings.Contains(err.Error(), "this control plane is stopped") {
			t.Errorf("finishHandover: %v, want the write failure and the stopped control plane named", err)
		}
		if len(m.called()) != 0 {
			t.Errorf("systemctl ran without a unit: %q", m.called())
		}
	})
}

// --install's gate: each new refusal said once on stderr while asked
// again, then the handover said with the gate's note.
func TestInstallGateSaysEachRefusalOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	answers := []error{
		errors.New("stopping this etcd member while the cluster is unhealthy could take its quorum"),
		errors.New("stopping this etcd member while the cluster is unhealthy could take its quorum"),
		errors.New("etcd member cp3 is a learner (a join under way, or one that stopped)"),
		nil,
	}
	asked := 0
	g := installGate{a: &app{stdout: &stdout, stderr: &stderr}, every: 10 * time.Second, check: func(context.Context) (string, error) {
		err := answers[asked]
		asked++
		return "the cluster has 2 etcd voters", err
	}}
	for i, want := range []bool{false, false, false, true} {
		if got := g.open(context.Background()); got != want {
			t.Fatalf("ask %d: open = %v, want %v", i+1, got, want)
		}
	}
	if n := strings.Count(stderr.String(), "not yet handed to systemd's stratum.service (--install)"); n != 2 || !strings.Contains(stderr.String(), "is a learner") || !strings.Contains(stderr.String(), "asks again every 10s") {
		t.Errorf("stderr over four asks, two refusals alike then another then open (want each refusal once):\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "note: the cluster has 2 etcd voters") || !strings.Contains(stdout.String(), "handing this control plane to systemd's stratum.service") || strings.Count(stdout.String(), "handing") != 1 {
		t.Errorf("stdout: %q, want the note and the handover said once, at the open gate", stdout.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.check = func(context.Context) (string, error) { return "", nil }
	if g.open(ctx) {
		t.Errorf("the gate opened after the stop signal")
	}
}

// TestHandoffJudgesTheSupervisor: the refusals of the supervisor found, and
// what the steps are left to do, judged against a played machine and
// supervisor; the judgement itself stops and writes nothing.
func TestHandoffJudgesTheSupervisor(t *testing.T) {
	gateErr := errors.New("stopping this etcd member while the cluster is unhealthy could take its quorum")
	for _, c := range []struct {
		name string
		// play changes the played machine and supervisor from a
		// supervisor started by hand that supervises, of this release.
		play func(*playedMachine, *playedSupervisor)
		gate func(context.Context) (string, error)
		// refusal: a refusal (exit 3) saying it (every judgement that
		// stops the handoff is one: nothing is written or changed yet);
		// "": no error.
		refusal string
		// then checks what the judgement left for the steps.
		then func(*testing.T, *unitHandoff)
	}{
		{name: "none running", play: func(_ *playedMachine, s *playedSupervisor) { s.set(supervisor.About{}, supervisor.ErrNotRunning) },
			then: func(t *testing.T, o *unitHandoff) {
				if o.running != nil {
					t.Errorf("running = %+v, want none", o.running)
				}
			}},
		{name: "from before upgrade node", play: func(_ *playedMachine, s *playedSupervisor) { s.set(supervisor.About{}, supervisor.ErrUnsupported) },
			refusal: "a stratum from before `upgrade node`"},
		{name: "not asked", play: func(_ *playedMachine, s *playedSupervisor) { s.set(supervisor.About{}, errors.New("connection reset")) },
			refusal: "ask this node's supervisor about itself: connection reset"},
		{name: "another PID namespace", play: func(_ *playedMachine, s *playedSupervisor) { s.about.PID = 0 },
			refusal: "in a PID namespace this command does not see into"},
		{name: "another version", play: func(_ *playedMachine, s *playedSupervisor) { s.about.Version = "v0.9.0" },
			refusal: "runs stratum v0.9.0 with the etcd and kube-apiserver of /opt/stratum/bin, and the unit would run stratum " + Version},
		{name: "another bin dir", play: func(_ *playedMachine, s *playedSupervisor) { s.about.BinDir = "/var/lib/stratum/bin" },
			refusal: "`stratum install --now --bin-dir /var/lib/stratum/bin` with the supervisor's stratum"},
		{name: "without the operator", play: func(_ *playedMachine, s *playedSupervisor) { s.about.Operator = false },
			refusal: "runs without the operator (--operator=false)"},
		{name: "ended while asked", play: func(m *playedMachine, _ *playedSupervisor) { m.end(handPID) },
			refusal: "ended while it was asked"},
		{name: "under the unit by its cgroup", play: func(m *playedMachine, _ *playedSupervisor) { m.units[handPID] = unitName },
			gate: func(context.Context) (string, error) { return "", gateErr },
			then: func(t *testing.T, o *unitHandoff) {
				if !o.underUnit {
					t.Error("a supervisor in stratum.service's cgroup is not taken as the unit's")
				}
			}},
		{name: "under the unit as its main process", play: func(m *playedMachine, _ *playedSupervisor) { m.mainPID = handPID },
			then: func(t *testing.T, o *unitHandoff) {
				if !o.underUnit {
					t.Error("stratum.service's main process is not taken as the unit's")
				}
			}},
		{name: "another service's main process", play: func(m *playedMachine, _ *playedSupervisor) {
			m.units[handPID], m.others = "runner.service", map[string]int{"runner.service": handPID}
		}, then: func(t *testing.T, o *unitHandoff) {
			if len(o.notes) != 1 || !strings.Contains(o.notes[0], "the supervisor is runner.service's main process") {
				t.Errorf("notes %q, want runner.service named", o.notes)
			}
		}},
		{name: "in another service, not its main process", play: func(m *playedMachine, _ *playedSupervisor) { m.units[handPID] = "runner.service" },
			then: func(t *testing.T, o *unitHandoff) {
				if len(o.notes) != 0 {
					t.Errorf("notes %q, want none for a process that is not the service's main one", o.notes)
				}
			}},
		{name: "stopping", play: func(_ *playedMachine, s *playedSupervisor) { s.about.State = supervisor.StateStopping },
			gate: func(context.Context) (string, error) { return "", gateErr },
			then: func(t *testing.T, o *unitHandoff) {
				if !o.stopping {
					t.Error("a supervisor stopping is not left to wait for")
				}
			}},
		{name: "starting", play: func(_ *playedMachine, s *playedSupervisor) { s.about.State = supervisor.StateStarting },
			refusal: "is starting, not supervising a control plane that is up"},
		{name: "the gate refuses", gate: func(context.Context) (string, error) { return "", refused(gateErr) },
			refusal: "install --now refused: " + gateErr.Error()},
		{name: "the gate cannot tell", gate: func(context.Context) (string, error) { return "", errors.New("etcd member list: deadline exceeded") },
			refusal: "install --now: etcd member list: deadline exceeded; nothing was written or changed"},
		{name: "the gate notes", gate: func(context.Context) (string, error) { return "the cluster has 2 etcd voters", nil },
			then: func(t *testing.T, o *unitHandoff) {
				if !slices.Equal(o.notes, []string{"the cluster has 2 etcd voters"}) {
					t.Errorf("notes %q, want the gate's", o.notes)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, m, sup, _ := playedHandoff(t)
			o.running, o.runningStart = nil, ""
			if c.play != nil {
				c.play(m, sup)
			}
			gate := c.gate
			if gate == nil {
				gate = func(context.Context) (string, error) { return "", nil }
			}
			err := o.judgeSupervisor(context.Background(), gate)
			switch {
			case c.refusal != "":
				if !ha.IsRefusal(err) || !strings.Contains(err.Error(), c.refusal) || !strings.Contains(err.Error(), "nothing was written or changed") {
					t.Fatalf("judgeSupervisor: %v, want a refusal saying %q", err, c.refusal)
				}
			case err != nil:
				t.Fatalf("judgeSupervisor: %v, want none", err)
			}
			if c.then != nil {
				c.then(t, o)
			}
			for _, call := range m.called() {
				if !strings.HasPrefix(call, "show ") {
					t.Errorf("judging the supervisor ran %q", call)
				}
			}
		})
	}
}

// TestHandoffCheckRefusesBeforeTheSupervisor: install --now's refusals that
// come before the supervisor is judged (root, systemd and its unit
// directory, the node's control-plane state, a join or reset left
// unfinished), each against a played machine and a simulated host's files.
// A refusal says what to do, asks the supervisor nothing, and signals and
// starts nothing.
func TestHandoffCheckRefusesBeforeTheSupervisor(t *testing.T) {
	t.Parallel() // its own simulated host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1})
	write := func(h host.Files, p, content string) {
		t.Helper()
		if err := h.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := h.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A unit a generator wrote, which outranks the unit directories.
	generated := filepath.Join(t.TempDir(), unitName)
	if err := os.WriteFile(generated, []byte("[Service]\nExecStart=/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := func(h host.Files) {
		t.Helper()
		if err := nodestate.Save(h, &nodestate.NodeState{NodeName: "cp1", NodeIP: "127.0.0.1", Etcd: nodestate.Etcd{Name: "cp1", Started: true}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// play changes the played machine; lay lays out the host's files
		// (nothing: no control-plane state).
		play    func(*playedMachine)
		unitDir string
		lay     func(host.Files)
		refusal string // "": check passes, with no supervisor running
	}{
		{name: "not root", play: func(m *playedMachine) { m.notRoot = true }, lay: state,
			refusal: "stratum install --now must run as root: it stops this node's supervisor and starts systemd's unit; nothing was changed"},
		{name: "no systemd", play: func(m *playedMachine) { m.noSystemd = true }, lay: state,
			refusal: "systemd is not running on this machine"},
		{name: "a unit directory systemd does not read", unitDir: "/opt/units", lay: state,
			refusal: "systemd does not read units from --unit-dir /opt/units"},
		{name: "a unit directory emptied at boot", unitDir: "/run/systemd/system", lay: state,
			refusal: "--unit-dir /run/systemd/system is emptied at every boot"},
		{name: "another stratum.service loaded", play: func(m *playedMachine) { m.fragment = generated }, lay: state,
			refusal: "systemd loads stratum.service from " + generated + ", which takes precedence"},
		{name: "no control-plane state",
			refusal: "this node has no control-plane state (" + nodestate.Path + ")"},
		{name: "control-plane state malformed", lay: func(h host.Files) { write(h, nodestate.Path, "{not json") },
			refusal: "install --now refused: malformed node state: " + nodestate.Path + " cannot be parsed"},
		{name: "an interrupted join", lay: func(h host.Files) { state(h); write(h, ha.JoinIntentPath(), "{}") },
			refusal: "an interrupted join's intent journal survives on this node (" + ha.JoinIntentPath() + "): re-run that join command first"},
		{name: "an unfinished reset", lay: func(h host.Files) { state(h); write(h, ha.ResetJournalPath(), "{}") },
			refusal: "a `stratum reset` began on this node and has not finished (" + ha.ResetJournalPath() + "): run it again"},
		{name: "a control plane, no supervisor running", lay: state},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := c.Host("cp1")
			if err := h.Reimage(); err != nil { // every file gone
				t.Fatal(err)
			}
			if tc.lay != nil {
				tc.lay(h.Files())
			}
			unitPath := filepath.Join(cmp.Or(tc.unitDir, systemdUnitDirs[0]), unitName)
			m := &playedMachine{starts: map[int]string{}, units: map[int]string{}, fragment: unitPath}
			if tc.play != nil {
				tc.play(m)
			}
			sup := &playedSupervisor{err: supervisor.ErrNotRunning}
			var out bytes.Buffer
			d := h.Handle()
			a := &app{stdout: &out, stderr: &out, log: slog.New(slog.DiscardHandler), opts: Options{Host: func() (host.Host, error) { return d, nil }}}
			o := newUnitHandoff(a, "install --now", unitPath, "/usr/local/bin/stratum", "/opt/stratum/bin", time.Minute)
			o.sys, o.client = m, sup
			err := o.check(context.Background())
			if tc.refusal == "" {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				if sup.asked != 1 || o.running != nil {
					t.Errorf("the supervisor asked %d times (want once), running %+v (want none)", sup.asked, o.running)
				}
				return
			}
			if !ha.IsRefusal(err) || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("check: %v; want a refusal saying %q", err, tc.refusal)
			}
			if !strings.Contains(err.Error(), "nothing was") {
				t.Errorf("the refusal does not say what was not changed: %v", err)
			}
			if sup.asked != 0 {
				t.Errorf("the supervisor was asked %d times before the refusal", sup.asked)
			}
			for _, call := range m.called() {
				if !strings.HasPrefix(call, "show ") {
					t.Errorf("check ran %q: it may only ask", call)
				}
			}
		})
	}
}
