package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestResetTakesAControlPlaneOut is an operator retiring a control plane
// with `stratum reset`, and joining the machine again with the join command
// as printed, judged from outside (an etcd client as etcdctl, client-go
// trusting only the cluster CA):
//   - the reset is refused, with nothing changed, while another voter is
//     down (the remaining voters would be under quorum);
//   - cp1's reset (the VIP holder since its up), once the cluster is whole: its dry run names
//     every step; the reset leaves two started voters, the VIP serving from
//     another control plane, `etcd health` healthy, and nothing on the
//     machine but the lock files; a second reset finds nothing to do;
//   - the cluster publishes its etcd members beside the grants (read as
//     kubectl reads the Secret): all three once they have started, the two
//     left after the reset;
//   - the first join command, whose grant names only cp1's etcd (minted by
//     cp1 alone), makes the machine a started voter again through the
//     members the cluster published, serving with the cluster CA.
func TestResetTakesAControlPlaneOut(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, join := upWithPrintedJoin(t, 3)
	hosts := c.Hosts()
	for _, h := range hosts[1:] {
		if code, out, errOut := runCLI(t, on(h), join...); code != ExitOK {
			t.Fatalf("join on %s: exit %d\n%s\n%s", h.Name(), code, out, errOut)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := c.VIPConfig() // cp1's admin kubeconfig, read before cp1 may go
	if err != nil {
		t.Fatal(err)
	}
	published := publishedEtcdMembers(ctx, t, cfg)
	if want := clientURLs(hosts...); published() != want {
		t.Fatalf("etcd members published after the joins: %q, want %q", published(), want)
	}
	// cp1 leaves: the first control plane, the VIP holder since its up.
	holder, others := hosts[0], hosts[1:]
	if got := holder.Trusted(); len(got) == 0 {
		t.Fatalf("the firewall of %s, brought up by stratum up, trusts no pod range", holder.Name())
	}

	// Another voter down: the holder's reset would leave one healthy voter
	// of two.
	others[1].StopEtcd()
	before := memberTable(ctx, t, others[0])
	filesBefore := configFiles(t, holder.Root())
	code, out, errOut := runCLI(t, on(holder), "reset")
	if code != ExitRefused || !strings.Contains(errOut, "under the quorum of 2") || !strings.Contains(errOut, "nothing was changed") {
		t.Fatalf("reset with another voter down: exit %d, want a refusal (3) naming the quorum\n%s\n%s", code, out, errOut)
	}
	if after := memberTable(ctx, t, others[0]); after != before {
		t.Fatalf("the refused reset changed the members:\nbefore %s\nafter  %s", before, after)
	}
	if changed := changedFiles(filesBefore, configFiles(t, holder.Root())); len(changed) > 0 {
		t.Fatalf("the refused reset changed files on %s: %v", holder.Name(), changed)
	}
	if err := others[1].StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}

	// The cluster whole again: the plan, then the reset.
	code, out, errOut = runCLI(t, on(holder), "reset", "--dry-run", "-o", "json")
	if code != ExitOK {
		t.Fatalf("reset --dry-run -o json: exit %d\n%s\n%s", code, out, errOut)
	}
	var plan ha.ResetPlanReport
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("reset --dry-run -o json printed %q: %v", out, err)
	}
	if got, want := strings.Join(plan.Steps, ","), "stop-vip,stop-apiserver,member-remove,stop-etcd,wipe"; got != want || plan.Role != "voter" || plan.PeerURL != holder.PeerURL() {
		t.Fatalf("the plan: %+v, want steps %s of the voter %s", plan, want, holder.PeerURL())
	}
	code, out, errOut = runCLI(t, on(holder), "reset")
	if code != ExitOK {
		t.Fatalf("reset of %s, the VIP holder: exit %d\n%s\n%s", holder.Name(), code, out, errOut)
	}
	t.Logf("reset of %s printed:\n%s%s", holder.Name(), out, errOut)
	got := memberTable(ctx, t, others[0])
	want := fmt.Sprintf("%s voter started; %s voter started", others[0].PeerURL(), others[1].PeerURL())
	if got != want {
		t.Fatalf("members after the reset: %s\nwant %s", got, want)
	}
	readyzWithin(ctx, t, "through the VIP after its holder's reset", cfg, 20*time.Second)
	if h := c.VIPHolder(); h == holder {
		t.Fatalf("%s still holds the VIP after its reset", holder.Name())
	}
	if code, out, errOut := runCLI(t, on(others[0]), "etcd", "health"); code != ExitOK {
		t.Fatalf("etcd health on %s after the reset: exit %d\n%s\n%s", others[0].Name(), code, out, errOut)
	}
	if left := filesUnder(t, holder.Root()); !onlyRuntimeAndLogs(left) {
		t.Fatalf("the reset left files on %s: %v", holder.Name(), keysOf(left))
	}
	if got := holder.Trusted(); len(got) != 0 {
		t.Fatalf("the firewall of %s still trusts %v after its reset", holder.Name(), got)
	}
	if code, out, errOut := runCLI(t, on(holder), "reset"); code != ExitOK || !strings.Contains(out, "nothing to reset") {
		t.Fatalf("a second reset: exit %d, want 0 saying there is nothing to reset\n%s\n%s", code, out, errOut)
	}

	if want := clientURLs(others...); published() != want {
		t.Fatalf("etcd members published after the reset: %q, want %q", published(), want)
	}

	// The machine joins again with the first join command, whose grant
	// names only cp1's etcd, gone: it finds the members the cluster
	// published since.
	if code, out, errOut := runCLI(t, on(holder), join...); code != ExitOK {
		t.Fatalf("the first join command (its grant naming only cp1's etcd), on %s after its reset: exit %d\n%s\n%s", holder.Name(), code, out, errOut)
	}
	if got := memberTable(ctx, t, others[0]); strings.Count(got, "voter started") != 3 || !strings.Contains(got, holder.PeerURL()+" voter started") {
		t.Fatalf("members after the join again: %s", got)
	}
	servesWithClusterCA(ctx, t, holder)
}

