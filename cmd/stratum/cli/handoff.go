package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
)

// unitHandoff is `stratum install --now`: the control plane a supervisor
// started by hand runs is handed to systemd's unit, the steps docs/real-hosts.md
// gave as three commands (stop the foreground run, daemon-reload, enable
// --now), with the restart's refusals first: a stop that could take the
// etcd quorum is refused before anything is written.
type unitHandoff struct {
	a *app
	// command names the command handing over, in its messages ("install
	// --now", or up or server with --install); restart is the `stratum
	// install --now` that starts the unit after a failure (installNowCommand).
	command, restart string
	// unitPath is the unit install writes, in --unit-dir.
	unitPath string
	// binDir is what the unit runs from (--bin-dir made absolute): the
	// running supervisor must run this stratum's version from it. self is
	// the stratum the unit runs (unitExecPath).
	binDir, self string
	timeout      time.Duration
	// sys is the machine the handover asks and acts on (systemd, the
	// processes), client the node's supervisor: seams, so that tests can
	// play the answers a real machine gives rarely (a supervisor that
	// begins stopping meanwhile, one that does not end, a start past its
	// bound). stopWithin bounds the wait for the hand supervisor's end.
	sys        handoffHost
	client     supervisorAsker
	stopWithin time.Duration
	// running is the supervisor found, nil when none answers; runningStart
	// is its process's start time, which a reused PID does not share.
	// underUnit: it runs in stratum.service already (nothing to hand
	// over); stopping: it was stopping already (a handoff interrupted
	// after its SIGTERM), so there is nothing to judge, only its end to
	// wait for.
	running      *supervisor.About
	runningStart string
	// stoppedHere: the services were stopped by this process (--install),
	// or with the supervisor started by hand (install --now), so a failure
	// leaves the control plane down.
	stoppedHere bool
	underUnit   bool
	stopping    bool
	notes       []string
	startedAt   time.Time
}

// handoffStopWithin bounds the wait for a supervisor started by hand to end
// after its SIGTERM: it stops its services in order (the unit gives systemd's
// own stop 60 s).
const handoffStopWithin = 2 * time.Minute

// newUnitHandoff is a handover to the unit at unitPath, which runs self
// from binDir, named command in its messages, on this machine.
func newUnitHandoff(a *app, command, unitPath, self, binDir string, timeout time.Duration) *unitHandoff {
	return &unitHandoff{a: a, command: command, restart: installNowCommand(self, binDir), unitPath: unitPath, self: self, binDir: binDir,
		timeout: timeout, sys: thisMachine{}, client: supervisor.Client{Path: supervisor.SocketPath}, stopWithin: handoffStopWithin, startedAt: time.Now()}
}

// supervisorAsker asks the node's supervisor about itself
// (supervisor.Client).
type supervisorAsker interface {
	About(ctx context.Context) (supervisor.About, error)
}

// handoffHost is what a handover asks of the machine beside the supervisor:
// systemd, and the processes it judges and signals. thisMachine is the
// machine's own.
type handoffHost interface {
	// root reports whether this process runs as root.
	root() bool
	// systemdRuns reports whether systemd is the machine's service
	// manager.
	systemdRuns() bool
	// systemctl runs systemctl with args until it ends or ctx does, and
	// returns its combined output.
	systemctl(ctx context.Context, args ...string) ([]byte, error)
	// unitOf is the systemd service process pid runs in, "" for none.
	unitOf(pid int) string
	// processStart is process pid's start time, "" when none runs.
	processStart(pid int) string
	// signal sends sig to process pid.
	signal(pid int, sig syscall.Signal) error
}

// thisMachine is the handoffHost of the machine stratum runs on.
type thisMachine struct{}

func (thisMachine) root() bool                  { return os.Geteuid() == 0 }
func (thisMachine) systemdRuns() bool           { return systemdRuns() }
func (thisMachine) unitOf(pid int) string       { return unitOf(pid) }
func (thisMachine) processStart(pid int) string { return processStart(pid) }
func (thisMachine) signal(pid int, sig syscall.Signal) error {
	return syscall.Kill(pid, sig)
}
func (thisMachine) systemctl(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
}

