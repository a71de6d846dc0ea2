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

	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
)

// unitHandoff is `stratum install --now`: the control plane a supervisor
// started by hand runs is handed to systemd's unit, the steps docs/real-hosts.md
// gave as three commands (stop the foreground run, daemon-reload, enable
// --now), with the restart's refusals first: a stop that could take the
// etcd quorum is refused before anything is written.
type unitHandoff struct {
	a       *app
	unitDir string
	timeout time.Duration
	client  supervisor.Client
	// running is the supervisor found, nil when none answers; underUnit:
	// it is the unit's main process already (nothing to hand over).
	running   *supervisor.About
	underUnit bool
	notes     []string
	startedAt time.Time
}

// handoffStopWithin bounds the wait for a supervisor started by hand to end
// after its SIGTERM: it stops its services in order (the unit gives systemd's
// own stop 60 s).
const handoffStopWithin = 2 * time.Minute

func handoffRefusedf(format string, args ...any) error {
	return refusedf("install --now refused: "+format+"; nothing was written or changed", args...)
}

// check makes every refusal of the handoff, before the unit is written: root,
// systemd running and reading --unit-dir, a control plane (node state, no
// join or reset left unfinished), and a running supervisor that may stop:
// one started by hand supervising (not starting) a cluster that keeps its
// quorum while this member restarts.
func (o *unitHandoff) check(ctx context.Context) error {
	if err := requireRoot("stratum install --now", "it stops this node's supervisor and starts systemd's unit"); err != nil {
		return err
	}
	if !systemdRuns() {
		return handoffRefusedf("systemd is not running on this machine, so there is no unit to start: run `stratum install` without --now to write it for when systemd runs, and meanwhile `stratum up` under your own supervisor")
	}
	if !slices.Contains(systemdUnitDirs, filepath.Clean(o.unitDir)) {
		return handoffRefusedf("systemd does not read units from --unit-dir %s, so it could not start one written there: leave --unit-dir out (%s)", o.unitDir, systemdUnitDirs[0])
	}
	n, h, err := o.a.localNode()
	if err != nil {
		return err
	}
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) {
		return handoffRefusedf("this node has no control-plane state (%s), and the unit starts only on a node that has (ConditionPathExists): bring it up (`stratum up`) or join it (the join command) first, then run this", nodestate.Path)
	}
	if err != nil {
		return refused(fmt.Errorf("install --now refused: %w; nothing was written or changed", err))
	}
	if what, err := unfinishedWork(ctx, n, h); err != nil {
		return err
	} else if what != "" {
		return handoffRefusedf("%s", what)
	}
	about, err := o.client.About(ctx)
	switch {
	case errors.Is(err, supervisor.ErrNotRunning):
		return nil // nothing to stop: the unit starts the control plane
	case errors.Is(err, supervisor.ErrUnsupported):
		return handoffRefusedf("this node's supervisor is a stratum from before `install --now` (it does not say its process): stop it (Ctrl-C the `stratum up` or `stratum server` running it), then `systemctl daemon-reload && systemctl enable --now stratum`")
	case err != nil:
		return fmt.Errorf("install --now: ask this node's supervisor about itself: %w; nothing was written or changed", err)
	}
	o.running = &about
	if o.underUnit = about.PID != 0 && unitMainPID(ctx) == about.PID; o.underUnit {
		return nil
	}
	if about.State == supervisor.StateStarting {
		return handoffRefusedf("this node's supervisor (pid %d) is starting its control plane: wait until `stratum status` says it supervises, then run this again", about.PID)
	}
	_, note, err := restartKeepsQuorum(ctx, n, st)
	if err != nil {
		return handoffRefusedf("%v", err)
	}
	if note != "" {
		o.notes = append(o.notes, note)
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
	steps := []string{"systemctl daemon-reload, then systemctl enable stratum (started at every boot)"}
	switch {
	case o.running == nil:
		steps = append(steps, "no supervisor runs here: systemctl start stratum starts the control plane from the node state")
	case o.underUnit:
		steps = append(steps, fmt.Sprintf("nothing to hand over: stratum.service already runs this node's supervisor (pid %d)", o.running.PID))
	default:
		steps = append(steps,
			fmt.Sprintf("stop the supervisor started by hand (pid %d, stratum %s) with SIGTERM, as Ctrl-C does: its services stop, and a VIP it holds moves to another control plane", o.running.PID, o.running.Version),
			fmt.Sprintf("systemctl start stratum, which returns once the control plane serves (up to %s)", o.timeout))
	}
	for i, s := range steps {
		fmt.Fprintf(w, "  %d. %s\n", i+1, s)
	}
}

