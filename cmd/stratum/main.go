// Command stratum is the CLI of stratum's HA control-plane join reference
// implementation; the command tree is package cli. main binds it to this
// machine: os.Args, the process's streams, execve (with which `stratum
// server` moves join secrets given as flags out of its command line), and
// SIGINT / SIGTERM / SIGHUP
// cancelling the running command (which tears down what it started): a
// foreground `stratum up` whose SSH session drops stops its control plane
// cleanly, releasing the VIP, instead of dying with its children killed
// (interrupt.Signals; one started under nohup keeps running). A second
// SIGINT or SIGTERM ends a command still stopping (notifyInterrupts).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"stratum.dev/stratum/cmd/stratum/cli"
	"stratum.dev/stratum/internal/interrupt"
)

func main() {
	// A write to a stdout or stderr whose reader is gone (a `| tee` that
	// died with the terminal) fails with EPIPE instead of killing stratum
	// with SIGPIPE before its shutdown runs, as Go does to a program that
	// does not ask for SIGPIPE. A caught signal is reset across exec: the
	// children keep the default.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := notifyInterrupts()
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, cli.Options{Exec: func(path string, argv, env []string) error {
		if path == "" {
			// This very binary, even if the file was replaced since it started.
			path = "/proc/self/exe"
		}
		return syscall.Exec(path, argv, env)
	}})
	stop()
	os.Exit(code)
}

// notifyInterrupts is the command's context, ended by its first SIGINT,
// SIGTERM or SIGHUP (interrupt.Signals: not a SIGHUP ignored under nohup).
// After it, a second SIGINT or SIGTERM ends the process (its default action,
// raised again), unless a Hold is open (interrupt.Hold: `stratum up` and
// `server`, which force their shutdown on it or stop a join's held window,
// and a cleanup putting back what the stopped operation changed): an
// operator who presses Ctrl-C again means now, and every operation
// converges when run again. A second SIGHUP is ignored: a terminal that
// closes sends two, and the second is no operator insisting.
func notifyInterrupts() (context.Context, context.CancelFunc) {
	sigs := interrupt.Signals()
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	context.AfterFunc(ctx, func() {
		second := make(chan os.Signal, 4)
		signal.Notify(second, sigs...)
		stop()
		go func() {
			for s := range second {
				if s == syscall.SIGHUP || interrupt.Held() {
					continue
				}
				sig, ok := s.(syscall.Signal)
				if !ok {
					continue
				}
				signal.Reset(sig)
				_ = syscall.Kill(syscall.Getpid(), sig)
				return
			}
		}()
	})
	return ctx, stop
}