// systemctl runs systemctl on the handover's machine, bounded by within.
func (o *unitHandoff) systemctl(ctx context.Context, within time.Duration, args ...string) (string, error) {
	return systemctlOn(ctx, o.sys, within, args...)
}

// mainPID is a service's main process as systemd says, 0 when it has none
// (not running, not loaded, or systemctl failed).
func (o *unitHandoff) mainPID(ctx context.Context, service string) int {
	out, err := o.systemctl(ctx, 30*time.Second, "show", "--property=MainPID", "--value", service)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(out)
	return pid
}

// refusedf is a refusal of the handover, named for the command making it.
func (o *unitHandoff) refusedf(format string, args ...any) error {
	return refusedf(o.command+" refused: "+format+"; nothing was written or changed", args...)
}

// check makes every refusal of the handoff, before the unit is written: root,
// systemd running and reading --unit-dir, a control plane (node state, no
// join or reset left unfinished), and a running supervisor that may stop:
// the release the unit runs (this stratum's version, --bin-dir, the operator),
// supervising a control plane that is up, in a cluster that keeps its
// quorum while this member restarts.
func (o *unitHandoff) check(ctx context.Context) error {
	if !o.sys.root() {
		return rootRefusal("stratum install --now", "it stops this node's supervisor and starts systemd's unit")
	}
	if err := o.checkSystemd(ctx); err != nil {
		return err
	}
	n, h, err := o.a.localNode()
	if err != nil {
		return err
	}
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		return o.refusedf("this node has no control-plane state (%s), and the unit starts only on a node that has (ConditionPathExists): bring it up (`stratum up`) or join it (the join command) first, then run this", nodestate.Path)
	}
	if err != nil {
		return refused(fmt.Errorf("install --now refused: %w; nothing was written or changed", err))
	}
	if what, err := unfinishedWork(ctx, n, h); err != nil {
		return refused(fmt.Errorf("%s: %w; nothing was written or changed", o.command, err))
	} else if what != "" {
		return o.refusedf("%s", what)
	}
	return o.judgeSupervisor(ctx, func(ctx context.Context) (string, error) {
		_, note, err := restartKeepsQuorum(ctx, n, st)
		return note, err
	})
}

