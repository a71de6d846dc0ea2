package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/syncbuf"
)

func shell(script string) func() (Command, error) {
	return func() (Command, error) { return Command{Path: "/bin/sh", Args: []string{"-c", script}}, nil }
}

func newSup(t *testing.T, specs ...Spec) (*Supervisor, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(Config{Services: specs, LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, dir
}

// deafService is a shell service that ignores SIGTERM, touching trapped
// once its trap is set.
func deafService(trapped string) func() (Command, error) {
	return shell("trap '' TERM; touch " + trapped + "; while :; do sleep 0.1; done")
}

// waitTrapped waits until a deafService has set its trap.
func waitTrapped(t *testing.T, trapped string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(trapped); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the service never set its SIGTERM trap")
		}
	}
}

// serveOn serves s's control socket on ln until the test ends, and returns
// the context it serves on.
func serveOn(t *testing.T, s *Supervisor, ln net.Listener) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ctx
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// waitGone waits until pid no longer exists (reaped or never a zombie of ours).
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(data), ") Z ") {
			return // a zombie awaiting its parent's wait is dead
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pidOf(t *testing.T, s *Supervisor, name string) int {
	t.Helper()
	st, err := s.ServiceStatus(context.Background(), name)
	if err != nil || !st.Running {
		t.Fatalf("status of %s = %+v, %v; want running", name, st, err)
	}
	var pid int
	if _, err := fmt.Sscanf(st.Detail, "running (pid %d)", &pid); err != nil {
		t.Fatalf("status detail %q names no pid", st.Detail)
	}
	return pid
}

func TestStartStopAndTheWholeGroupGoes(t *testing.T) {
	dir := t.TempDir()
	grandchild := filepath.Join(dir, "grandchild.pid")
	s, logDir := newSup(t, Spec{Name: "svc", Command: shell("echo hello; sleep 1000 & echo $! > " + grandchild + "; wait"), StopTimeout: 2 * time.Second})
	ctx := context.Background()
	if err := s.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if err := s.StartService(ctx, "svc"); err != nil {
		t.Fatalf("second start of a running service: %v", err)
	}
	pid := pidOf(t, s, "svc")
	var gpid int
	for deadline := time.Now().Add(5 * time.Second); gpid == 0; {
		data, _ := os.ReadFile(grandchild)
		gpid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		if time.Now().After(deadline) {
			t.Fatal("the service never started its grandchild")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.StopService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, "the service")
	waitGone(t, gpid, "the service's own child")
	if st, _ := s.ServiceStatus(ctx, "svc"); st.Running || st.Detail != "stopped" {
		t.Fatalf("status after stop = %+v", st)
	}
	log, _ := os.ReadFile(filepath.Join(logDir, "svc.log"))
	if !strings.Contains(string(log), "hello") {
		t.Fatalf("log holds %q, want the service's output", log)
	}
}

func TestAnExitedServiceIsRestarted(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	s, _ := newSup(t, Spec{Name: "flaky", Command: shell("echo run >> " + count + "; sleep 0.1; exit 3")})
	if err := s.StartService(context.Background(), "flaky"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(count)
		if strings.Count(string(data), "run") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ran %d times in 10 s, want restarts with backoff", strings.Count(string(data), "run"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, _ := s.ServiceStatus(context.Background(), "flaky")
	if !st.Running && !strings.Contains(st.Detail, "exit status 3") {
		t.Fatalf("status of a restarting service = %+v, want the exit named", st)
	}
}

func TestStartFailuresAreReported(t *testing.T) {
	s, _ := newSup(t,
		Spec{Name: "missing", Command: func() (Command, error) { return Command{Path: "/nonexistent/etcd"}, nil }},
		Spec{Name: "unready", Command: shell("seq 1 1000; echo cannot bind 2379 >&2; sleep 1000"), Ready: func(context.Context) error {
			time.Sleep(300 * time.Millisecond)
			return errors.New("no answer on :2379")
		}},
		Spec{Name: "blocked", Command: shell("true"), Check: func(context.Context) error { return errors.New("port 6443 is in use") }},
	)
	ctx := context.Background()
	if err := s.StartService(ctx, "missing"); err == nil || !strings.Contains(err.Error(), "/nonexistent/etcd") {
		t.Fatalf("start of a missing binary = %v, want its path named", err)
	}
	if st, _ := s.ServiceStatus(ctx, "missing"); st.Running {
		t.Fatal("a service that could not launch reports running")
	}
	err := s.StartService(ctx, "unready")
	if err == nil || !strings.Contains(err.Error(), "no answer on :2379") || !strings.Contains(err.Error(), "999\n  1000\n  cannot bind 2379") {
		t.Fatalf("start of an unready service = %v, want the reason and the log's tail", err)
	}
	err = s.CheckServices(ctx, []string{"blocked", "nope"})
	if !errors.Is(err, host.ErrServicesUnavailable) || !strings.Contains(err.Error(), "port 6443 is in use") || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("check = %v", err)
	}
	if err := s.StartService(ctx, "nope"); !errors.Is(err, host.ErrUnknownService) {
		t.Fatalf("start of an unknown service = %v, want ErrUnknownService", err)
	}
}

func TestInProcessServiceRestartsAndStops(t *testing.T) {
	runs := make(chan struct{}, 10)
	s, _ := newSup(t, Spec{Name: "task", Run: func(ctx context.Context) error {
		runs <- struct{}{}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
			return errors.New("lost the lease")
		}
	}})
	startThenRestarted(t, s, "task", runs, "returned")
	s.Shutdown()
	if st, _ := s.ServiceStatus(context.Background(), "task"); st.Running {
		t.Fatalf("status after shutdown = %+v", st)
	}
}

// TestARestartIsANewSince: a running service's status says when its run
// began, and a restart is a new one, which the release loop reads its etcd
// member's ID again for (a restore or a rejoin restarts etcd under a new
// member); a stopped service has none.
func TestARestartIsANewSince(t *testing.T) {
	for _, spec := range []Spec{
		{Name: "task", Run: func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}},
		{Name: "process", Command: shell("exec sleep 1000"), StopTimeout: 2 * time.Second},
	} {
		t.Run(spec.Name, func(t *testing.T) {
			s, _ := newSup(t, spec)
			defer s.Shutdown()
			ctx, name := context.Background(), spec.Name
			if err := s.StartService(ctx, name); err != nil {
				t.Fatal(err)
			}
			first, _ := s.ServiceStatus(ctx, name)
			for deadline := time.Now().Add(5 * time.Second); !first.Running && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				first, _ = s.ServiceStatus(ctx, name)
			}
			if !first.Running || first.Since.IsZero() {
				t.Fatalf("status of a running service = %+v, want it running since its start", first)
			}
			if again, _ := s.ServiceStatus(ctx, name); !again.Since.Equal(first.Since) {
				t.Fatalf("Since moved without a restart: %s, then %s", first.Since, again.Since)
			}
			if err := s.RestartService(ctx, name); err != nil {
				t.Fatal(err)
			}
			st, _ := s.ServiceStatus(ctx, name)
			for deadline := time.Now().Add(5 * time.Second); !st.Running && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				st, _ = s.ServiceStatus(ctx, name)
			}
			if !st.Running || !st.Since.After(first.Since) {
				t.Fatalf("status after a restart = %+v, want a run since after %s", st, first.Since)
			}
			if err := s.StopService(ctx, name); err != nil {
				t.Fatal(err)
			}
			if st, _ := s.ServiceStatus(ctx, name); st.Running || !st.Since.IsZero() {
				t.Fatalf("status of a stopped service = %+v, want no Since", st)
			}
		})
	}
}

