// Package supervisor runs a control plane's services as stratum's own
// children, the way `k0s controller` and `k3s server` do: each service is a
// child process (etcd, kube-apiserver) whose command line is rendered afresh
// at every start, or an in-process task (the VIP, the operator), restarted
// with backoff when it exits, its output appended to a log file that rotates
// by size (internal/rotlog), and stopped
// cleanly (SIGTERM, then SIGKILL after a grace period) on Stop or Shutdown.
//
// A Supervisor implements host.Services, so the ha code starts, stops and
// restarts services through it exactly as it does through the simulator's
// hosts; other stratum commands reach a running supervisor through its
// control socket (Serve, Client).
//
// Children never outlive stratum: each runs in a process group of its own
// with the parent-death signal set to SIGKILL, so a stratum that is killed
// takes its children with it, and Shutdown stops every group.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/quietlog"
	"stratum.dev/stratum/internal/rotlog"
	"stratum.dev/stratum/internal/sdnotify"
)

// Command is one start of a process service: the program and its arguments.
type Command struct {
	Path string
	Args []string
	Env  []string // added to stratum's own environment
}

// Spec describes one supervised service. Exactly one of Command and Run is set.
type Spec struct {
	Name string
	// Command renders the process to run, at every start, so a start after
	// a node-state change runs the new flags.
	Command func() (Command, error)
	// Run is an in-process service: it runs until ctx ends; a return before
	// that is an exit, restarted with backoff like a process's.
	Run func(ctx context.Context) error
	// Ready waits until a just-started service serves; nil means started is
	// ready. A Start returns once Ready does.
	Ready func(ctx context.Context) error
	// Check reports, without starting anything, why the service could not
	// start now (its binary missing or of the wrong version, a port in use).
	// It is not asked while the service runs.
	Check func(ctx context.Context) error
	// Version is the version the service runs ("v3.7.3"), reported in its
	// status; Check makes sure the binary is that one.
	Version string
	// VersionOf, when set, is the version reported instead: for a binary
	// that may be one of several versions (etcd after a downgrade), the
	// one its Check last read from it.
	VersionOf func() string
	// StopTimeout is how long a stop waits after SIGTERM before SIGKILL
	// (default DefaultStopTimeout).
	StopTimeout time.Duration
}

// Timing of restarts and stops.
const (
	DefaultStopTimeout = 15 * time.Second
	// BackoffMin and BackoffMax bound the wait before a restart; it doubles
	// on each exit and returns to BackoffMin after a run of BackoffReset.
	BackoffMin   = 500 * time.Millisecond
	BackoffMax   = 30 * time.Second
	BackoffReset = time.Minute
)

// Config is a supervisor's setup.
type Config struct {
	// Services are the services it can run, by name.
	Services []Spec
	// LogDir is the directory (a real path) each service's log is appended
	// to, as <name>.log.
	LogDir string
	// LogMaxBytes and LogKeep bound each service's log: past LogMaxBytes
	// it rotates at a line end to <name>.log.1, keeping LogKeep old files
	// (rotlog.Open's defaults when zero or less).
	LogMaxBytes int64
	LogKeep     int
	Log         *slog.Logger
	// OnShutdownStop, when set, is told the name of each service Shutdown
	// is about to stop, so a long shutdown (a SIGTERM grace of seconds)
	// shows what it waits for.
	OnShutdownStop func(service string)
	// Identity is what the supervisor reports of itself (About).
	Identity Identity
	// CheckReplacement, when set, judges a Replacement a control-socket
	// caller asks for (nil: refused); an accepted one is delivered on
	// ReplaceRequested.
	CheckReplacement func(Replacement) error
}

