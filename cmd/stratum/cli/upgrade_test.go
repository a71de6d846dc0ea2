package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/sim"
)

func TestUpgradeVersionSteps(t *testing.T) {
	for _, c := range []struct {
		from, to string
		refused  string // "" when allowed
	}{
		{"v1.37.2", "v1.37.2", ""},
		{"v1.37.2", "v1.37.5", ""},
		{"v1.37.2", "v1.38.0", ""},
		{"v1.37.2", "v1.39.0", "more than one minor version above"},
		{"v1.37.2", "v1.36.9", "Kubernetes does not go back"},
		{"v1.37.2", "v2.0.0", "more than one minor version above"},
		{"v2.0.0", "v1.37.2", "Kubernetes does not go back"},
		{"", "v1.37.2", ""}, // the running version not known: not judged
	} {
		err := apiServerStep(c.from, c.to)
		if (err == nil) != (c.refused == "") || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("apiServerStep(%q, %q) = %v, want refused %q", c.from, c.to, err, c.refused)
		}
	}
	for _, c := range []struct {
		members []string
		to      string
		refused string
	}{
		{[]string{"v3.7.3", "v3.7.3"}, "v3.7.3", ""},
		{[]string{"v3.6.16", "v3.7.3"}, "v3.7.3", ""},
		{[]string{"v3.6.16", "v3.6.16"}, "v3.7.3", ""},
		{[]string{"v3.5.21", "v3.6.16"}, "v3.7.3", "more than one minor version above the lowest member's v3.5.21"},
		{[]string{"v3.7.3", "v3.7.3"}, "v3.6.16", "below the lowest member's v3.7.3"},
		{[]string{"v3.6.16", "v3.7.3"}, "v3.6.16", ""},
		{nil, "v3.7.3", ""},
		{[]string{"v3.7.3"}, "v4.0.0", "more than one minor version above"},
	} {
		err := etcdStep(c.members, c.to)
		if (err == nil) != (c.refused == "") || err != nil && !strings.Contains(err.Error(), c.refused) {
			t.Errorf("etcdStep(%v, %q) = %v, want refused %q", c.members, c.to, err, c.refused)
		}
	}
}

// TestSupervisorIsReplacedOnlyByItsOwnKind: a supervisor accepts a
// replacement only by an executable only root may change, run as the node's
// supervisor (that it supervises at all is the supervisor's own check:
// internal/supervisor's TestReplacementIsJudgedThenDelivered).
func TestSupervisorIsReplacedOnlyByItsOwnKind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the binary's ownership is judged as root's")
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "stratum")
	if err := os.WriteFile(good, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "data")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	replaceable := filepath.Join(open, "stratum")
	if err := os.WriteFile(replaceable, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := func(p string, rest ...string) []string { return append([]string{p}, rest...) }
	r := supervisor.Replacement{Path: good, Args: args(good, "up", "--as-supervisor", "--bin-dir", "/opt/bin")}
	if err := checkReplacement(r); err != nil {
		t.Fatalf("a replacement by a root-only stratum run as the supervisor: %v", err)
	}
	for _, c := range []struct {
		r    supervisor.Replacement
		want string
	}{
		{supervisor.Replacement{Path: plain, Args: args(plain, "up", "--as-supervisor")}, "not an executable file"},
		{supervisor.Replacement{Path: filepath.Join(dir, "none"), Args: args(good, "up", "--as-supervisor")}, "no such file"},
		{supervisor.Replacement{Path: replaceable, Args: args(replaceable, "up", "--as-supervisor")}, open},
		{supervisor.Replacement{Path: good, Args: args(good, "reset", "--as-supervisor")}, "not the node's supervisor"},
		{supervisor.Replacement{Path: good, Args: args(good, "up")}, "not the node's supervisor"},
	} {
		if err := checkReplacement(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkReplacement(%+v) = %v, want it refused naming %q", c.r, err, c.want)
		}
	}
}

// servedSupervisor is a real supervisor answering on sock, with its state
// set, until stop.
func servedSupervisor(t *testing.T, sock string, id supervisor.Identity, state string) (s *supervisor.Supervisor, stop func()) {
	t.Helper()
	s, err := supervisor.New(supervisor.Config{LogDir: t.TempDir(), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	s.SetState(state)
	ln, err := supervisor.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, ln) }()
	stop = func() { cancel(); <-done; ln.Close() }
	t.Cleanup(stop)
	return s, stop
}