// startThenRestarted starts the in-process service name, which sends on
// runs at each run, and fails t unless it runs a second time within 5 s,
// after its first run ended as how says.
func startThenRestarted(t *testing.T, s *Supervisor, name string, runs <-chan struct{}, how string) {
	t.Helper()
	if err := s.StartService(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	<-runs
	select {
	case <-runs:
	case <-time.After(5 * time.Second):
		t.Fatalf("an in-process service that %s was not restarted", how)
	}
}

// TestInProcessServiceThatPanicsIsRestarted: a panic in an in-process
// service (the VIP candidate, the operator) is its exit with an error naming
// the panic, and the supervisor restarts it; it ended stratum, and every
// child with it by their parent-death signal.
func TestInProcessServiceThatPanicsIsRestarted(t *testing.T) {
	runs := make(chan struct{}, 10)
	var n atomic.Int32
	s, _ := newSup(t, Spec{Name: "task", Run: func(ctx context.Context) error {
		runs <- struct{}{}
		if n.Add(1) == 1 {
			var m map[string]int
			m["nil map"] = 1 // panics
		}
		<-ctx.Done()
		return nil
	}})
	startThenRestarted(t, s, "task", runs, "panicked")
	if st, err := s.ServiceStatus(context.Background(), "task"); err != nil || !st.Running {
		t.Fatalf("status after the restart = %+v, %v; want running", st, err)
	}
	s.Shutdown()
}

func TestControlSocket(t *testing.T) {
	s, _ := newSup(t, Spec{Name: "svc", Command: shell("sleep 1000")})
	sock := filepath.Join(t.TempDir(), "run", "supervisor.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := serveOn(t, s, ln)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if _, err := Listen(sock); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("a second supervisor listening on a live socket: %v, want ErrAlreadyRunning", err)
	}
	c := Client{Path: sock}
	if !c.Running() {
		t.Fatal("client does not see the running supervisor")
	}
	// A call whose context has ended says nothing about the supervisor: it
	// must not read as "none runs here", which a stop takes for "stopped".
	done, stop := context.WithCancel(ctx)
	stop()
	if err := c.StopService(done, "svc"); err == nil || errors.Is(err, ErrNotRunning) || errors.Is(err, host.ErrNoServiceManager) {
		t.Fatalf("a stop with its context ended: %v, want an error that is not ErrNotRunning", err)
	}
	if _, err := (Client{Path: filepath.Join(t.TempDir(), "none.sock")}).ServiceStatus(ctx, "svc"); !errors.Is(err, ErrNotRunning) || !errors.Is(err, host.ErrNoServiceManager) {
		t.Fatalf("a call through a socket nobody listens on: %v, want ErrNotRunning", err)
	}
	if err := c.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	st, err := c.ServiceStatus(ctx, "svc")
	if err != nil || !st.Running {
		t.Fatalf("status through the socket = %+v, %v", st, err)
	}
	if err := c.RestartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if err := c.StopService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.ServiceStatus(ctx, "svc"); st.Running {
		t.Fatal("still running after a stop through the socket")
	}
	if err := c.StartService(ctx, "etcdd"); !errors.Is(err, host.ErrUnknownService) {
		t.Fatalf("unknown service through the socket = %v", err)
	}
	// An exit is refused while a service runs, naming it; once nothing
	// runs, it ends the supervisor's foreground.
	if err := c.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if err := c.Exit(ctx); !errors.Is(err, ErrServicesRunning) || !strings.Contains(err.Error(), "svc") {
		t.Fatalf("exit while svc runs = %v, want ErrServicesRunning naming svc", err)
	}
	select {
	case <-s.ExitRequested():
		t.Fatal("a refused exit ended the supervisor")
	default:
	}
	if st, _ := c.ServiceStatus(ctx, "svc"); !st.Running {
		t.Fatal("a refused exit stopped svc")
	}
	if err := c.RestartService(ctx, "svc"); err != nil {
		t.Fatalf("a restart after a refused exit = %v: a refused exit must not keep refusing starts", err)
	}
	if err := c.StopService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	if err := c.Exit(ctx); err != nil {
		t.Fatalf("exit with nothing running = %v", err)
	}
	select {
	case <-s.ExitRequested():
	case <-time.After(5 * time.Second):
		t.Fatal("an exit with nothing running did not end the supervisor")
	}
	// On its way out, the supervisor starts nothing: a start that came
	// after the exit's check would run a service the ending supervisor
	// then stops.
	if err := c.StartService(ctx, "svc"); !errors.Is(err, ErrShuttingDown) && !strings.Contains(fmt.Sprint(err), ErrShuttingDown.Error()) {
		t.Fatalf("a start after the exit = %v, want it refused (ErrShuttingDown)", err)
	}
	gone := Client{Path: filepath.Join(t.TempDir(), "none.sock")}
	if err := gone.StopService(ctx, "svc"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("call with no supervisor = %v, want ErrNotRunning", err)
	}
}

// TestChildrenDieWithAKilledSupervisor runs a supervisor in a child process
// (this test binary again), SIGKILLs it, and checks its service went too.
func TestChildrenDieWithAKilledSupervisor(t *testing.T) {
	if os.Getenv("STRATUM_SUPERVISOR_HELPER") == "1" {
		s, err := New(Config{Services: []Spec{{Name: "svc", Command: shell("sleep 1000")}}})
		if err != nil {
			panic(err)
		}
		if err := s.StartService(context.Background(), "svc"); err != nil {
			panic(err)
		}
		st, _ := s.ServiceStatus(context.Background(), "svc")
		fmt.Println(st.Detail)
		select {}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithAKilledSupervisor$")
	cmd.Env = append(os.Environ(), "STRATUM_SUPERVISOR_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper said nothing: %v", err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "running (pid %d)", &pid); err != nil {
		t.Fatalf("helper said %q", line)
	}
	if !alive(pid) {
		t.Fatal("the service is not running before the kill")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitGone(t, pid, "the service of a killed supervisor")
}

// TestAStopInItsGraceIsStoppingNotStopped: a service that ignores SIGTERM
// is "stopping" (running, its pid named) until its grace ends; a start
// meanwhile waits for that exit instead of launching a second instance
// beside it; an exit request is refused while it lives.
func TestAStopInItsGraceIsStoppingNotStopped(t *testing.T) {
	trapped := filepath.Join(t.TempDir(), "trapped")
	s, _ := newSup(t, Spec{Name: "svc", Command: deafService(trapped), StopTimeout: 1500 * time.Millisecond})
	ctx := context.Background()
	if err := s.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	old := pidOf(t, s, "svc")
	waitTrapped(t, trapped)
	stopped := make(chan struct{})
	go func() { s.StopService(ctx, "svc"); close(stopped) }()
	for deadline := time.Now().Add(time.Second); ; {
		st, _ := s.ServiceStatus(ctx, "svc")
		if strings.HasPrefix(st.Detail, "stopping") {
			if !st.Running || !strings.Contains(st.Detail, strconv.Itoa(old)) {
				t.Fatalf("status in the stop's grace = %+v, want running, stopping, pid %d", st, old)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status during the stop = %+v, want stopping", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.requestExit(); !errors.Is(err, ErrServicesRunning) {
		t.Fatalf("exit request while the service is stopping = %v, want ErrServicesRunning", err)
	}
	if err := s.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("a start during the stop's grace returned before the stopped instance exited")
	}
	waitGone(t, old, "the stopped instance")
	if pid := pidOf(t, s, "svc"); pid == old || !alive(pid) {
		t.Fatalf("after the stop and the start: pid %d (old %d), want one new instance", pid, old)
	}
}

// TestListenIsOnePerNode: the control socket's lock decides which
// supervisor runs, not the socket file: with the file gone (a second
// supervisor racing the first could have replaced it) Listen is still
// refused while the first listens; a closed listener unlinks its socket and
// frees the lock; a dead supervisor's leftover file is replaced.
func TestListenIsOnePerNode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "supervisor.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("Listen while another supervisor holds the lock, its socket file gone: %v, want ErrAlreadyRunning", err)
	}
	ln.Close()
	if err := os.WriteFile(sock, []byte("left by a supervisor that died"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err = Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a dead supervisor's leftover: %v", err)
	}
	ln.Close()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a closed listener left its socket: %v", err)
	}
	// An older stratum's supervisor takes no lock: answering on the socket
	// is enough to be refused, and its socket is left in place.
	old, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	go func() {
		for {
			c, err := old.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if _, err := Listen(sock); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("Listen beside a lockless supervisor answering on the socket: %v, want ErrAlreadyRunning", err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the refused Listen removed the running supervisor's socket: %v", err)
	}
}

// TestShutdownRefusesStarts: once Shutdown began, a start (a renewal's
// restart through the socket) is refused instead of starting what is being
// stopped.
func TestShutdownRefusesStarts(t *testing.T) {
	s, _ := newSup(t, Spec{Name: "svc", Command: shell("sleep 1000")})
	ctx := context.Background()
	if err := s.StartService(ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	if err := s.StartService(ctx, "svc"); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("start after Shutdown = %v, want ErrShuttingDown", err)
	}
	if err := s.RestartService(ctx, "svc"); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("restart after Shutdown = %v, want ErrShuttingDown", err)
	}
	if st, _ := s.ServiceStatus(ctx, "svc"); st.Running {
		t.Fatalf("status after Shutdown and the refused starts = %+v", st)
	}
}

// TestServiceLogsRotate: a child's output goes through the supervisor into a
// log that rotates by size: the files beside it are at most LogKeep, they
// read (oldest first) as the end of the output with no line lost or split
// between them, and the supervisor's exit line comes after the child's last
// output.
func TestServiceLogsRotate(t *testing.T) {
	logDir := t.TempDir()
	s, err := New(Config{LogDir: logDir, LogMaxBytes: 1000, LogKeep: 2, Services: []Spec{
		{Name: "chatty", Command: shell("seq 1 2000; sleep 1000"), StopTimeout: 2 * time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx := context.Background()
	if err := s.StartService(ctx, "chatty"); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(logDir, "chatty.log")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if data, _ := os.ReadFile(current); strings.HasSuffix(string(data), "\n2000\n") {
			break
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(current)
			t.Fatalf("the child's last line never reached %s; it holds %d bytes", current, len(data))
		}
	}
	if err := s.StopService(ctx, "chatty"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(logDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "chatty.log chatty.log.1 chatty.log.2" {
		t.Fatalf("the log directory holds %v, want chatty.log and two old files", names)
	}
	var all string
	for _, n := range []string{"chatty.log.2", "chatty.log.1", "chatty.log"} {
		data, err := os.ReadFile(filepath.Join(logDir, n))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 2000 {
			t.Fatalf("%s holds %d bytes with a limit of 1000", n, len(data))
		}
		all += string(data)
	}
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "--- stratum: chatty exited at ") {
		t.Fatalf("the log's last line is %q, want the supervisor's exit line", last)
	}
	lines = lines[:len(lines)-1]
	first, err := strconv.Atoi(lines[0])
	if err != nil {
		t.Fatalf("the oldest kept file starts with %q, not a whole line of the output", lines[0])
	}
	for i, l := range lines {
		if l != strconv.Itoa(first+i) {
			t.Fatalf("line %d of the kept logs is %q, want %d: a line lost or split", i, l, first+i)
		}
	}
	if first+len(lines)-1 != 2000 || first == 1 {
		t.Fatalf("the kept logs hold lines %d to %d, want the end of 1 to 2000 with the oldest dropped", first, first+len(lines)-1)
	}
}

// TestReadTailReadsOnlyTheEnd: a failed start quotes its log's end without
// reading a log of tens of MiB whole.
func TestReadTailReadsOnlyTheEnd(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etcd.log")
	var all strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	if err := os.WriteFile(p, []byte(all.String()), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := readTail(p, 1000)
	if err != nil || string(got) != all.String()[all.Len()-1000:] {
		t.Fatalf("readTail(1000) = %d bytes, %v; want the file's last 1000", len(got), err)
	}
	got, err = readTail(p, 1<<30)
	if err != nil || string(got) != all.String() {
		t.Fatalf("readTail of more than the file = %d bytes, %v; want the whole %d", len(got), err, all.Len())
	}
}

// TestAFailedStartRightAfterARotationQuotesTheLinesBefore: when the log
// was just rotated, the quote reaches into the newest old file.
func TestAFailedStartRightAfterARotationQuotesTheLinesBefore(t *testing.T) {
	logDir := t.TempDir()
	// 20 lines of 60 bytes past a limit of 1000: the current log holds
	// the last few and the failure, fewer than the lines quoted.
	s, err := New(Config{LogDir: logDir, LogMaxBytes: 1000, LogKeep: 1, Services: []Spec{
		{Name: "unready", Command: shell(`for i in $(seq 10 29); do echo "line $i $(printf '%051d' 0)"; done; echo cannot bind 2379 >&2; sleep 1000`), Ready: func(context.Context) error {
			time.Sleep(300 * time.Millisecond)
			return errors.New("no answer on :2379")
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	err = s.StartService(context.Background(), "unready")
	current, _ := os.ReadFile(filepath.Join(logDir, "unready.log"))
	if n := strings.Count(string(current), "\n"); n >= logHintLines {
		t.Fatalf("the current log holds %d lines, so the test shows nothing:\n%s", n, current)
	}
	if err == nil || !strings.Contains(err.Error(), "  line 23 ") || !strings.Contains(err.Error(), "  line 29 ") || !strings.HasSuffix(err.Error(), "  cannot bind 2379") {
		t.Fatalf("start of an unready service = %v, want the log's last %d lines, across its rotation", err, logHintLines)
	}
}

// TestAnExitIsSeenThoughADescendantHoldsTheOutput: a child that leaves a
// process in a session of its own (out of reach of the group kill) holding
// its output pipe and writing for ever still has its exit seen, within the
// drain's bound, and a stop returns.
func TestAnExitIsSeenThoughADescendantHoldsTheOutput(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "leavers")
	t.Cleanup(func() {
		data, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	s, _ := newSup(t, Spec{Name: "leaver", StopTimeout: time.Second,
		Command: shell("setsid sh -c 'echo $$ >> " + pids + "; while :; do echo tick; sleep 0.5; done' & sleep 0.2; exit 3")})
	ctx := context.Background()
	if err := s.StartService(ctx, "leaver"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(drainAtMostAfterExit + 10*time.Second)
	for {
		st, _ := s.ServiceStatus(ctx, "leaver")
		if strings.Contains(st.Detail, "exit status 3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's exit was never seen while a descendant held its output: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.StopService(ctx, "leaver") }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(drainAtMostAfterExit + 10*time.Second):
		t.Fatal("the stop did not return while a descendant held the output")
	}
}

// TestForceEndsAShutdownAtOnce: a shutdown names each service as it stops
// it, newest first, and waits out a SIGTERM grace (here an hour, a service
// that ignores SIGTERM) and an in-process service that does not return;
// Force (the operator's second signal) ends both waits: the process group
// is killed and the shutdown returns.
func TestForceEndsAShutdownAtOnce(t *testing.T) {
	trapped := filepath.Join(t.TempDir(), "trapped")
	stuck := make(chan struct{})
	defer close(stuck)
	var stopping []string
	var mu sync.Mutex
	s, err := New(Config{LogDir: t.TempDir(), OnShutdownStop: func(name string) {
		mu.Lock()
		defer mu.Unlock()
		stopping = append(stopping, name)
	}, Services: []Spec{
		{Name: "deaf", Command: deafService(trapped), StopTimeout: time.Hour},
		{Name: "stuck", Run: func(context.Context) error { <-stuck; return nil }},
		{Name: "idle", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"deaf", "stuck"} {
		if err := s.StartService(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	pid := pidOf(t, s, "deaf")
	waitTrapped(t, trapped)
	done := make(chan struct{})
	go func() { s.Shutdown(); close(done) }()
	// The stuck in-process service is stopped first (newest first) and
	// holds the shutdown; then the deaf process would hold it for an hour.
	select {
	case <-done:
		t.Fatal("the shutdown returned while an in-process service had not")
	case <-time.After(300 * time.Millisecond):
	}
	s.Force()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the shutdown still waits after Force")
	}
	waitGone(t, pid, "the service that ignores SIGTERM, after Force")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(stopping, " "); got != "stuck deaf" {
		t.Errorf("the shutdown named %q as it stopped them, want \"stuck deaf\" (newest first; the idle service never ran)", got)
	}
	if err := s.StartService(ctx, "idle"); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("a start after the shutdown = %v, want ErrShuttingDown", err)
	}
}

// TestAStartThatKeepsCrashingIsNotReadyAtOnce: a service that exits at every
// launch ends its start's readiness wait at its first exit past
// crashLoopAfter (with exitsBeforeNotReady or more behind it), naming the
// last exit and quoting its log, instead of restarting silently until the
// wait's bound (two minutes for etcd and the apiserver). It stays wanted:
// the keeper goes on restarting it.
func TestAStartThatKeepsCrashingIsNotReadyAtOnce(t *testing.T) {
	s, _ := newSup(t, Spec{
		Name:    "crasher",
		Command: shell("echo 'flag provided but not defined: -bogus'; exit 2"),
		Ready:   func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.StartService(ctx, "crasher") }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the start of a service that exits at every launch still waits")
	}
	if err == nil || !strings.Contains(err.Error(), "times while starting") ||
		!strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "flag provided but not defined") {
		t.Fatalf("start of a service that exits at every launch = %v, want its exits, the last exit status and its log's end", err)
	}
	if st, _ := s.ServiceStatus(ctx, "crasher"); !strings.HasPrefix(st.Detail, "restarting after") && !strings.HasPrefix(st.Detail, "running") {
		t.Errorf("status after the failed start = %+v, want it still wanted (restarting)", st)
	}
}

// failingAccepts is a listener whose first failures accepts fail as a
// process out of file descriptors does.
type failingAccepts struct {
	net.Listener
	failures atomic.Int32
}

func (l *failingAccepts) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, syscall.EMFILE
	}
	return l.Listener.Accept()
}

// TestControlSocketOutlivesFailedAccepts: accepts that fail (EMFILE) are
// tried again; the socket once stopped answering at the first, for the
// rest of the supervisor's life.
func TestControlSocketOutlivesFailedAccepts(t *testing.T) {
	s, _ := newSup(t, Spec{Name: "svc", Command: shell("sleep 1000")})
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	inner, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ln := &failingAccepts{Listener: inner}
	ln.failures.Store(5)
	cctx, ccancel := context.WithTimeout(serveOn(t, s, ln), time.Minute)
	defer ccancel()
	if st, err := (Client{Path: sock}).ServiceStatus(cctx, "svc"); err != nil || st.Detail != "stopped" {
		t.Fatalf("status through a socket whose accepts failed five times = %+v, %v", st, err)
	}
}

// TestAHungUpCallerEndsItsRequestsWait: a command stopped while its start
// waits for the service's readiness hangs up; the supervisor's wait for it
// ends too (the service stays wanted), instead of waiting its bound for
// nobody.
func TestAHungUpCallerEndsItsRequestsWait(t *testing.T) {
	waitEnded := make(chan error, 1)
	s, _ := newSup(t, Spec{Name: "svc", Command: shell("sleep 1000"), Ready: func(ctx context.Context) error {
		<-ctx.Done()
		waitEnded <- ctx.Err()
		return ctx.Err()
	}})
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := serveOn(t, s, ln)
	cctx, hangUp := context.WithTimeout(ctx, 300*time.Millisecond)
	defer hangUp()
	if err := (Client{Path: sock}).StartService(cctx, "svc"); err == nil {
		t.Fatal("a start whose readiness never comes returned nil")
	}
	select {
	case err := <-waitEnded:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the readiness wait ended with %v, want its caller's hang-up (canceled)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor still waits on the readiness of a start whose caller hung up")
	}
}

// TestAStartThatExitsAFewTimesThenServesStarts: a service that exits three
// times quickly on its way up (within crashLoopAfter) and then serves is
// started, not reported as crash-looping.
func TestAStartThatExitsAFewTimesThenServesStarts(t *testing.T) {
	count := filepath.Join(t.TempDir(), "launches")
	script := fmt.Sprintf("n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; [ $n -le 3 ] && exit 1; exec sleep 1000", count)
	s, _ := newSup(t, Spec{
		Name:    "slowstarter",
		Command: shell(script),
		Ready: func(ctx context.Context) error {
			for {
				if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) == "4" {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.StartService(ctx, "slowstarter"); err != nil {
		t.Fatalf("start of a service that exits three times, then serves: %v", err)
	}
}

// TestChildEnvLeavesOutTheNotifySocket: a child never sees the service
// manager's notify socket, which etcd would notify itself.
func TestChildEnvLeavesOutTheNotifySocket(t *testing.T) {
	got := childEnv([]string{"PATH=/usr/bin", "NOTIFY_SOCKET=/run/systemd/notify", "NOTIFY_SOCKETS=kept", "HOME=/root"})
	if want := []string{"PATH=/usr/bin", "NOTIFY_SOCKETS=kept", "HOME=/root"}; !slices.Equal(got, want) {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}

// TestAServiceRunsWithoutItsLog: a log that cannot be opened (here its
// directory's parent is a file; on a machine, /var/log read-only after an
// I/O error) does not keep the service from running: its output is lost,
// not etcd or the apiserver.
func TestAServiceRunsWithoutItsLog(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "not-a-directory")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Services: []Spec{{Name: "etcd", Command: shell("while :; do echo serving; sleep 0.1; done")}}, LogDir: filepath.Join(parent, "stratum")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	if err := s.StartService(context.Background(), "etcd"); err != nil {
		t.Fatalf("start with a log that cannot be opened: %v, want it running without its log", err)
	}
	pidOf(t, s, "etcd")
}

// TestAShutdownDuringARenderStartsNothing: a shutdown that begins while a
// service's command is rendered (etcd's version probe takes up to 20 s)
// starts no process: one started then would be stopped again with its
// whole SIGTERM grace, past the unit's stop timeout. The supervisor's
// "starting" line in the service's log, written just before a start, is
// never written.
func TestAShutdownDuringARenderStartsNothing(t *testing.T) {
	rendering, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s, logs := newSup(t, Spec{Name: "etcd", Command: func() (Command, error) {
		once.Do(func() { close(rendering) })
		<-release
		return shell("sleep 1000")()
	}})
	ctx := context.Background()
	go func() { _ = s.StartService(ctx, "etcd") }()
	<-rendering
	shut := make(chan struct{})
	go func() { s.Shutdown(); close(shut) }()
	// The unit's stop has taken its keeper, whose cancel follows at once.
	u, err := s.unit("etcd")
	if err != nil {
		t.Fatal(err)
	}
	for {
		u.mu.Lock()
		taken := u.stopping != nil
		u.mu.Unlock()
		if taken {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	select {
	case <-shut:
	case <-time.After(30 * time.Second):
		t.Fatal("the shutdown did not end")
	}
	if data, _ := os.ReadFile(filepath.Join(logs, "etcd.log")); strings.Contains(string(data), "starting etcd") {
		t.Fatalf("a shutdown begun during the render started the process: its log says %q", data)
	}
}

// TestAnInProcessServiceThatKeepsFailingLeavesNothingBehind: an in-process
// service that returns by itself the same way again and again (a VIP
// refused, a lease lost, for days) is restarted on a fresh context each
// time, the old one ended (it stayed a child of the keeper's for as long as
// the service was wanted, one per exit), and its exit is said at Warn
// once, not at every restart; a different failure is said again.
func TestAnInProcessServiceThatKeepsFailingLeavesNothingBehind(t *testing.T) {
	var logs syncbuf.Buffer
	ctxs := make(chan context.Context, 10)
	var n atomic.Int32
	s, err := New(Config{LogDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Services: []Spec{{Name: "task", Run: func(ctx context.Context) error {
			ctxs <- ctx
			if n.Add(1) < 4 {
				return errors.New("the VIP may not be held")
			}
			if n.Load() == 4 {
				return errors.New("the admin kubeconfig is unreadable")
			}
			<-ctx.Done()
			return nil
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	if err := s.StartService(context.Background(), "task"); err != nil {
		t.Fatal(err)
	}
	var runs []context.Context
	for len(runs) < 5 {
		select {
		case ctx := <-ctxs:
			runs = append(runs, ctx)
		case <-time.After(20 * time.Second):
			t.Fatalf("the service ran %d times, want 5 (restarted after each exit)", len(runs))
		}
	}
	for i, ctx := range runs[:4] {
		if ctx.Err() == nil {
			t.Errorf("the context of run %d, which returned, is still live", i+1)
		}
	}
	if runs[4].Err() != nil {
		t.Error("the running instance's context ended")
	}
	if got := strings.Count(logs.String(), "the VIP may not be held"); got != 1 {
		t.Errorf("the same exit, three times, was said %d times at Warn, want once:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), "the admin kubeconfig is unreadable") {
		t.Errorf("a different exit was not said:\n%s", logs.String())
	}
}

// TestASilentOrEndlessCallerIsLetGo: a caller on the control socket that
// sends nothing is answered a malformed request once requestWithin passes,
// and its connection closed, and one that sends more than maxRequest bytes
// without a request's end is answered so at once: neither holds a goroutine
// and a descriptor (or memory) of a supervisor that runs for months.
func TestASilentOrEndlessCallerIsLetGo(t *testing.T) {
	s, _ := newSup(t)
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, s, ln)
	for _, c := range []struct {
		name string
		send []byte
	}{
		{"silent", nil},
		{"endless", []byte(`{"op":"` + strings.Repeat("a", maxRequest+1))},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if len(c.send) > 0 {
				go func() { _, _ = conn.Write(c.send) }()
			}
			_ = conn.SetReadDeadline(time.Now().Add(requestWithin + 10*time.Second))
			// The endless caller's unread bytes make the close a reset,
			// after the answer.
			answer, err := io.ReadAll(conn)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) || !strings.Contains(string(answer), "malformed request") {
				t.Fatalf("the %s caller got %q, %v; want a malformed request answered and the connection closed", c.name, answer, err)
			}
		})
	}
}