// Supervisor runs Config.Services on demand. Safe for concurrent use.
type Supervisor struct {
	logDir string
	// logMaxBytes and logKeep are Config's, passed to rotlog.Open as given.
	logMaxBytes int64
	logKeep     int
	log         *slog.Logger

	mu    sync.Mutex
	units map[string]*unit
	order []string // start order, for Shutdown in reverse
	// shuttingDown is set by Shutdown: no service starts after it.
	shuttingDown bool
	// exitChecks counts the exit requests checking that nothing runs: no
	// service starts meanwhile (nor once one closed exit), so none starts
	// between a check and the end.
	exitChecks int

	// exit is closed once a control-socket caller asked an idle supervisor
	// to end (Client.Exit).
	exit     chan struct{}
	exitOnce sync.Once
	// force is closed by Force: every stop from then on, and every stop
	// waiting out its grace, kills at once.
	force     chan struct{}
	forceOnce sync.Once
	onStop    func(string)

	identity         Identity
	instance         string // About.Instance
	state            string // SetState's, under mu
	checkReplacement func(Replacement) error
	replace          chan Replacement
}

// ErrServicesRunning: an exit asked of a supervisor that still runs
// services. The socket ends only an idle supervisor; a running control
// plane is stopped by a signal, which stops its services in order.
var ErrServicesRunning = errors.New("the stratum supervisor still runs services")

// ErrShuttingDown: a start asked of a supervisor that is stopping every
// service on its way out (SIGTERM, its `stratum up` ending).
var ErrShuttingDown = errors.New("the stratum supervisor is stopping every service on its way out")

// New returns a supervisor with nothing running.
func New(cfg Config) (*Supervisor, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Supervisor{logDir: cfg.LogDir, logMaxBytes: cfg.LogMaxBytes, logKeep: cfg.LogKeep, log: log, units: map[string]*unit{}, exit: make(chan struct{}), force: make(chan struct{}), onStop: cfg.OnShutdownStop,
		identity: cfg.Identity, instance: newInstance(), state: StateStarting, checkReplacement: cfg.CheckReplacement, replace: make(chan Replacement, 1)}
	for _, sp := range cfg.Services {
		if sp.Name == "" || (sp.Command == nil) == (sp.Run == nil) {
			return nil, fmt.Errorf("supervisor: service %q needs a name and exactly one of Command and Run", sp.Name)
		}
		if _, dup := s.units[sp.Name]; dup {
			return nil, fmt.Errorf("supervisor: service %q declared twice", sp.Name)
		}
		if sp.StopTimeout == 0 {
			sp.StopTimeout = DefaultStopTimeout
		}
		s.units[sp.Name] = &unit{spec: sp, sup: s, exited: make(chan struct{})}
	}
	return s, nil
}