// judgeSupervisor makes check's refusals of the supervisor running, if any:
// one that may stop, running the release the unit runs, supervising a
// control plane that is up, and gate (the restart's, restartKeepsQuorum)
// passing. It sets what the steps act on: the supervisor found, whether it
// runs under the unit already or is stopping.
func (o *unitHandoff) judgeSupervisor(ctx context.Context, gate func(context.Context) (note string, err error)) error {
	about, err := o.client.About(ctx)
	switch {
	case errors.Is(err, supervisor.ErrNotRunning):
		return nil // nothing to stop: the unit starts the control plane
	case errors.Is(err, supervisor.ErrUnsupported):
		return o.refusedf("this node's supervisor is a stratum from before `upgrade node`, which does not say what it runs: stop it (Ctrl-C the `stratum up` or `stratum server` running it), then run this again, which starts the unit")
	case err != nil:
		return refused(fmt.Errorf("install --now: ask this node's supervisor about itself: %w; nothing was written or changed", err))
	}
	if about.PID == 0 {
		return o.refusedf("this node's supervisor runs in a PID namespace this command does not see into (a container of its own?), so it cannot be stopped from here: stop it where it runs, then run this again, which starts the unit")
	}
	o.running, o.runningStart = &about, o.sys.processStart(about.PID)
	switch {
	case about.Version != Version || filepath.Clean(about.BinDir) != o.binDir:
		return o.refusedf("this node's supervisor (pid %d) runs stratum %s with the etcd and kube-apiserver of %s, and the unit would run stratum %s with those of %s: handing over would change what this member runs without upgrade node's checks; run `stratum install --now --bin-dir %s` with the supervisor's stratum, or change the release first with `stratum upgrade node --bin-dir DIR`", about.PID, about.Version, about.BinDir, Version, o.binDir, about.BinDir)
	case !about.Operator:
		return o.refusedf("this node's supervisor (pid %d) runs without the operator (--operator=false), and the unit `stratum install` writes always runs it: to hand it over with the operator on, stop the supervisor (Ctrl-C) and run this again, which starts the unit; a node meant to run without it runs `stratum up --operator=false` under a service of your own", about.PID)
	}
	if o.underUnit = o.sys.unitOf(about.PID) == unitName || o.mainPID(ctx, unitName) == about.PID; o.underUnit {
		return nil
	}
	if o.runningStart == "" {
		return o.refusedf("this node's supervisor (pid %d) ended while it was asked: run this again, which starts the unit", about.PID)
	}
	if other := o.sys.unitOf(about.PID); other != "" && o.mainPID(ctx, other) == about.PID {
		o.notes = append(o.notes, fmt.Sprintf("the supervisor is %s's main process: if that service starts it again once it stops, the two take turns; stop and disable %s", other, other))
	}
	switch about.State {
	case supervisor.StateStopping:
		o.stopping = true // a handoff interrupted after its SIGTERM: only its end is left to wait for
		return nil
	case supervisor.StateSupervising:
	default:
		return o.refusedf("this node's supervisor (pid %d) is %s, not supervising a control plane that is up: `stratum status` says why; wait for it, or stop it (Ctrl-C) and run this again, which starts the unit", about.PID, about.State)
	}
	// A gate that could not tell (the member list unanswered) is a
	// refusal too: nothing was written or changed (as upgrade node's
	// checks, upgradeChecks).
	note, err := gate(ctx)
	switch {
	case ha.IsRefusal(err):
		return refused(fmt.Errorf("install --now refused: %w; nothing was written or changed", err))
	case err != nil:
		return refused(fmt.Errorf("install --now: %w; nothing was written or changed", err))
	}
	if note != "" {
		o.notes = append(o.notes, note)
	}
	return nil
}

// checkSystemd: systemd runs, reads the unit's directory and keeps it
// across boots, and loads no other stratum.service that would win over
// the one to be written.
func (o *unitHandoff) checkSystemd(ctx context.Context) error {
	if !o.sys.systemdRuns() {
		return o.refusedf("systemd is not running on this machine, so there is no unit to hand the control plane to: run stratum under your own supervisor, without --now or --install (`stratum install` writes the unit for when systemd runs)")
	}
	switch dir := filepath.Dir(o.unitPath); {
	case !slices.Contains(systemdUnitDirs, dir):
		return o.refusedf("systemd does not read units from --unit-dir %s, so it could not start one written there: leave --unit-dir out (%s)", dir, systemdUnitDirs[0])
	case dir == "/run/systemd/system":
		return o.refusedf("--unit-dir %s is emptied at every boot, so the unit would not start the control plane at the next one: leave --unit-dir out (%s)", dir, systemdUnitDirs[0])
	}
	if conflict, err := o.loadedElsewhere(ctx, false); err != nil {
		return refused(fmt.Errorf("%s: ask systemd which stratum.service it loads: %w; nothing was written or changed", o.command, err))
	} else if conflict != "" {
		return o.refusedf("%s", conflict)
	}
	return nil
}

// plan says what check found and the steps that follow, numbered as they
// run.
func (o *unitHandoff) plan(dryRun bool) {
	w := o.a.stdout
	for _, n := range o.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	verb := "with --now"
	if dryRun {
		verb = "with --now it would (--dry-run: nothing is written or changed)"
	}
	fmt.Fprintf(w, "%s:\n", verb)
	steps := []string{
		fmt.Sprintf("write %s", o.unitPath),
		"systemctl daemon-reload (the unit systemd loads must be this one, with no drop-in setting ExecStart), then systemctl enable stratum (started at every boot)",
	}
	switch {
	case o.running == nil:
		steps = append(steps, "no supervisor runs here: systemctl start stratum starts the control plane from the node state")
	case o.underUnit:
		steps = append(steps, fmt.Sprintf("nothing to hand over: stratum.service already runs this node's supervisor (pid %d); systemctl start stratum waits for it to be ready", o.running.PID))
	default:
		stop := fmt.Sprintf("stop the supervisor started by hand (pid %d, stratum %s) with SIGTERM, as Ctrl-C does: its services stop, and a VIP it holds moves to another control plane", o.running.PID, o.running.Version)
		if o.stopping {
			stop = fmt.Sprintf("wait for the supervisor started by hand (pid %d), already stopping, to end", o.running.PID)
		}
		steps = append(steps, stop, fmt.Sprintf("systemctl start stratum, which returns once the control plane serves (up to %s)", o.timeout))
	}
	for i, s := range steps {
		fmt.Fprintf(w, "  %d. %s\n", i+1, s)
	}
}

