package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/interrupt"
)

// signalHelperEnv makes the test binary, run again by
// TestSecondInterruptEndsTheProcess, the process under test.
const signalHelperEnv = "STRATUM_TEST_SIGNAL_HELPER"

// TestSecondInterruptEndsTheProcess: a command that does not stop at once
// on its first signal (its context ended) is ended by a second SIGINT, not
// by a closing terminal's second SIGHUP. It runs notifyInterrupts in a
// process of its own and signals it.
func TestSecondInterruptEndsTheProcess(t *testing.T) {
	if os.Getenv(signalHelperEnv) == "1" {
		ctx, stop := notifyInterrupts()
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("interrupted")
		// A cleanup that must finish (interrupt.Hold) while the test's
		// stdin stays open; a command slow to stop after it.
		end := interrupt.Hold()
		fmt.Println("held")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		end()
		fmt.Println("released")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecondInterruptEndsTheProcess$")
	cmd.Env = append(os.Environ(), signalHelperEnv+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != want {
				t.Fatalf("the process said %q, want %q", l, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the process never said %q", want)
		}
	}
	waitLine("ready")
	exited := make(chan error, 1)
	signal := func(s syscall.Signal) {
		t.Helper()
		if err := cmd.Process.Signal(s); err != nil {
			t.Fatalf("signal %s: %v", s, err)
		}
	}
	signal(syscall.SIGTERM) // a SIGHUP would be ignored under a nohup'd go test
	waitLine("interrupted")
	waitLine("held")
	go func() { exited <- cmd.Wait() }()
	signal(syscall.SIGHUP)
	signal(syscall.SIGINT) // held: a cleanup runs
	select {
	case err := <-exited:
		t.Fatalf("a closing terminal's second SIGHUP, or a second SIGINT during a Hold, ended the process: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := fmt.Fprintln(in, "release"); err != nil {
		t.Fatal(err)
	}
	waitLine("released")
	signal(syscall.SIGHUP) // no Hold now: still no second signal
	select {
	case err := <-exited:
		t.Fatalf("a closing terminal's second SIGHUP ended the process: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	signal(syscall.SIGINT)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("after a second SIGINT the process exited: %v, want ended by the signal", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
			t.Fatalf("after a second SIGINT the process exited: %v, want ended by SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second SIGINT did not end the process")
	}
}