func (s *Supervisor) unit(name string) (*unit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.units[name]
	if !ok {
		known := make([]string, 0, len(s.units))
		for n := range s.units {
			known = append(known, n)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("%w %q (this supervisor runs %s)", host.ErrUnknownService, name, strings.Join(known, ", "))
	}
	return u, nil
}

// StartService starts the named service, unless it runs, and waits until it
// is ready. A service that fails its readiness wait keeps being restarted
// (it is wanted); the error says why it is not ready yet.
func (s *Supervisor) StartService(ctx context.Context, name string) error {
	u, err := s.unit(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if !containsString(s.order, name) {
		s.order = append(s.order, name)
	}
	s.mu.Unlock()
	return u.start(ctx)
}

// StopService stops the named service and waits until it has exited.
// Stopping a stopped service is a no-op.
func (s *Supervisor) StopService(ctx context.Context, name string) error {
	u, err := s.unit(name)
	if err != nil {
		return err
	}
	u.stop()
	return nil
}

// RestartService stops the named service and starts it again (a stopped one
// is started), waiting until it is ready. A process service's command is
// rendered first: a restart whose launch would be refused (a binary swapped
// on disk that is not the pinned one, the node state unreadable) fails
// with the running instance left running, not stopped for a launch that
// cannot follow.
func (s *Supervisor) RestartService(ctx context.Context, name string) error {
	u, err := s.unit(name)
	if err != nil {
		return err
	}
	if u.spec.Command != nil {
		if _, err := u.spec.Command(); err != nil {
			return fmt.Errorf("restart %s: %w; it was not stopped", name, err)
		}
	}
	u.stop()
	return s.StartService(ctx, name)
}

// ServiceStatus reports whether the named service runs, and its state in
// words ("running (pid 42) since ...", "restarting after: exit status 1",
// "stopped").
func (s *Supervisor) ServiceStatus(_ context.Context, name string) (host.ServiceStatus, error) {
	u, err := s.unit(name)
	if err != nil {
		return host.ServiceStatus{}, err
	}
	return u.status(), nil
}

// CheckServices asks each named service that is not running whether it
// could start now, and joins every problem into one error matching
// host.ErrServicesUnavailable.
func (s *Supervisor) CheckServices(ctx context.Context, names []string) error {
	var problems []string
	for _, name := range names {
		u, err := s.unit(name)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if u.status().Running || u.spec.Check == nil {
			continue
		}
		if err := u.spec.Check(ctx); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", host.ErrServicesUnavailable, strings.Join(problems, "; "))
	}
	return nil
}

// ExitRequested is closed once a control-socket caller asked the supervisor
// to end while it ran nothing (Client.Exit): its node has nothing left to
// run, as after `stratum reset`.
func (s *Supervisor) ExitRequested() <-chan struct{} { return s.exit }

// requestExit closes ExitRequested, refused (ErrServicesRunning, naming
// them) while any service runs. Starts are refused from before its check
// (exitChecks; a start that made its keeper before is one the check sees),
// so no service starts under a supervisor on its way out.
func (s *Supervisor) requestExit() error {
	s.mu.Lock()
	s.exitChecks++
	names := make([]string, 0, len(s.units))
	for name := range s.units {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	var running []string
	for _, name := range names {
		if u, err := s.unit(name); err == nil && u.active() {
			running = append(running, name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exitChecks--
	if len(running) > 0 {
		return fmt.Errorf("%w (%s); it was not ended: stop them first, or send it SIGTERM, which stops them in order", ErrServicesRunning, strings.Join(running, ", "))
	}
	s.exitOnce.Do(func() { close(s.exit) })
	s.log.Info("asked to end through the control socket: nothing runs")
	return nil
}

// Shutdown stops every service, in the reverse of the order they were first
// started (the VIP before the apiserver before etcd), and waits for each.
// From its call on, no start is accepted (ErrShuttingDown), while the
// control socket keeps answering: a status says what still runs, so no
// caller takes a service that is still stopping for one that is stopped.
func (s *Supervisor) Shutdown() {
	s.mu.Lock()
	s.shuttingDown = true
	order := append([]string(nil), s.order...)
	s.mu.Unlock()
	for i := len(order) - 1; i >= 0; i-- {
		if u, err := s.unit(order[i]); err == nil {
			if s.onStop != nil && u.active() {
				s.onStop(order[i])
			}
			u.stop()
		}
	}
}

// Force makes every stop kill at once: a process service's group gets
// SIGKILL without its SIGTERM grace (also one already waiting it out), and
// an in-process service's stop no longer waits for it to return. It is the
// operator's second signal during a shutdown: stop now, at the price of a
// clean stop (etcd and the apiserver killed mid-write, as a crash would;
// the VIP's lease left to expire instead of released). It cannot be undone.
func (s *Supervisor) Force() {
	s.forceOnce.Do(func() {
		s.log.Warn("stopping every service at once: SIGKILL, no grace")
		close(s.force)
	})
}

func (s *Supervisor) isShuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exit:
		return true
	default:
		return s.shuttingDown || s.exitChecks > 0
	}
}

var _ host.Services = (*Supervisor)(nil)

// unit is one service's state: whether it is wanted, and its keeper, the
// goroutine that runs it and restarts it while it is wanted.
type unit struct {
	spec Spec
	sup  *Supervisor

	mu     sync.Mutex
	keeper *keeper // nil when stopped or stopping
	// stopping is the keeper a stop cancelled and waits for: its instance
	// may still run (a SIGTERM grace), so the unit is not stopped yet, and a
	// start waits for it rather than launch a second instance beside it.
	stopping *keeper
	pid      int
	since    time.Time
	lastErr  error
	waiting  time.Time // when the next restart is due, while backing off
	// exited is closed, and replaced, at each exit of the service's
	// instance: a start's readiness wait counts them (exitsBeforeNotReady).
	exited chan struct{}
}

// exitsBeforeNotReady is how many exits of a service during its start's
// readiness wait, the last at least crashLoopAfter into it, end that wait:
// a service that crashes at every launch (a bad flag, a data directory it
// cannot read) is then reported within seconds, with its log's end,
// instead of after the whole readiness bound (minutes) of restarts with
// backoff, while one that exits a few times quickly on its way up (a peer
// not ready yet) and then serves still starts.
const (
	exitsBeforeNotReady = 3
	crashLoopAfter      = 15 * time.Second
)

// exitSignal is closed at the service's next exit.
func (u *unit) exitSignal() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.exited
}

// errCrashLoop ends a readiness wait whose service kept exiting.
type errCrashLoop struct {
	exits int
	last  error
}

func (e errCrashLoop) Error() string {
	return fmt.Sprintf("it exited %d times while starting (the last: %v); it is restarted with backoff meanwhile", e.exits, e.last)
}

// readyUnlessCrashLooping is the spec's Ready, ended early at the service's
// first exit crashLoopAfter or more into it with exitsBeforeNotReady exits
// behind it.
func (u *unit) readyUnlessCrashLooping(ctx context.Context) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	began := time.Now()
	go func() {
		for exits := 0; ; {
			select {
			case <-rctx.Done():
				return
			case <-u.exitSignal():
				if exits++; exits >= exitsBeforeNotReady && time.Since(began) >= crashLoopAfter {
					u.mu.Lock()
					last := u.lastErr
					u.mu.Unlock()
					cancel(errCrashLoop{exits: exits, last: last})
					return
				}
			}
		}
	}()
	err := u.spec.Ready(rctx)
	var loop errCrashLoop
	if err != nil && errors.As(context.Cause(rctx), &loop) {
		return loop
	}
	return err
}

// keeper runs a wanted service until cancelled.
type keeper struct {
	cancel  context.CancelFunc
	done    chan struct{}
	started chan error // the first launch's result, put back by each reader
}

func (u *unit) start(ctx context.Context) error {
	u.mu.Lock()
	for u.keeper == nil && u.stopping != nil {
		s := u.stopping
		u.mu.Unlock()
		select {
		case <-s.done:
		case <-ctx.Done():
			return fmt.Errorf("start %s: still stopping: %w", u.spec.Name, ctx.Err())
		}
		u.mu.Lock()
	}
	k := u.keeper
	if k == nil && u.sup.isShuttingDown() {
		// Checked under the unit's lock: a keeper made before Shutdown's
		// flag is one its stop sees; none is made after it.
		u.mu.Unlock()
		return fmt.Errorf("start %s: %w; nothing was started: run it again once `stratum up` runs", u.spec.Name, ErrShuttingDown)
	}
	if k == nil {
		kctx, cancel := context.WithCancel(context.Background())
		k = &keeper{cancel: cancel, done: make(chan struct{}), started: make(chan error, 1)}
		u.keeper = k
		go u.keep(kctx, k)
	}
	u.mu.Unlock()
	select {
	case err := <-k.started:
		k.started <- err // others waiting on the same keeper see it too
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return fmt.Errorf("start %s: %w", u.spec.Name, ctx.Err())
	}
	if u.spec.Ready == nil {
		return nil
	}
	if err := u.readyUnlessCrashLooping(ctx); err != nil {
		return fmt.Errorf("%s started but is not ready: %w%s", u.spec.Name, err, u.logHint())
	}
	return nil
}

// logHintLines is how many of its log's last lines a failed start quotes,
// read from at most logHintBytes at the end of each file.
const (
	logHintLines = 8
	logHintBytes = 64 << 10
)

// logHint names the service's log and quotes its last lines.
func (u *unit) logHint() string {
	if u.spec.Command == nil || u.sup.logDir == "" {
		return ""
	}
	p := u.sup.logPath(u.spec.Name)
	data, err := readTail(p, logHintBytes)
	if err != nil {
		return ""
	}
	if strings.Count(string(data), "\n") < logHintLines {
		// Just rotated: the lines before are in the newest old file.
		if older, err := readTail(p+".1", logHintBytes); err == nil {
			data = append(older, data...)
		}
	}
	return fmt.Sprintf("; its log %s ends:\n%s", p, lastLines(string(data), logHintLines))
}

// readTail reads at most the last n bytes of the file at p: a log may be
// tens of MiB, and only its end is quoted.
func readTail(p string, n int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	m, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:m], nil
}

// stop cancels the keeper and waits until its instance has exited; until
// then the unit reports "stopping". A stop while another stop waits waits
// for the same exit.
func (u *unit) stop() {
	u.mu.Lock()
	k := u.keeper
	if k == nil {
		k = u.stopping
	} else {
		u.keeper, u.stopping = nil, k
	}
	u.mu.Unlock()
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
	u.mu.Lock()
	if u.stopping == k {
		u.stopping = nil
	}
	u.mu.Unlock()
}

// active reports whether the unit has a keeper or one stopping: a service
// that is wanted (running, starting, backing off) or not yet exited.
func (u *unit) active() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.keeper != nil || u.stopping != nil
}