// run takes the steps in order; each is idempotent, so a re-run after an
// interruption converges (a supervisor stopping or stopped is waited for or
// not looked for, an enabled unit stays enabled, a started one started).
func (o *unitHandoff) run(ctx context.Context) error {
	for _, step := range []func(context.Context) error{o.enableUnit, o.stopHandSupervisor, o.startUnit} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// enableUnit: systemd reads the unit just written, and it is the unit
// systemd runs (no file of higher precedence, no drop-in changing its
// ExecStart: the check of what the supervisor runs was made against it);
// then systemd starts it at boot.
func (o *unitHandoff) enableUnit(ctx context.Context) error {
	state := "the running control plane was not touched"
	if o.stoppedHere {
		state = "this control plane is stopped (its services stopped here to be handed over)"
	}
	failed := func(what string, err error, out string) error {
		return fmt.Errorf("%s: the unit is written, and %s failed (%w: %s); %s: `%s`, once that is mended, starts the unit", o.command, what, err, out, state, o.restart)
	}
	if out, err := o.systemctl(ctx, time.Minute, "daemon-reload"); err != nil {
		return failed("`systemctl daemon-reload`", err, out)
	}
	conflict, err := o.loadedElsewhere(ctx, true)
	if err != nil {
		return failed("`systemctl show stratum`", err, "")
	}
	if conflict != "" {
		return fmt.Errorf("%s: the unit is written, and %s; %s: remove it, then `%s` starts the unit", o.command, conflict, state, o.restart)
	}
	if out, err := o.systemctl(ctx, time.Minute, "enable", "--quiet", unitName); err != nil {
		return failed("`systemctl enable stratum`", err, out)
	}
	o.a.progress("systemd read the unit and starts it at boot (daemon-reload, enable)")
	return nil
}

// loadedElsewhere says what would make systemd run something else than the
// unit at unitPath (a unit file of higher precedence, a drop-in setting
// ExecStart), "" for nothing. Before the unit is written it judges the unit
// systemd has loaded, if any: a file in a directory systemd reads first
// would win over the one to be written. Once it is written and systemd
// reloaded, systemd must load exactly that file.
func (o *unitHandoff) loadedElsewhere(ctx context.Context, written bool) (string, error) {
	out, err := o.systemctl(ctx, time.Minute, "show", "--property=FragmentPath", "--property=DropInPaths", unitName)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	props := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, "=")
		props[k] = v
	}
	if f := props["FragmentPath"]; f != "" && !sameFile(f, o.unitPath) {
		if _, err := os.Stat(f); err == nil && (written || outranks(filepath.Dir(f), filepath.Dir(o.unitPath))) {
			return fmt.Sprintf("systemd loads stratum.service from %s, which takes precedence over %s, so systemd would run what it names, unchecked (remove it, or write the unit there: `stratum install --now --unit-dir %s`)", f, o.unitPath, filepath.Dir(f)), nil
		}
	}
	for _, d := range strings.Fields(props["DropInPaths"]) {
		if b, err := os.ReadFile(d); err == nil && setsExecStart(b) {
			return fmt.Sprintf("the drop-in %s sets ExecStart over the unit, so systemd would run what it names, unchecked (remove it)", d), nil
		}
	}
	return "", nil
}

