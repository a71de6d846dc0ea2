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
// SIGTERM or SIGHUP. After it, a second SIGINT or SIGTERM takes its default
// action, ending the process, unless the command watches for one itself
// (`stratum up` and `server` force their shutdown on it, a join's held
// window stops on it; their own signal.Notify keeps it theirs): an operator
// who presses Ctrl-C again means now, and every operation converges when run
// again. A SIGHUP stays caught: a terminal that closes sends two, and the
// second is no operator insisting.
func notifyInterrupts() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), interrupt.Signals()...)
	context.AfterFunc(ctx, func() {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
		stop()
	})
	return ctx, stop
}