func (u *unit) status() host.ServiceStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := host.ServiceStatus{Name: u.spec.Name, Version: u.spec.Version}
	if u.spec.VersionOf != nil {
		st.Version = u.spec.VersionOf()
	}
	switch {
	case u.keeper == nil && u.stopping != nil:
		// Still alive until its stop's grace ends: its ports are held.
		st.Running = true
		st.Detail = "stopping"
		if u.pid != 0 {
			st.Detail = fmt.Sprintf("stopping (pid %d)", u.pid)
		}
	case u.keeper == nil:
		st.Detail = "stopped"
	case u.pid == 0 && u.since.IsZero() && u.waiting.IsZero():
		st.Detail = "starting"
	case !u.waiting.IsZero():
		st.Detail = fmt.Sprintf("restarting after: %v (next try %s)", u.lastErr, u.waiting.Format(time.RFC3339))
	case u.pid != 0:
		st.Running, st.Since = true, u.since
		st.Detail = fmt.Sprintf("running (pid %d) since %s", u.pid, u.since.Format(time.RFC3339))
	default:
		st.Running, st.Since = true, u.since
		st.Detail = "running since " + u.since.Format(time.RFC3339)
	}
	return st
}

// keep launches the service and relaunches it with backoff after every exit
// until ctx ends; then it stops the running instance and returns.
func (u *unit) keep(ctx context.Context, k *keeper) {
	defer close(k.done)
	log := u.sup.log.With("service", u.spec.Name)
	backoff := BackoffMin
	first := true
	// A service failing the same way every 30 s for days says so once.
	repeats := quietlog.Repeats{Log: log}
	for {
		started := time.Now()
		exited, stop, err := u.launch(ctx)
		if first {
			first = false
			if err != nil {
				// A service that cannot even launch (its binary missing, its
				// flags unrenderable) is not retried: the caller hears why,
				// after the unit is already back to stopped.
				u.mu.Lock()
				if u.keeper == k {
					u.keeper = nil
				}
				u.mu.Unlock()
				k.started <- err
				return
			}
			k.started <- nil
		}
		if err == nil {
			// After repeated failures, its start is said once it has run
			// past the backoff reset: a recovery, not one more restart.
			var recovered <-chan time.Time
			if repeats.Repeating() {
				log.Debug("service started")
				recovered = time.After(BackoffReset)
			} else {
				log.Info("service started")
			}
		running:
			for {
				select {
				case err = <-exited:
					if err == nil {
						err = errors.New("exited")
					}
					if time.Since(started) > BackoffReset {
						repeats.Reset() // it ran well meanwhile: a new story
					}
					repeats.Warn("service exited; restarting", err)
					break running
				case <-recovered:
					log.Info("service running again after its repeated failures")
					repeats.Reset()
					recovered = nil
				case <-ctx.Done():
					stop()
					log.Info("service stopped")
					u.setRunning(0, time.Time{}, nil)
					return
				}
			}
		} else {
			repeats.Warn("service failed to start; retrying", err)
		}
		if time.Since(started) > BackoffReset {
			backoff = BackoffMin
		}
		u.mu.Lock()
		u.pid, u.lastErr, u.waiting = 0, err, time.Now().Add(backoff)
		close(u.exited) // wakes the readiness waits counting exits
		u.exited = make(chan struct{})
		u.mu.Unlock()
		select {
		case <-ctx.Done():
			u.setRunning(0, time.Time{}, nil)
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, BackoffMax)
	}
}