// outranks reports whether systemd reads units from dir before ours, so a
// unit there wins: systemdUnitDirs is in systemd's order (the same
// directory under two names, /lib and /usr/lib on a merged /usr, ranks
// once), and a directory not among them (systemd's control, transient and
// generator directories) is taken to win.
func outranks(dir, ours string) bool {
	rank := func(d string) int {
		for i, u := range systemdUnitDirs {
			if sameFile(d, u) {
				return i
			}
		}
		return -1
	}
	return rank(dir) < rank(ours)
}

// setsExecStart reports whether a unit file's text sets ExecStart (not
// ExecStartPre or ExecStartPost, nor in a comment).
func setsExecStart(unit []byte) bool {
	for _, line := range strings.Split(string(unit), "\n") {
		if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(k) == "ExecStart" {
			return true
		}
	}
	return false
}

// stopHandSupervisor: the supervisor started by hand stops its services and
// ends, as on Ctrl-C. It is asked again just before the signal, and its
// process's start time compared, so neither another supervisor (the unit's,
// started meanwhile) nor a process that took its PID is signalled.
func (o *unitHandoff) stopHandSupervisor(ctx context.Context) error {
	if o.running == nil || o.underUnit {
		return nil
	}
	pid := o.running.PID
	if !o.stopping {
		// Asked again: a supervisor stopping meanwhile (Ctrl-C in its
		// terminal, another install --now) takes a second signal as
		// "kill what still runs at once", so it is only waited for.
		now, err := o.client.About(ctx)
		switch {
		case errors.Is(err, supervisor.ErrNotRunning):
			return nil // it ended meanwhile
		case err != nil:
			return fmt.Errorf("install --now: ask this node's supervisor about itself again: %w; nothing was stopped: run this command again", err)
		case now.Instance != o.running.Instance || now.PID != pid || o.sys.processStart(pid) != o.runningStart:
			return fmt.Errorf("install --now: the supervisor answering (pid %d) is not the one judged (pid %d): another started meanwhile; nothing was stopped: run this command again", now.PID, pid)
		case now.State == supervisor.StateStopping:
			o.stopping = true
		case now.State != supervisor.StateSupervising:
			return fmt.Errorf("install --now: the supervisor (pid %d) is now %s, not supervising; nothing was stopped: `stratum status` says why; run this command again once it supervises", pid, now.State)
		}
	}
	if o.stopping {
		o.a.progress(fmt.Sprintf("waiting for the supervisor started by hand (pid %d), already stopping, to end", pid))
	} else {
		o.a.progress(fmt.Sprintf("stopping the supervisor started by hand (pid %d): its services stop, newest first", pid))
		if err := o.sys.signal(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("install --now: signal the supervisor (pid %d): %w; nothing was stopped", pid, err)
		}
	}
	signalled := time.Now()
	deadline := signalled.Add(o.stopWithin)
	for o.sys.processStart(pid) == o.runningStart && o.runningStart != "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("install --now: the supervisor (pid %d) did not end within %s of its SIGTERM; the unit is written and enabled: stop that supervisor (its terminal says what it does), then run this command again, which starts the unit", pid, o.stopWithin)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("install --now: interrupted while the supervisor (pid %d) stopped: %w; run this command again, which waits for it and starts the unit", pid, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	o.a.progress(fmt.Sprintf("the supervisor started by hand ended, %s after its SIGTERM", time.Since(signalled).Round(100*time.Millisecond)))
	o.stoppedHere = true // its services with it: down until the unit starts
	return nil
}