// TestJoinedControlPlaneOutlivesItsJoinServer: in a cluster without a VIP,
// a control plane joined through cp1's address keeps its clients when cp1
// is retired. Its kubeconfigs target its own apiserver (bring-up's rule, and
// kubeadm's local endpoint), never the join URL. Judged as a user would:
// cp2's admin kubeconfig exactly as written (kubectl's view, the cluster CA
// only) after cp1's reset, then a join command minted on cp2, which names
// cp2, run on the retired machine.
func TestJoinedControlPlaneOutlivesItsJoinServer(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 2, APIServers: true})
	cp1, cp2 := c.Hosts()[0], c.Hosts()[1]
	if code, out, errOut := runCLI(t, on(cp1), "up"); code != ExitOK {
		t.Fatalf("up on cp1: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, on(cp1), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create on cp1: exit %d\n%s", code, errOut)
	}
	join := strings.Fields(printedCommandLines(out)[0])[1:]
	if code, out, errOut := runCLI(t, on(cp2), join...); code != ExitOK {
		t.Fatalf("join on cp2 through cp1: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc, err := cp2.Files().ReadFile(version.Kubeconfig("admin"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != cp2.APIServerURL() {
		t.Fatalf("cp2's admin kubeconfig targets %s, want its own apiserver %s (it joined through %s)", cfg.Host, cp2.APIServerURL(), cp1.APIServerURL())
	}

	if code, out, errOut := runCLI(t, on(cp1), "reset"); code != ExitOK {
		t.Fatalf("reset of cp1: exit %d\n%s\n%s", code, out, errOut)
	}
	readyzWithin(ctx, t, "cp2's admin kubeconfig as written, after cp1's reset", cfg, 20*time.Second)
	code, out, errOut = runCLI(t, on(cp2), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create on cp2 after cp1's reset: exit %d\n%s", code, errOut)
	}
	join = strings.Fields(printedCommandLines(out)[0])[1:]
	if want := "--server " + cp2.APIServerURL(); !strings.Contains(strings.Join(join, " "), want) {
		t.Fatalf("the join command minted on cp2 does not name cp2 (%s): %v", want, join)
	}
	if code, out, errOut := runCLI(t, on(cp1), join...); code != ExitOK {
		t.Fatalf("cp2's join command on the retired cp1: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := memberTable(ctx, t, cp2); strings.Count(got, "voter started") != 2 {
		t.Fatalf("members after cp1 joined again through cp2: %s", got)
	}
	servesWithClusterCA(ctx, t, cp1)
}

// TestResetRefusesTheLastVoter: a reset of a cluster's only control plane
// would destroy the cluster: refused, with nothing changed, unless --force,
// which leaves nothing behind.
func TestResetRefusesTheLastVoter(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, _ := upWithPrintedJoin(t, 1)
	cp1 := c.Hosts()[0]
	filesBefore := configFiles(t, cp1.Root())
	code, out, errOut := runCLI(t, on(cp1), "reset", "--dry-run")
	if code != ExitRefused || !strings.Contains(out, "the cluster's last voter") {
		t.Fatalf("reset --dry-run of the last voter: exit %d, want 3 naming the last voter\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, on(cp1), "reset")
	if code != ExitRefused || !strings.Contains(errOut, "the cluster's last voter") {
		t.Fatalf("reset of the last voter: exit %d, want 3\n%s\n%s", code, out, errOut)
	}
	if changed := changedFiles(filesBefore, configFiles(t, cp1.Root())); len(changed) > 0 {
		t.Fatalf("the refused reset changed files: %v", changed)
	}
	servesWithClusterCA(context.Background(), t, cp1)
	if code, out, errOut := runCLI(t, on(cp1), "reset", "--force"); code != ExitOK {
		t.Fatalf("reset --force of the last voter: exit %d\n%s\n%s", code, out, errOut)
	}
	if left := filesUnder(t, cp1.Root()); !onlyRuntimeAndLogs(left) {
		t.Fatalf("reset --force left files: %v", keysOf(left))
	}
}

// onlyRuntimeAndLogs reports whether files are only lock files under /run
// and logs under /var/log, which a reset keeps for a post-mortem.
func onlyRuntimeAndLogs(files map[string]string) bool {
	for p := range files {
		if !strings.HasPrefix(p, "/run/") && !strings.HasPrefix(p, "/var/log/") {
			return false
		}
	}
	return true
}

// configFiles are the files under root (path to contents) but etcd's data,
// which a running member rewrites as the apiservers write, and the services'
// logs, which a running kube-apiserver writes as it meets a member down.
func configFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := filesUnder(t, root)
	maps.DeleteFunc(files, func(p, _ string) bool {
		return strings.HasPrefix(p, version.EtcdDataDir+"/") || strings.HasPrefix(p, "/var/log/")
	})
	return files
}

// changedFiles names the paths added, removed or rewritten between two
// configFiles readings, for a failure that says what changed.
func changedFiles(before, after map[string]string) []string {
	var changed []string
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			changed = append(changed, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			changed = append(changed, p)
		}
	}
	slices.Sort(changed)
	return changed
}

// readyzWithin is readyz asked until it answers or within passes.
func readyzWithin(ctx context.Context, t *testing.T, where string, cfg *rest.Config, within time.Duration) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz with only the cluster CA did not answer within %s: %v (%s)", where, within, err, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// publishedEtcdMembers reads, as kubectl with cfg does, the etcd members the
// cluster publishes for joins on the stratum-certs Secret.
func publishedEtcdMembers(ctx context.Context, t *testing.T, cfg *rest.Config) func() string {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return func() string {
		t.Helper()
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Annotations["stratum.dev/etcd-client-urls"]
	}
}

// clientURLs are the hosts' etcd client URLs, sorted and comma-separated.
func clientURLs(hosts ...*sim.Host) string {
	var urls []string
	for _, h := range hosts {
		urls = append(urls, h.ClientURL())
	}
	return strings.Join(sorted(urls), ",")
}

// TestResetClearsANodeWhoseRecordIsDamaged: a node state or a join journal
// that is not one (a damaged disk, a hand edit) names no member a command
// could act on. Every command refused it, the reset too, with advice that
// went round in a circle (re-run the join, which refused the same way) or
// led to a bootstrap; now the refusal points to `stratum reset --force`,
// which wipes the node and names the member to look for.
func TestResetClearsANodeWhoseRecordIsDamaged(t *testing.T) {
	t.Parallel() // its own simulated host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1})
	h := c.Hosts()[0]
	for _, damaged := range []struct {
		what, path, data, refusedBy string
		// keepsData: a forced reset refuses while etcd data is here (a
		// node state's may be a single control plane's only copy; a join
		// journal's is a learner's, which the cluster holds elsewhere).
		keepsData bool
	}{
		{"a truncated node state", nodestate.Path, `{"role": "control-pl`, "status", true},
		{"a join journal naming no peer URL", ha.JoinIntentPath(), `{"version": 1}`, "up", false},
	} {
		if err := h.Files().WriteFile(damaged.path, []byte(damaged.data), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, on(h), damaged.refusedBy)
		if code == ExitOK || !strings.Contains(out+errOut, "stratum reset --force") {
			t.Errorf("%s with %s: exit %d, want a failure pointing to `stratum reset --force`\n%s%s", damaged.refusedBy, damaged.what, code, out, errOut)
		}
		// The node's lock files appear with its first lock: not a change.
		notLocks := func(p, _ string) bool { return strings.HasPrefix(p, "/run/") }
		before := configFiles(t, h.Root())
		maps.DeleteFunc(before, notLocks)
		code, out, errOut = runCLI(t, on(h), "reset")
		if code != ExitRefused || !strings.Contains(errOut, damaged.path) || !strings.Contains(errOut, "stratum reset --force") {
			t.Fatalf("reset with %s: exit %d, want 3 naming the file and --force\n%s%s", damaged.what, code, out, errOut)
		}
		after := configFiles(t, h.Root())
		maps.DeleteFunc(after, notLocks)
		if changed := changedFiles(before, after); len(changed) > 0 {
			t.Fatalf("the refused reset with %s changed files: %v", damaged.what, changed)
		}
		// With etcd data here, which without a node state may be a
		// cluster's only copy, even a forced reset refuses, saying how to
		// keep it; it once wiped it.
		dataFile := version.EtcdDataDir + "/member/snap/db"
		if err := h.Files().WriteFile(dataFile, []byte("the cluster's data"), 0o600); err != nil {
			t.Fatal(err)
		}
		if damaged.keepsData {
			code, out, errOut = runCLI(t, on(h), "reset", "--force")
			if _, err := h.Files().ReadFile(dataFile); code != ExitRefused || !strings.Contains(errOut, "move that directory's contents away") || err != nil {
				t.Fatalf("reset --force with %s and etcd data: exit %d (data kept: %t), want 3 saying how to keep it\n%s%s", damaged.what, code, err == nil, out, errOut)
			}
			if err := h.Files().RemoveAll(version.EtcdDataDir); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut = runCLI(t, on(h), "reset", "--force")
		if code != ExitOK || !strings.Contains(out, "could not be read") || !strings.Contains(out, "likely named "+h.Name()) {
			t.Fatalf("reset --force with %s: exit %d, want 0 naming the member to look for\n%s%s", damaged.what, code, out, errOut)
		}
		if left := filesUnder(t, h.Root()); !onlyRuntimeAndLogs(left) {
			t.Fatalf("reset --force with %s left %v", damaged.what, keysOf(left))
		}
	}
}