// TestUpgradeWaitsForTheReplacement: the wait after asking a supervisor to
// be replaced judges the supervisor that answers, not the one asked: the
// one asked (the same version and binary, another bin directory) is not
// taken for the upgraded one while it stops; the replacement serving as this
// stratum from the new directory ends the wait; a replacement that is the
// previous stratum again (its exec failed), or one that settled into a
// retried start, fails it at once, naming what runs.
func TestUpgradeWaitsForTheReplacement(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	newID := supervisor.Identity{Version: Version, BinDir: "/opt/stratum/v2/bin", Operator: true}
	for _, c := range []struct {
		name       string
		next       supervisor.Identity
		nextState  string
		wantErr    string
		wantOutput string
	}{
		{"served as this stratum", newID, supervisor.StateSupervising, "", "serves as stratum " + Version},
		{"the previous stratum again", supervisor.Identity{Version: "v0.1.0", BinDir: "/var/lib/stratum/bin", Operator: true}, supervisor.StateSupervising, "did not run stratum " + Version, ""},
		{"a retried start", newID, "retrying its start", "is retrying its start", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "supervisor.sock")
			// The supervisor asked: the same stratum from another
			// directory, already on its way.
			old, stopOld := servedSupervisor(t, sock, supervisor.Identity{Version: Version, BinDir: "/var/lib/stratum/bin", Operator: true}, supervisor.StateReplacing+self+" in its place")
			var out strings.Builder
			u := &nodeUpgrade{a: &app{stdout: &out, log: slog.New(slog.DiscardHandler)}, f: upgradeFlags{timeout: time.Minute},
				client: supervisor.Client{Path: sock}, running: old.About(), self: self, binDir: newID.BinDir, askedAt: time.Now()}
			result := make(chan error, 1)
			go func() { result <- u.waitServing(context.Background()) }()
			time.Sleep(500 * time.Millisecond) // several polls of the one asked
			select {
			case err := <-result:
				t.Fatalf("the wait ended (%v) while only the supervisor asked answered", err)
			default:
			}
			stopOld()
			servedSupervisor(t, sock, c.next, c.nextState)
			var err error
			select {
			case err = <-result:
			case <-time.After(30 * time.Second):
				t.Fatal("the wait did not end within 30 s of the replacement answering")
			}
			if (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("waitServing = %v, want error %q", err, c.wantErr)
			}
			if !strings.Contains(out.String(), c.wantOutput) {
				t.Fatalf("waitServing printed %q, want %q in it", out.String(), c.wantOutput)
			}
		})
	}
}

// TestUpgradeWaitStoppedSaysSo: a wait for the replacement stopped (Ctrl-C)
// says it was stopped and that the supervisor goes on by itself, not that
// none served within the --timeout.
func TestUpgradeWaitStoppedSaysSo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	old, _ := servedSupervisor(t, sock, supervisor.Identity{Version: Version, BinDir: "/var/lib/stratum/bin", Operator: true}, supervisor.StateReplacing+self+" in its place")
	u := &nodeUpgrade{a: &app{stdout: io.Discard, log: slog.New(slog.DiscardHandler)}, f: upgradeFlags{timeout: time.Hour},
		client: supervisor.Client{Path: sock}, running: old.About(), self: self, binDir: "/opt/stratum/v2/bin", askedAt: time.Now()}
	ctx, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	err = u.waitServing(ctx)
	if err == nil || !strings.Contains(err.Error(), "upgrade stopped while it waited for the supervisor") || strings.Contains(err.Error(), "within") {
		t.Fatalf("a wait stopped: %v, want it said as stopped, not as the --timeout", err)
	}
}