// startUnit: `systemctl start stratum`, which returns once the supervisor
// says READY (Type=notify), or at once when the unit is active already; then
// the unit's supervisor must supervise: a start that settled into a wait
// fails the command, naming the wait.
func (o *unitHandoff) startUnit(ctx context.Context) error {
	o.a.progress("starting stratum.service (systemctl start returns once the control plane serves)")
	if out, err := o.systemctl(ctx, o.timeout, "start", unitName); err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%s: interrupted while stratum.service started (%w); systemd's start goes on: `systemctl status stratum` says what it does, and `%s` waits for it", o.command, ctx.Err(), o.restart)
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("%s: stratum.service did not say it serves within %s; systemd's start goes on (TimeoutStartSec=30min): `systemctl status stratum` and `journalctl -u stratum` say what it does", o.command, o.timeout)
		}
		state := ""
		if o.stoppedHere {
			// Its services were stopped to be handed over: said, as the
			// docs promise, with the command that starts the unit again.
			state = fmt.Sprintf("; this control plane is stopped (its services stopped here to be handed over) until the unit starts: `%s`, once that is mended, starts it", o.restart)
		}
		return fmt.Errorf("%s: `systemctl start stratum` failed (%w: %s): `systemctl status stratum` and `journalctl -u stratum` say why; systemd tries again by itself (Restart=always) unless its start limit is hit%s", o.command, err, out, state)
	}
	about, err := o.client.About(ctx)
	if err != nil {
		return fmt.Errorf("%s: stratum.service started, and its supervisor did not answer: %w; `systemctl status stratum` says what it does", o.command, err)
	}
	switch main := o.mainPID(ctx, unitName); {
	case main == 0:
		return fmt.Errorf("%s: stratum.service started, and systemd names no main process for it: `systemctl status stratum` says what it does", o.command)
	case main != about.PID:
		return fmt.Errorf("%s: the supervisor answering (pid %d) is not stratum.service's main process (pid %d): another supervisor was started meanwhile; stop it, then `systemctl restart stratum`", o.command, about.PID, main)
	}
	if about.State != supervisor.StateSupervising {
		return fmt.Errorf("%s: stratum.service runs this node's supervisor (pid %d), which is %s, not serving its control plane: `systemctl status stratum` and `stratum status` say why; it goes on by itself", o.command, about.PID, about.State)
	}
	fmt.Fprintf(o.a.stdout, "stratum.service runs this control plane (supervisor pid %d, stratum %s), in %s; systemd starts it at every boot\n", about.PID, about.Version, time.Since(o.startedAt).Round(100*time.Millisecond))
	return nil
}

// processStart is process pid's start time (field 22 of /proc/<pid>/stat),
// "" when no such process runs (or it is a zombie): a PID reused by
// another process does not share it.
func processStart(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command's name, in parentheses, may hold anything: the fields
	// start after its last ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// unitOf is the systemd service whose control group process pid runs in
// ("stratum.service"), "" for none (a login session's scope, no systemd).
func unitOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	return serviceOfCgroups(string(data))
}

// serviceOfCgroups is the systemd service named by a /proc/<pid>/cgroup
// text's unified (cgroup v2) or systemd (v1) hierarchy, "" for none.
func serviceOfCgroups(cgroups string) string {
	for _, line := range strings.Split(cgroups, "\n") {
		// cgroup v2's "0::/path", or v1's systemd hierarchy.
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || (f[0] != "0" && f[1] != "name=systemd") {
			continue
		}
		if base := filepath.Base(f[2]); strings.HasSuffix(base, ".service") {
			return base
		}
	}
	return ""
}

// systemdRuns reports whether systemd is this machine's service manager.
func systemdRuns() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// inStratumUnit reports whether this process runs in stratum.service's
// control group: systemd's unit started it (or its main process, replaced in
// place).
func inStratumUnit() bool { return unitOf(os.Getpid()) == unitName }

// systemctl runs systemctl on this machine with args, bounded by within,
// and returns its output, trimmed.
func systemctl(ctx context.Context, within time.Duration, args ...string) (string, error) {
	return systemctlOn(ctx, thisMachine{}, within, args...)
}

// systemctlOn runs systemctl on m with args, bounded by within, and returns
// its output, trimmed. A command cut off at the bound says so, wrapping
// context.DeadlineExceeded.
func systemctlOn(ctx context.Context, m handoffHost, within time.Duration, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	out, err := m.systemctl(cctx, args...)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		// Killed at the bound: the error says "signal: killed", not why.
		err = fmt.Errorf("not done within %s: %w", within, cctx.Err())
	}
	return strings.TrimSpace(string(out)), err
}