func (u *unit) setRunning(pid int, since time.Time, err error) {
	u.mu.Lock()
	u.pid, u.since, u.lastErr, u.waiting = pid, since, err, time.Time{}
	u.mu.Unlock()
}

// childEnv is env without the service manager's notify socket: etcd
// notifies it itself when it finds one, and the readiness a service manager
// waits for is the supervisor's (sdnotify), not a child's.
func childEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, sdnotify.SocketEnv+"=")
	})
}

// runRecovered runs an in-process service, its panic taken as its exit with
// an error (the stack in it), which the supervisor restarts as any other:
// a panic left to itself ended stratum, and every child with it by their
// parent-death signal.
func runRecovered(ctx context.Context, name string, run func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s panicked: %v\n%s", name, p, debug.Stack())
		}
	}()
	return run(ctx)
}

// launch starts one instance. exited receives its exit (nil for a clean
// one); stop ends it and waits.
func (u *unit) launch(ctx context.Context) (exited <-chan error, stop func(), err error) {
	if u.spec.Run != nil {
		rctx, cancel := context.WithCancel(ctx)
		ch := make(chan error, 1)
		done := make(chan struct{})
		// Running before it runs: a service that signals from its first
		// line (a test's, a readiness probe's) must find its status says so.
		u.setRunning(0, time.Now(), nil)
		go func() {
			defer close(done)
			// Its context ends with it: a service that returns by itself
			// (a VIP refused, a lost lease) is launched again on a new
			// one, and the old must not stay a child of the keeper's for
			// as long as the service is wanted.
			defer cancel()
			ch <- runRecovered(rctx, u.spec.Name, u.spec.Run)
		}()
		return ch, func() {
			cancel()
			select {
			case <-done:
			case <-u.sup.force: // it ends with the process
			}
		}, nil
	}
	c, err := u.spec.Command()
	if err != nil {
		return nil, nil, fmt.Errorf("render %s's command: %w", u.spec.Name, err)
	}
	if err := ctx.Err(); err != nil {
		// A shutdown began while the command was rendered (up to 20 s for
		// a crash-looping etcd's version probe): nothing is started, for
		// the shutdown to stop again past the unit's stop timeout.
		return nil, nil, fmt.Errorf("start %s: %w", u.spec.Name, context.Cause(ctx))
	}
	logFile, err := u.sup.openLog(u.spec.Name)
	if err != nil {
		// A log that cannot be opened (/var/log read-only after an I/O
		// error, out of inodes) never keeps a service from running: its
		// output is lost, said here, rather than etcd or the apiserver
		// left down until the log's volume is mended.
		u.sup.log.Warn("the service runs without its log, its output lost", "service", u.spec.Name, "err", err)
		if logFile, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
			return nil, nil, fmt.Errorf("start %s: its log: %w", u.spec.Name, err)
		}
	}
	// The child writes into a pipe the supervisor drains into the log,
	// which rotates by size; a child writing to the file itself would keep
	// writing to it after a rotation.
	pr, pw, err := os.Pipe()
	if err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("start %s: output pipe: %w", u.spec.Name, err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = append(childEnv(os.Environ()), c.Env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = childAttr()
	fmt.Fprintf(logFile, "--- stratum: starting %s at %s\n", u.spec.Name, time.Now().Format(time.RFC3339))
	err = cmd.Start()
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		logFile.Close()
		return nil, nil, fmt.Errorf("start %s (%s): %w", u.spec.Name, c.Path, err)
	}
	d := &drain{log: logFile, pipe: pr, done: make(chan struct{}), born: time.Now()}
	go d.run()
	ch := make(chan error, 1)
	reaped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(reaped)
		d.finish(pr)
		fmt.Fprintf(logFile, "--- stratum: %s exited at %s: %v\n", u.spec.Name, time.Now().Format(time.RFC3339), exitText(err))
		logFile.Close()
		ch <- err
		close(done)
	}()
	u.setRunning(cmd.Process.Pid, time.Now(), nil)
	stop = func() {
		stopGroup(cmd.Process.Pid, reaped, u.spec.StopTimeout, u.sup.force)
		<-done
	}
	return ch, stop, nil
}