// run takes the steps in order; each is idempotent, so a re-run after an
// interruption converges (a supervisor already stopped is not looked for
// again, an enabled unit stays enabled, a started one started).
func (o *unitHandoff) run(ctx context.Context) error {
	for _, step := range []func(context.Context) error{o.enableUnit, o.stopHandSupervisor, o.startUnit} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// enableUnit: systemd reads the unit just written and starts it at boot.
func (o *unitHandoff) enableUnit(ctx context.Context) error {
	for _, args := range [][]string{{"daemon-reload"}, {"enable", "--quiet", unitName}} {
		if out, err := systemctl(ctx, time.Minute, args...); err != nil {
			return fmt.Errorf("install --now: the unit is written, and `systemctl %s` failed (%w: %s); the running control plane was not touched: run `systemctl daemon-reload && systemctl enable --now stratum` once that is mended", strings.Join(args, " "), err, out)
		}
	}
	o.a.progress("systemd read the unit and starts it at boot (daemon-reload, enable)")
	return nil
}

// stopHandSupervisor: the supervisor started by hand stops its services and
// ends, as on Ctrl-C. Its PID is checked to still run the supervisor's binary
// before the signal, so a PID reused since the question is not signalled.
func (o *unitHandoff) stopHandSupervisor(ctx context.Context) error {
	if o.running == nil || o.underUnit {
		return nil
	}
	pid := o.running.PID
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || !sameFile(exe, o.running.Exe) {
		if !o.client.Running() {
			return nil // it ended meanwhile
		}
		return fmt.Errorf("install --now: the supervisor said it is pid %d, which no longer runs %s (%v); nothing was stopped: stop the supervisor yourself, then `systemctl start stratum`", pid, o.running.Exe, err)
	}
	o.a.progress(fmt.Sprintf("stopping the supervisor started by hand (pid %d): its services stop, newest first", pid))
	signalled := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("install --now: signal the supervisor (pid %d): %w; nothing was stopped", pid, err)
	}
	deadline := time.Now().Add(handoffStopWithin)
	for processAlive(pid) || o.client.Running() {
		if time.Now().After(deadline) {
			return fmt.Errorf("install --now: the supervisor (pid %d) did not end within %s of its SIGTERM; the unit is written and enabled: stop that supervisor (its terminal says what it does), then `systemctl start stratum`", pid, handoffStopWithin)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("install --now: interrupted while the supervisor (pid %d) stopped: %w; run this command again, which starts the unit", pid, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	o.a.progress(fmt.Sprintf("the supervisor started by hand ended, %s after its SIGTERM", time.Since(signalled).Round(100*time.Millisecond)))
	return nil
}

// startUnit: `systemctl start stratum`, which returns once the supervisor
// says READY (Type=notify), then the unit's supervisor must supervise: a
// start that settled into a wait fails the command, naming the wait.
func (o *unitHandoff) startUnit(ctx context.Context) error {
	if !o.underUnit {
		o.a.progress("starting stratum.service (systemctl start returns once the control plane serves)")
		if out, err := systemctl(ctx, o.timeout, "start", unitName); err != nil {
			return fmt.Errorf("install --now: `systemctl start stratum` failed (%w: %s): `systemctl status stratum` and `journalctl -u stratum` say why; systemd tries again by itself (Restart=always)", err, out)
		}
	}
	about, err := o.client.About(ctx)
	if err != nil {
		return fmt.Errorf("install --now: stratum.service started, and its supervisor did not answer: %w; `systemctl status stratum` says what it does", err)
	}
	if main := unitMainPID(ctx); main != about.PID {
		return fmt.Errorf("install --now: the supervisor answering (pid %d) is not stratum.service's main process (pid %d): another supervisor was started meanwhile; stop it, then `systemctl restart stratum`", about.PID, main)
	}
	if about.State != supervisor.StateSupervising {
		return fmt.Errorf("install --now: stratum.service runs this node's supervisor (pid %d), which is %s, not serving its control plane: `systemctl status stratum` and `stratum status` say why; it goes on by itself", about.PID, about.State)
	}
	fmt.Fprintf(o.a.stdout, "stratum.service runs this control plane (supervisor pid %d, stratum %s), in %s; systemd starts it at every boot\n", about.PID, about.Version, time.Since(o.startedAt).Round(100*time.Millisecond))
	return nil
}

// systemdRuns reports whether systemd is this machine's service manager.
func systemdRuns() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

// inStratumUnit reports whether this process runs in stratum.service's
// control group: systemd's unit started it (or its main process, replaced in
// place).
func inStratumUnit() bool {
	data, err := os.ReadFile("/proc/self/cgroup")
	return err == nil && strings.Contains(string(data), "/"+unitName)
}

// systemctl runs systemctl with args, bounded by within, and returns its
// output, trimmed.
func systemctl(ctx context.Context, within time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// unitMainPID is stratum.service's main process as systemd says, 0 when it
// has none (not running, not loaded, or systemctl failed).
func unitMainPID(ctx context.Context) int {
	out, err := systemctl(ctx, 30*time.Second, "show", "--property=MainPID", "--value", unitName)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(out)
	return pid
}
