package scenarios

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// plantEnv, set to plantStall, lets TestPlantedStall run: only
// TestAFailureIsReported sets it, in the child go test it starts.
const (
	plantEnv   = "STRATUM_SCENARIO_PLANT"
	plantStall = "stall"
)

// TestPlantedStall is TestSplitBrain's gate with a planted bug: its
// per-member read never times out (an hour), and one drawn member stalls
// (accepts the connection, never answers). The gate then hangs, and the
// property must find that within its bound and report it. It runs only in
// the child process TestAFailureIsReported starts.
func TestPlantedStall(t *testing.T) {
	if os.Getenv(plantEnv) != plantStall {
		t.Skipf("a planted failure; TestAFailureIsReported runs it with %s=%s", plantEnv, plantStall)
	}
	property(t, func(rt *rapid.T) {
		s := newSplitBrain(rt)
		stalled := s.c.Host(rapid.SampledFrom(s.names()).Draw(rt, "stalled member"))
		s.plant = stallPlant{readTimeout: time.Hour, stalled: map[string]string{hostPort(stalled.ClientURL()): blackHole(rt)}}
		s.c.Events().Record(stalled.Name(), "fault", "member stalls: accepts the gate's connection and never answers")
		rt.Repeat(map[string]func(*rapid.T){
			"write": s.write,
			"":      s.check,
		})
	})
}

// blackHole is a loopback address that accepts connections and never
// answers on them, until the check ends.
func blackHole(t *rapid.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestAFailureIsReported runs TestPlantedStall in a child go test, as CI
// would meet a real failure, and checks what the failing run leaves a
// developer: it ends by the harness's report, not by go test's timeout (the
// stalled gate is bounded, and so is shrinking); the report names the
// violated invariant and prints a replay command; the failfile, event log
// and timeline it names are there beside each other, the timeline a page with
// a lane per host, the fault, the invariant and the seed that replays it; and
// the replay command, run, fails the same way.
func TestAFailureIsReported(t *testing.T) {
	if os.Getenv(plantEnv) != "" {
		t.Skip("inside the planted run")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "rapid", "TestPlantedStall")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// run is the child go test: TestPlantedStall with the plant, under a
	// go test timeout far above what a bounded failure takes.
	run := func(args ...string) (string, error) {
		args = append([]string{"-test.run", "^TestPlantedStall$", "-test.timeout", "8m",
			"-rapid.checks", "3", "-rapid.steps", "4", "-rapid.shrinktime", "10s"}, args...)
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), plantEnv+"="+plantStall)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("-rapid.seed", "1")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the planted run did not fail (err %v):\n%s", err, out)
	}
	if strings.Contains(out, "panic: test timed out") {
		t.Fatalf("the planted run ended in go test's timeout, not in the harness's report:\n%s", out)
	}
	const invariant = "did not return within"
	for _, want := range []string{"violated invariant", "the join's health gate", invariant} {
		if !strings.Contains(out, want) {
			t.Fatalf("the planted run's output does not say %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`replay: go test ./scenarios -run '\^TestPlantedStall\$' -rapid.failfile='([^']+)'`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the planted run's report prints no replay command with its failfile:\n%s", out)
	}
	failfile := m[1]
	if _, err := os.Stat(failfile); err != nil {
		t.Fatalf("the replay command names failfile %s: %v", failfile, err)
	}
	for _, kind := range []string{"events.json", "timeline.html"} {
		p := filepath.Join(dir, "TestPlantedStall."+kind)
		if !strings.Contains(out, "written: "+p) {
			t.Errorf("the report does not list %s:\n%s", p, out)
		}
	}
	page, err := os.ReadFile(filepath.Join(dir, "TestPlantedStall.timeline.html"))
	if err != nil {
		t.Fatalf("the failing check's timeline: %v", err)
	}
	for _, want := range []string{"<svg", "cp1", "cp2", "cp3", "member stalls", invariant, "-rapid.seed=1 "} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the failing check's timeline does not show %q", want)
		}
	}
	replay, err := run("-rapid.failfile", failfile)
	if !errors.As(err, &exit) || !strings.Contains(replay, invariant) {
		t.Fatalf("the printed replay command did not fail the same way (err %v):\n%s", err, replay)
	}
}