// drainIdleAfterExit: once the child has exited, its output pipe is closed
// when nothing came through it for this long. The pipe ends by itself when
// every holder of its write end has exited; something the child left
// behind may hold it longer.
const drainIdleAfterExit = 2 * time.Second

// drain copies a child's output from its pipe into its log until the pipe
// ends. A write that fails (a full disk) drops that output and the copy
// goes on: a child blocked on a full pipe would stop serving, which a lost
// log line never justifies.
type drain struct {
	log  io.Writer
	pipe io.Reader
	done chan struct{}
	// born is when the drain began; last is when a read last returned
	// output or a write to the log ended, as nanoseconds since born.
	born time.Time
	last atomic.Int64
}

func (d *drain) touch() { d.last.Store(int64(time.Since(d.born))) }

// idle is how long since the last touch, on the monotonic clock (a wall
// clock stepped by NTP would cut a crash's last output or hold its exit).
func (d *drain) idle() time.Duration { return time.Since(d.born) - time.Duration(d.last.Load()) }

func (d *drain) run() {
	defer close(d.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := d.pipe.Read(buf)
		if n > 0 {
			d.touch()
			_, _ = d.log.Write(buf[:n])
			d.touch()
		}
		if err != nil {
			return
		}
	}
}

// drainAtMostAfterExit bounds the drain after the child's exit whatever
// still comes: something the child left in a session of its own may hold
// the pipe and write for ever, and the exit must still reach the keeper.
const drainAtMostAfterExit = 10 * time.Second

