package cli

import (
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestStartsHoldTheNode: a first `stratum up` and a join (the printed
// command) hold the node's locks through the start of their control plane,
// as every later `stratum up` does. While either start is paused, a
// `stratum certs renew` (and on the joined node a `stratum repoint`, whose
// rewrite of bootstrap.conf would race the start's strip of the join token)
// is refused, exit 3, naming the start; once the start is done the same
// command runs, and the join token is gone from bootstrap.conf.
func TestStartsHoldTheNode(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 2, APIServers: true, VIP: true})
	cp1, cp2 := c.Hosts()[0], c.Hosts()[1]
	vip := c.VIPAddress().String()

	// paused runs args on h up to checkpoint cp and returns, the command
	// held there, what lets it go on and then reports its exit.
	paused := func(h *sim.Host, cp string, args ...string) func() (int, string, string) {
		t.Helper()
		pause := c.PauseAt(h.Name(), cp)
		type result struct {
			code        int
			out, errOut string
		}
		done := make(chan result, 1)
		go func() {
			code, out, errOut := runCLI(t, on(h), args...)
			done <- result{code, out, errOut}
		}()
		select {
		case <-pause.Reached():
		case r := <-done:
			t.Fatalf("stratum %s on %s returned (exit %d) before checkpoint %s\n%s\n%s", strings.Join(args, " "), h.Name(), r.code, cp, r.out, r.errOut)
		case <-time.After(3 * time.Minute):
			t.Fatalf("stratum %s on %s never reached checkpoint %s", strings.Join(args, " "), h.Name(), cp)
		}
		return func() (int, string, string) {
			pause.Release()
			select {
			case r := <-done:
				return r.code, r.out, r.errOut
			case <-time.After(3 * time.Minute):
				t.Fatalf("stratum %s on %s did not return within 3m of its release at %s", strings.Join(args, " "), h.Name(), cp)
				return 0, "", ""
			}
		}
	}
	refusedNaming := func(h *sim.Host, holder string, args ...string) {
		t.Helper()
		code, out, errOut := runCLI(t, on(h), args...)
		if code != ExitRefused || !strings.Contains(errOut, holder) || !strings.Contains(errOut, "nothing was changed") {
			t.Fatalf("stratum %s on %s while %s runs: exit %d, want %d (refused) naming it and that nothing was changed\n%s\n%s", strings.Join(args, " "), h.Name(), holder, code, ExitRefused, out, errOut)
		}
	}

	// The first bring-up, paused right after its etcd started.
	finish := paused(cp1, ha.CheckpointStartAfterEtcd, "up", "--vip", vip)
	refusedNaming(cp1, "stratum up (bootstrap)", "certs", "renew")
	if code, out, errOut := finish(); code != ExitOK {
		t.Fatalf("up on cp1: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, on(cp1), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	join := strings.Fields(printedCommandLines(out)[0])[1:]

	// The join, paused in its start after the promotion: the join token
	// is still in bootstrap.conf, for the start's next step to take out.
	finish = paused(cp2, ha.CheckpointStartAfterPromote, join...)
	if !holdsToken(t, cp2) {
		t.Fatal("bootstrap.conf on cp2 holds no token before the start's confirmation: the check below would prove nothing")
	}
	holder := "stratum server (control-plane join)"
	refusedNaming(cp2, holder, "repoint", "--vip", vip)
	refusedNaming(cp2, holder, "certs", "renew")
	if code, out, errOut := finish(); code != ExitOK {
		t.Fatalf("the join on cp2: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, on(cp2), "repoint", "--vip", vip); code != ExitOK {
		t.Fatalf("stratum repoint on cp2 once its join was done: exit %d\n%s\n%s", code, out, errOut)
	}
	if holdsToken(t, cp2) {
		t.Fatal("bootstrap.conf on cp2 holds the join token after the join and a repoint")
	}
}

// holdsToken reports whether h's bootstrap.conf holds a credential (the
// join's bootstrap token).
func holdsToken(t *testing.T, h *sim.Host) bool {
	t.Helper()
	b, err := h.Files().ReadFile(version.Kubeconfig("bootstrap"))
	if err != nil {
		t.Fatalf("%s's bootstrap.conf: %v", h.Name(), err)
	}
	_, held, err := kubeconfig.WithoutCredentials(b)
	if err != nil {
		t.Fatalf("%s's bootstrap.conf: %v", h.Name(), err)
	}
	return held
}