// TestAReplacementIsNotRunAfterAStopSignal: a supervisor whose services
// stopped for a replacement runs it in its place, unless a stop signal came
// meanwhile (nothing then runs, and the locks it took are released); when
// the exec fails it runs itself again as the unit runs it (never its own
// first command line, which for `stratum server` is a join), and says both
// failed when that fails too.
func TestAReplacementIsNotRunAfterAStopSignal(t *testing.T) {
	r := supervisor.Replacement{Path: "/opt/stratum/v2/bin/stratum", Args: []string{"/opt/stratum/v2/bin/stratum", "up", "--as-supervisor", "--bin-dir", "/opt/stratum/v2/bin", "--operator=true"}}
	id := supervisor.Identity{Version: Version, BinDir: "/var/lib/stratum/bin", Operator: false}
	type call struct {
		path string
		argv []string
	}
	newApp := func(fail bool) (*app, *[]call, *bool) {
		var calls []call
		released := false
		a := &app{stdout: io.Discard, log: slog.New(slog.DiscardHandler), opts: Options{Exec: func(path string, argv, _ []string) error {
			calls = append(calls, call{path, argv})
			if fail {
				return errors.New("exec format error")
			}
			return nil
		}}, replacementLocks: func() { released = true }}
		return a, &calls, &released
	}

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	a, calls, released := newApp(false)
	if err := a.finishReplacement(stopped, r, id); err != nil || len(*calls) != 0 || !*released {
		t.Fatalf("after a stop signal: err %v, execs %v, locks released %v; want nothing run and the locks released", err, *calls, *released)
	}

	a, calls, _ = newApp(false)
	_ = a.finishReplacement(context.Background(), r, id)
	if len(*calls) == 0 || (*calls)[0].path != r.Path || strings.Join((*calls)[0].argv, " ") != strings.Join(r.Args, " ") {
		t.Fatalf("the replacement ran %v, want %s %v", *calls, r.Path, r.Args)
	}

	a, calls, _ = newApp(true)
	err := a.finishReplacement(context.Background(), r, id)
	if len(*calls) != 2 || (*calls)[1].path != "" || strings.Join((*calls)[1].argv[1:], " ") != "up --as-supervisor --bin-dir /var/lib/stratum/bin --operator=false" {
		t.Fatalf("after a failed exec it ran %v, want itself (\"\") as the unit runs it, from its own bin directory and operator setting", *calls)
	}
	if err == nil || !strings.Contains(err.Error(), "exec format error") || !strings.Contains(err.Error(), "nor run itself again") {
		t.Fatalf("both execs failed: %v, want both named", err)
	}
}

// TestUpgradePlanVerdicts: a control plane is up to date only when it runs
// this stratum, etcd and kube-apiserver; one whose stratum is not recorded,
// or that runs another, is to be upgraded; one whose versions were not all
// read, or whose record no supervisor renews, is not judged; a learner is
// joining; a version step of any control plane blocks the whole roll; and
// the plan's next step says so.
func TestUpgradePlanVerdicts(t *testing.T) {
	to := planRelease{Stratum: "v0.5.0", Etcd: "v3.7.3", KubeAPIServer: "v1.37.2"}
	current := planRow{Stratum: "v0.5.0", Etcd: "v3.7.3", KubeAPIServer: "v1.37.2"}
	with := func(f func(*planRow)) planRow { r := current; f(&r); return r }
	for _, c := range []struct {
		row   planRow
		block string
		err   error
		want  string
	}{
		{current, "", nil, "up to date"},
		{with(func(r *planRow) { r.Stratum = "v0.4.0" }), "", nil, "to upgrade"},
		{with(func(r *planRow) { r.Stratum = "" }), "", nil, "to upgrade (no stratum recorded"},
		{with(func(r *planRow) { r.Etcd = "v3.6.16" }), "", nil, "to upgrade"},
		{with(func(r *planRow) { r.Stratum = "v0.4.0" }), "etcd too old", nil, "blocked: etcd too old"},
		{with(func(r *planRow) { r.Etcd = "" }), "", nil, "unknown: its etcd member did not answer"},
		{with(func(r *planRow) { r.KubeAPIServer = "" }), "", nil, "unknown: its kube-apiserver did not answer"},
		{current, "", errors.New("forbidden"), "unknown: the recorded releases could not be read"},
		{with(func(r *planRow) { r.recordAge = 2 * time.Hour }), "", nil, "unknown: its record (stratum v0.5.0) was last renewed 2h0m0s ago"},
		{with(func(r *planRow) { r.joining = true }), "", nil, "joining:"},
		{with(func(r *planRow) { r.Stratum, r.recordOf = "", "8e9e05c52164694d" }), "", nil, "unknown: its release record names etcd member 8e9e05c52164694d, not its member"},
	} {
		if got := planVerdict(c.row, to, c.block, c.err); !strings.HasPrefix(got, c.want) {
			t.Errorf("planVerdict(%+v, block %q, %v) = %q, want %q", c.row, c.block, c.err, got, c.want)
		}
	}
	for _, c := range []struct {
		rows []planRow
		want string
	}{
		{[]planRow{current, with(func(r *planRow) { r.Stratum = "v0.4.0" })}, ""},
		{[]planRow{current, with(func(r *planRow) { r.Node, r.KubeAPIServer = "cp2", "v1.35.0" })}, "more than one minor version above the running v1.35.0"},
		{[]planRow{current, with(func(r *planRow) { r.Etcd = "v3.5.21" })}, "more than one minor version above the lowest member's v3.5.21"},
	} {
		if got := clusterBlock(c.rows, to); c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("clusterBlock(%+v) = %q, want %q", c.rows, got, c.want)
		}
	}
	rep := planReport{Release: to, Healthy: true, ControlPlanes: []planRow{
		{Node: "cp1", Verdict: "up to date"}, {Node: "cp2", Verdict: "to upgrade"}, {Node: "cp3", Verdict: "unknown: ..."},
	}}
	if got := planNext(rep, nil); !strings.Contains(got, "1 of 3 control planes to upgrade (cp2)") || !strings.Contains(got, "not judged: cp3") {
		t.Errorf("planNext = %q", got)
	}
	rep.ControlPlanes[2].Verdict = "blocked: ..."
	if got := planNext(rep, nil); !strings.Contains(got, "another release first") || strings.Contains(got, "to upgrade (cp2)") {
		t.Errorf("planNext of a blocked roll = %q", got)
	}
	rep.ControlPlanes[2].Verdict = "to upgrade"
	rep.Healthy = false
	if got := planNext(rep, errors.New("forbidden")); !strings.Contains(got, "not healthy") || !strings.Contains(got, "forbidden") {
		t.Errorf("planNext of an unhealthy cluster whose records are unread = %q", got)
	}
	done := planReport{Release: to, Healthy: true, ControlPlanes: []planRow{{Node: "cp1", Verdict: "up to date"}}}
	if got := planNext(done, nil); got != "every control plane runs stratum v0.5.0" {
		t.Errorf("planNext of a cluster on this release = %q", got)
	}
}