// finish waits, after the child's exit, until the drain has copied all
// there is: the pipe's end, or drainIdleAfterExit without output (at most
// drainAtMostAfterExit in all), when the read end is closed. A crash's last
// output (a panic's trace) is not cut while it still comes.
func (d *drain) finish(readEnd io.Closer) {
	// The exit counts as output: the idle time runs from it at the
	// earliest, so a drain not yet scheduled when the child died still
	// copies its last words.
	d.touch()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(drainAtMostAfterExit)
	for {
		select {
		case <-d.done:
			readEnd.Close()
			return
		case <-tick.C:
			if d.idle() >= drainIdleAfterExit || time.Now().After(deadline) {
				readEnd.Close()
				<-d.done
				return
			}
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// childAttr puts a child in a process group of its own, so a stop reaches
// everything it spawned, and has the kernel kill it when stratum dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stopGroup sends SIGTERM to the process group pgid, waits up to grace for
// the leader to exit (reaped), or until force is closed, then SIGKILLs the
// group. The group is killed in the end either way, so nothing it spawned
// lingers (nor holds the leader's output pipe open).
func stopGroup(pgid int, reaped <-chan struct{}, grace time.Duration, force <-chan struct{}) {
	select {
	case <-force:
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-reaped:
		case <-t.C:
		case <-force:
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-reaped
}

func (s *Supervisor) logPath(name string) string {
	return filepath.Join(s.logDir, name+".log")
}

// openLog opens the service's log, rotating by the supervisor's limits (the
// null device when the supervisor keeps no logs).
func (s *Supervisor) openLog(name string) (io.WriteCloser, error) {
	if s.logDir == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if err := os.MkdirAll(s.logDir, 0o750); err != nil {
		return nil, fmt.Errorf("log directory %s: %w", s.logDir, err)
	}
	f, err := rotlog.Open(s.logPath(name), s.logMaxBytes, s.logKeep)
	if err != nil {
		return nil, fmt.Errorf("open %s's log: %w", name, err)
	}
	return f, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
