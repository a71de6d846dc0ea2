package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"time"
)

// helperArg, as the test binary's first argument, makes the binary a small
// network tool instead of a test run: a Debian base has no nc, so the
// harness's tests re-execute themselves inside the hosts.
const helperArg = "-st-e2e-helper"

func init() {
	if len(os.Args) < 3 || os.Args[1] != helperArg {
		return
	}
	os.Exit(runHelper(os.Args[2], os.Args[3:]))
}

// helperCommand is the command line running helper mode with args:
//
//	serve ADDR  listen on ADDR (tcp) and answer every connection with
//	            "hello from <hostname>" and a newline
//	dial ADDR   connect to ADDR and print the first line it sends
func helperCommand(mode string, args ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return append([]string{exe, helperArg, mode}, args...)
}

func runHelper(mode string, args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "e2e helper %s: want one address, got %q\n", mode, args)
		return 2
	}
	switch mode {
	case "serve":
		name, _ := os.Hostname()
		ln, err := net.Listen("tcp", args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("listening on", ln.Addr())
		for {
			c, err := ln.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintf(c, "hello from %s\n", name)
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", args[0], 2*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Print(line)
		return 0
	}
	fmt.Fprintf(os.Stderr, "e2e helper: unknown mode %q\n", mode)
	return 2
}