// TestUpgradeRefusesWhatItCouldNotDoBeforeItsRestart: everything upgrade
// node does before it asks the supervisor to be replaced leaves the control
// plane as it ran, so each failure there is a refusal (exit 3), not exit 1
// (something may have changed): a check that could not read what it judges
// (a member list, the supervisor's answer) as much as a rule broken, and a
// snapshot that could not be saved. Bad usage stays bad usage, and no check
// runs after the first that fails.
func TestUpgradeRefusesWhatItCouldNotDoBeforeItsRestart(t *testing.T) {
	ranAfter := false
	for _, c := range []struct {
		name      string
		err       error
		refusal   bool
		wantWords string
	}{
		{"unread", errors.New("member list from https://10.0.0.1:2379: context deadline exceeded"), true, "upgrade refused: member list from https://10.0.0.1:2379: context deadline exceeded; nothing was changed"},
		{"refused", upgradeRefusedf("a learner"), true, "upgrade refused: a learner; nothing was changed"},
		{"usage", usagef("--bin-dir: bad"), false, "--bin-dir: bad"},
	} {
		err := upgradeChecks(context.Background(), func(context.Context) error { return nil }, func(context.Context) error { return c.err }, func(context.Context) error { ranAfter = true; return nil })
		if ha.IsRefusal(err) != c.refusal || err == nil || err.Error() != c.wantWords {
			t.Errorf("%s: upgradeChecks = %v (refusal %v); want %q, refusal %v", c.name, err, ha.IsRefusal(err), c.wantWords, c.refusal)
		}
	}
	if ranAfter {
		t.Error("a check ran after one that failed")
	}

	// The snapshot, the first step: to a directory that is not there.
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	d := c.Hosts()[0].Handle()
	u := &nodeUpgrade{a: &app{stdout: io.Discard, stderr: io.Discard, log: slog.New(slog.DiscardHandler)}, n: ha.NewNode(ha.Env{Host: d}),
		f: upgradeFlags{snapshot: filepath.Join(t.TempDir(), "not-made", "etcd.db")}}
	err := u.saveSnapshot(context.Background())
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "nothing was saved") || !strings.Contains(err.Error(), "the control plane was not touched") {
		t.Fatalf("saveSnapshot into a directory that is not there = %v (refusal %v); want a refusal saying the control plane was not touched", err, ha.IsRefusal(err))
	}
}
