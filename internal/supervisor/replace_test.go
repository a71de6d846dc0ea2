package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveSup serves s on a control socket of its own and returns its client.
func serveSup(t *testing.T, s *Supervisor) (Client, context.Context) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "supervisor.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	return Client{Path: sock}, serveOn(t, s, ln)
}

// TestAboutSaysWhatTheSupervisorIs: a caller learns the supervisor's
// stratum, bin directory, operator setting, process and state.
func TestAboutSaysWhatTheSupervisorIs(t *testing.T) {
	id := Identity{Version: "v1.2.3", BinDir: "/opt/stratum/bin", Operator: true}
	s, err := New(Config{LogDir: t.TempDir(), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := serveSup(t, s)
	got, err := c.About(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	if got.Identity != id || got.PID != os.Getpid() || got.Exe != exe || got.State != StateStarting || got.Instance == "" {
		t.Fatalf("About = %+v, want %+v of pid %d running %s, starting, an instance named", got, id, os.Getpid(), exe)
	}
	s.SetState(StateSupervising)
	if again, _ := c.About(ctx); again.State != StateSupervising || again.Instance != got.Instance {
		t.Fatalf("About after SetState(%q) = %+v, want that state, instance %s", StateSupervising, again, got.Instance)
	}
	// Another supervisor of the same process (a replacement's) is another
	// instance.
	other, err := New(Config{LogDir: t.TempDir(), Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	if other.About().Instance == got.Instance {
		t.Fatalf("two supervisors share the instance %s", got.Instance)
	}
}

// TestReplacementIsJudgedThenDelivered: a replacement is refused with
// nothing delivered when the supervisor was not set up for one, while it is
// not supervising, when it is malformed, when the owner's check refuses it,
// while one is under way and once the supervisor shuts down; an accepted
// one reaches the owner as sent, and the state says so at once.
func TestReplacementIsJudgedThenDelivered(t *testing.T) {
	plain, err := New(Config{LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pc, ctx := serveSup(t, plain)
	r := Replacement{Path: "/usr/local/bin/stratum", Args: []string{"/usr/local/bin/stratum", "up", "--as-supervisor"}}
	if err := pc.Replace(ctx, r); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a replacement asked of a supervisor without CheckReplacement: %v, want ErrUnsupported", err)
	}

	var checked []Replacement
	s, err := New(Config{LogDir: t.TempDir(), CheckReplacement: func(r Replacement) error {
		checked = append(checked, r)
		if strings.Contains(r.Path, "bad") {
			return errors.New("other users may write it")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := serveSup(t, s)
	if err := c.Replace(ctx, r); err == nil || !strings.Contains(err.Error(), "is starting, not supervising") || !Answered(err) {
		t.Fatalf("a replacement asked of a supervisor still starting: %v, want it refused in its answer", err)
	}
	s.SetState(StateSupervising)
	for _, bad := range []Replacement{{Path: "stratum", Args: r.Args}, {Path: r.Path}} {
		if err := c.Replace(ctx, bad); err == nil || !strings.Contains(err.Error(), "absolute program path") {
			t.Fatalf("Replace(%+v) = %v, want the malformed request refused", bad, err)
		}
	}
	if err := c.Replace(ctx, Replacement{Path: "/tmp/bad/stratum", Args: r.Args}); err == nil || !strings.Contains(err.Error(), "other users may write it") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("a replacement the check refuses: %v, want its reason", err)
	}
	select {
	case got := <-s.ReplaceRequested():
		t.Fatalf("a refused replacement was delivered: %+v", got)
	default:
	}
	if err := c.Replace(ctx, r); err != nil {
		t.Fatal(err)
	}
	if st := s.About().State; st != StateReplacing+r.Path+" in its place" {
		t.Fatalf("the state once a replacement was accepted = %q, want it named", st)
	}
	if err := c.Replace(ctx, r); err == nil || !strings.Contains(err.Error(), "already under way") {
		t.Fatalf("a second replacement while the first is pending: %v, want it refused", err)
	}
	select {
	case got := <-s.ReplaceRequested():
		if got.Path != r.Path || strings.Join(got.Args, " ") != strings.Join(r.Args, " ") {
			t.Fatalf("delivered %+v, want %+v", got, r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an accepted replacement was not delivered")
	}
	if len(checked) != 2 {
		t.Fatalf("the check judged %d replacements, want 2 (the refused one and the accepted one)", len(checked))
	}
	if _, err := (Client{Path: filepath.Join(t.TempDir(), "none.sock")}).About(ctx); Answered(err) || !errors.Is(err, ErrNotRunning) {
		t.Fatalf("About through a socket nobody listens on: %v, want ErrNotRunning and no answer", err)
	}
	s.SetState(StateSupervising)
	s.Shutdown()
	if err := c.Replace(ctx, r); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("a replacement asked during the shutdown: %v, want ErrShuttingDown", err)
	}
}

// TestAnOlderSupervisorIsUnsupported: a supervisor from before an
// operation answers it in words only ("unknown operation"); the client
// matches that to ErrUnsupported, as it does the code a newer one sends.
func TestAnOlderSupervisorIsUnsupported(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 512)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte(`{"error":"unknown operation \"about\""}` + "\n"))
			c.Close()
		}
	}()
	if _, err := (Client{Path: sock}).About(context.Background()); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("About of a supervisor that does not know it: %v, want ErrUnsupported", err)
	}
}
