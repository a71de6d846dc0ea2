package supervisor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Identity is what a supervisor was started as, which Client.About reports
// with its process: the stratum it is and what it runs its services from.
type Identity struct {
	// Version is the supervisor's own stratum version.
	Version string `json:"version"`
	// BinDir is the directory its etcd and kube-apiserver run from.
	BinDir string `json:"binDir"`
	// Operator is whether it runs the operator.
	Operator bool `json:"operator"`
}

// About is a running supervisor's answer to Client.About.
type About struct {
	Identity
	// PID is the supervisor's process; a supervisor replaced in place
	// (Replacement) keeps it, as systemd expects of its main process.
	PID int `json:"pid"`
	// Instance is random and new at every supervisor's start: a caller
	// tells the supervisor that replaced one apart from it by this, since
	// the PID stays and the version may not change.
	Instance string `json:"instance"`
	// Exe is the file the process runs (os.Executable, links resolved).
	Exe string `json:"exe"`
	// State is what the supervisor does, as it last said (SetState):
	// StateStarting until its control plane is up, StateSupervising then,
	// or a wait it names.
	State string `json:"state"`
}

// States a supervisor reports in About.State; a wait is reported in words.
const (
	StateStarting    = "starting"
	StateSupervising = "supervising"
	// StateStopping: a stop signal came, and its services are stopping.
	StateStopping = "stopping"
)

// Replacement asks a supervisor to stop every service, as Shutdown does,
// and then replace its process with Path run as Args (execve): an upgrade
// of the node's stratum in place, the process and its PID kept, so the
// service manager running it (systemd's unit, a terminal) keeps it, and the
// new stratum starts the control plane from the node's state as a boot does.
type Replacement struct {
	// Path is the program, an absolute path.
	Path string `json:"path"`
	// Args is its argv, Args[0] its name.
	Args []string `json:"args"`
}

// StateReplacing starts the state of a supervisor that accepted a
// Replacement: it stops its services to run it.
const StateReplacing = "stopping to run "

// ErrUnsupported matches a control-socket operation the answering
// supervisor does not know: a stratum older than the caller's.
var ErrUnsupported = errors.New("the running stratum supervisor does not support this operation")

// newInstance is a new About.Instance.
func newInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// SetState records what the supervisor does, for About.
func (s *Supervisor) SetState(state string) {
	s.mu.Lock()
	s.state = state
	s.mu.Unlock()
}

// About is what Client.About answers: the identity the supervisor was
// started with, its process and its state.
func (s *Supervisor) About() About {
	exe, err := os.Executable()
	if err == nil {
		exe, _ = filepath.EvalSymlinks(exe)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return About{Identity: s.identity, PID: os.Getpid(), Instance: s.instance, Exe: exe, State: s.state}
}

// ReplaceRequested delivers a Replacement a control-socket caller asked for
// and Config.CheckReplacement accepted. The supervisor's owner stops every
// service and replaces the process (the supervisor cannot: the process is
// its owner's).
func (s *Supervisor) ReplaceRequested() <-chan Replacement { return s.replace }

// requestReplacement passes r to ReplaceRequested and says so in the
// state (StateReplacing), all under the supervisor's lock, so no caller sees
// it supervising once it accepted. It is refused when the supervisor was not
// set up to be replaced, while it shuts down, while it is not
// StateSupervising (a start, a retried start or a wait: the owner reads
// ReplaceRequested only while it supervises), while an earlier replacement
// is under way, and when CheckReplacement refuses r (which must not call the
// supervisor back).
func (s *Supervisor) requestReplacement(r Replacement) error {
	if s.checkReplacement == nil {
		return fmt.Errorf("%w: this supervisor is not replaced in place", ErrUnsupported)
	}
	if !filepath.IsAbs(r.Path) || len(r.Args) == 0 {
		return fmt.Errorf("a replacement names an absolute program path and its argv (got %q, %d arguments); nothing was changed", r.Path, len(r.Args))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.shuttingDown || s.exitChecks > 0:
		return fmt.Errorf("%w: it is not replaced", ErrShuttingDown)
	case strings.HasPrefix(s.state, StateReplacing):
		return fmt.Errorf("a replacement of this supervisor is already under way (%s); nothing more was changed", s.state)
	case s.state != StateSupervising:
		return fmt.Errorf("this supervisor is %s, not supervising a control plane that is up: it is replaced only then; nothing was changed", s.state)
	}
	if err := s.checkReplacement(r); err != nil {
		return fmt.Errorf("replacement by %s refused: %w; nothing was changed", r.Path, err)
	}
	s.state = StateReplacing + r.Path + " in its place"
	s.replace <- r // buffered, and nothing is pending: the state says so
	s.log.Info("asked through the control socket to stop every service and run another stratum in its place", "path", r.Path, "args", r.Args)
	return nil
}

// About asks the supervisor for its identity, process and state. Its PID
// is the one the kernel gives for the socket's peer, numbered in the
// caller's PID namespace, so a caller signals the supervisor and not the
// process that has its number here; 0 when the supervisor runs in a PID
// namespace the caller does not see into. ErrUnsupported: it is a stratum
// from before the operation.
func (c Client) About(ctx context.Context) (About, error) {
	ctx, cancel := context.WithTimeout(ctx, aboutTimeout)
	defer cancel()
	resp, pid, err := c.exchange(ctx, request{Op: "about"})
	if err != nil {
		return About{}, err
	}
	if resp.About == nil {
		return About{}, errors.New("the stratum supervisor sent no answer about itself")
	}
	a := *resp.About
	a.PID = pid
	return a, nil
}

// aboutTimeout bounds one About: a supervisor answers it from memory.
const aboutTimeout = 5 * time.Second

// Replace asks the supervisor to stop its services and replace itself (a
// Replacement). It returns once the supervisor accepted; the stops and the
// new program's start follow, and About tells when it serves again.
func (c Client) Replace(ctx context.Context, r Replacement) error {
	_, err := c.call(ctx, request{Op: "replace", Replacement: &r})
	return err
}
