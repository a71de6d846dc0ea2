// Command stratum is the CLI of stratum's HA control-plane join reference
// implementation; the command tree is package cli. main binds it to this
// machine: os.Args, the process's streams, and SIGINT / SIGTERM cancelling
// the running command (which tears down what it started).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"stratum.dev/stratum/cmd/stratum/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, cli.Options{})
	stop()
	os.Exit(code)
}
