package sim

import (
	"os/exec"
	"syscall"
	"time"
)

// startChild starts a server process of the simulation so that it dies with
// the simulation: in its own process group (a stop signals the group) and with
// SIGKILL as its parent-death signal, so a test binary that panics or is
// SIGKILLed takes it along. That is the primary guarantee; ReapOrphans' sweep
// is the second line of defence.
//
// The kernel sends the parent-death signal when the thread that forked the
// child exits, not the process (golang/go#27505). The Go runtime only ends a
// thread when a goroutine exits while locked to it (runtime.LockOSThread), so
// children must never be started from a locked goroutine; nothing in the
// simulator locks one.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd.Start()
}

// stopChild signals cmd's process group with sig and waits for done (closed
// once the process is reaped) up to grace; then it kills the group and waits
// for good. It reports whether the kill was needed.
func stopChild(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal, grace time.Duration) (killed bool) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return false
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return true
}
