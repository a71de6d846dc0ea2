package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// printedCommandLines are the stratum command lines in text: lines that
// start with "stratum " once trimmed, with backslash continuations joined.
func printedCommandLines(text string) []string {
	var out []string
	var cur string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if cur != "" {
			cur += " " + strings.TrimSuffix(l, "\\")
		} else if strings.HasPrefix(l, "stratum ") {
			cur = strings.TrimSuffix(l, "\\")
		}
		if cur != "" && !strings.HasSuffix(l, "\\") {
			out = append(out, strings.Join(strings.Fields(cur), " "))
			cur = ""
		}
	}
	return out
}

// checkRuns fails t unless line names a command of stratum's tree (not a
// group followed by an unknown word) and every flag on it is one that
// command takes.
func checkRuns(t *testing.T, where, line string) {
	t.Helper()
	root := (&app{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}).rootCmd()
	args := strings.Fields(line)[1:]
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Errorf("%s prints %q: no such command: %v", where, line, err)
		return
	}
	if cmd.HasSubCommands() {
		for _, a := range rest {
			if !strings.HasPrefix(a, "-") {
				t.Errorf("%s prints %q: %q is not a subcommand of %q", where, line, a, cmd.CommandPath())
				return
			}
		}
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s prints %q: %v", where, line, err)
	}
}

// TestEveryExampleRuns: each command line in every command's examples is a
// command of the tree with flags it takes.
func TestEveryExampleRuns(t *testing.T) {
	root := (&app{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}).rootCmd()
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range printedCommandLines(c.Example) {
			checkRuns(t, c.CommandPath()+"'s example", line)
			n++
		}
		for _, cc := range c.Commands() {
			walk(cc)
		}
	}
	walk(root)
	if n < 20 {
		t.Fatalf("only %d example command lines found; the walk is broken", n)
	}
	// The check itself catches a line that does not exist.
	ft := &testing.T{}
	checkRuns(ft, "probe", "stratum agent --server https://10.0.0.10:6443")
	checkRuns(ft, "probe", "stratum token create --nope")
	if !ft.Failed() {
		t.Fatal("checkRuns accepted a command or flag that does not exist")
	}
}

// TestTokenCreatePrintsWhatRuns mints on a real simulated control plane (a
// real kube-apiserver): the control-plane grant's printed lines are commands
// of the tree, and the worker token prints no command that does not exist
// but its token and the bootstrap kubeconfig it authorises, which the
// apiserver accepts as the token's bootstrap identity.
func TestTokenCreatePrintsWhatRuns(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()

	code, out, errOut := runCLI(t, opts, "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create --control-plane: exit %d\n%s", code, errOut)
	}
	lines := printedCommandLines(out)
	if len(lines) != 2 {
		t.Fatalf("a control-plane grant printed %d stratum command lines, want the join in its flag and secret-file forms:\n%s", len(lines), out)
	}
	for _, l := range lines {
		checkRuns(t, "token create --control-plane", l)
	}

	kcPath := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	code, out, errOut = runCLI(t, opts, "token", "create", "--ttl", "30m", "--bootstrap-kubeconfig-out", kcPath)
	if code != ExitOK {
		t.Fatalf("token create (worker): exit %d\n%s", code, errOut)
	}
	if lines := printedCommandLines(out); len(lines) != 0 {
		t.Fatalf("a worker token printed command lines %q; stratum has no worker join command", lines)
	}
	kc, err := os.ReadFile(kcPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(kcPath); fi.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap kubeconfig mode %v, want 0600", fi.Mode().Perm())
	}
	tok, err := kubeconfig.TokenOf(kc)
	if err != nil || !strings.Contains(out, "token:    "+tok) || !strings.Contains(out, "CA hash:  sha256:") {
		t.Fatalf("worker output does not show the kubeconfig's token %q (%v):\n%s", tok, err, out)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the apiserver does not accept the worker bootstrap kubeconfig: %v", err)
	}
	id, _, _ := token.ParseToken(tok)
	u := review.Status.UserInfo
	if u.Username != "system:bootstrap:"+id || !slices.Contains(u.Groups, token.WorkerGroup) {
		t.Fatalf("the worker token authenticates as %s %v, want system:bootstrap:%s in %s", u.Username, u.Groups, id, token.WorkerGroup)
	}

	// A file that cannot be written is refused before any token is minted.
	before := tokenSecrets(t, ctx, c, d)
	code, _, errOut = runCLI(t, opts, "token", "create", "--bootstrap-kubeconfig-out", filepath.Join(t.TempDir(), "missing", "x.conf"))
	if code != ExitRefused || !strings.Contains(errOut, "no token was created") {
		t.Fatalf("unwritable --bootstrap-kubeconfig-out: exit %d\n%s", code, errOut)
	}
	if after := tokenSecrets(t, ctx, c, d); after != before {
		t.Fatalf("a refused token create changed the token Secrets: %d before, %d after", before, after)
	}
	if code, _, errOut := runCLI(t, opts, "token", "create", "--control-plane", "--bootstrap-kubeconfig-out", kcPath); code != ExitUsage {
		t.Fatalf("--bootstrap-kubeconfig-out with --control-plane: exit %d\n%s", code, errOut)
	}
}

// tokenSecrets counts the bootstrap-token Secrets through the host's admin
// kubeconfig.
func tokenSecrets(t *testing.T, ctx context.Context, _ *sim.Cluster, d host.Host) int {
	t.Helper()
	cs, err := adminClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Secrets(token.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// TestVersionFlagAndCompletion: --version prints the stamped version, and
// completion scripts come out for each shell.
func TestVersionFlagAndCompletion(t *testing.T) {
	old := Version
	Version = "v9.9.9-test"
	defer func() { Version = old }()
	code, out, errOut := runCLI(t, Options{}, "--version")
	if code != ExitOK || !strings.Contains(out, "v9.9.9-test") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := runCLI(t, Options{}, "completion", sh)
		if code != ExitOK || !strings.Contains(out, "stratum") || len(out) < 500 {
			t.Fatalf("completion %s: exit %d, %d bytes, stderr %q", sh, code, len(out), errOut)
		}
	}
}

// TestDocsCoverEveryCommand: docs/cli.md has a section for every command of
// the tree (cobra's own help and completion scripts aside).
func TestDocsCoverEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	root := (&app{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer)}).rootCmd()
	root.InitDefaultCompletionCmd()
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, cc := range c.Commands() {
			if cc.Hidden || cc.Name() == "help" || c.Name() == "completion" {
				continue
			}
			if cc.Runnable() && !cc.HasSubCommands() || cc.Name() == "completion" {
				checked++
				if !strings.Contains(string(doc), "`"+cc.CommandPath()) {
					t.Errorf("docs/cli.md has no section for %q", cc.CommandPath())
				} else if c.Name() != "completion" && cc.Name() != "completion" {
					sec := docSection(string(doc), cc.CommandPath())
					cc.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
						if f.Name != "help" && !strings.Contains(sec, "--"+f.Name) && !(f.Shorthand != "" && strings.Contains(sec, "-"+f.Shorthand+" ")) {
							t.Errorf("docs/cli.md's section for %q does not document --%s", cc.CommandPath(), f.Name)
						}
					})
				}
			}
			walk(cc)
		}
	}
	walk(root)
	if checked < 20 {
		t.Fatalf("only %d commands checked; the walk is broken", checked)
	}
}

// docSection is the part of doc from the heading that names path to the
// next heading of the same level or above.
func docSection(doc, path string) string {
	i := -1
	for _, h := range []string{"### `" + path + "`", "### `" + path + " ", "`" + path + "`", "`" + path + " "} {
		if i = strings.Index(doc, h); i >= 0 {
			break
		}
	}
	if i < 0 {
		return ""
	}
	if j := strings.LastIndex(doc[:i+1], "\n#"); j >= 0 {
		i = j
	}
	rest := doc[i+1:]
	if k := strings.Index(rest, "\n### "); k >= 0 {
		rest = rest[:k]
	}
	if k := strings.Index(rest, "\n## "); k >= 0 {
		rest = rest[:k]
	}
	return rest
}

// TestUpAndJoinPrintTheirSteps: up and the printed join command, run on
// simulated hosts, print a line per step with its duration.
func TestUpAndJoinPrintTheirSteps(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 3, APIServers: true, VIP: true})
	cp1, cp2 := c.Hosts()[0], c.Hosts()[1]
	code, out, errOut := runCLI(t, on(cp1), "up", "--vip", c.VIPAddress().String())
	if code != ExitOK {
		t.Fatalf("up: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, step := range []string{"refusals", "cluster CAs", "node assembly", "node state", "etcd start", "kube-apiserver start", "cluster admins bound", "kube-vip start"} {
		if !strings.Contains(out, "  "+step+": done in ") {
			t.Errorf("up printed no line for its step %q:\n%s", step, out)
		}
	}
	// A simulated host runs no stratum-operator: up says it skipped that
	// step and why, never that it started one.
	if !strings.Contains(out, "  stratum-operator start: skipped (this host runs no stratum-operator)") {
		t.Errorf("up did not say it skipped the stratum-operator, which no simulated host runs:\n%s", out)
	}
	if !strings.Contains(out, "  learner promotion: skipped (this node's member began the cluster, never a learner)") {
		t.Errorf("up of the first control plane did not say it had no learner to promote:\n%s", out)
	}
	code, out, errOut = runCLI(t, on(cp1), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	join := printedCommandLines(out)[0]
	code, out, errOut = runCLI(t, on(cp2), strings.Fields(join)[1:]...)
	if code != ExitOK {
		t.Fatalf("%s: exit %d\n%s\n%s", join, code, out, errOut)
	}
	t.Logf("%s printed:\n%s", join, out)
	for _, step := range []string{"discovery", "node assembly", "preflight", "intent journal", "etcd member-add and node state", "etcd start", "learner promotion", "member confirmation", "kube-apiserver start"} {
		if !strings.Contains(out, "  "+step+": done in ") {
			t.Errorf("the join printed no line for its step %q:\n%s", step, out)
		}
	}

	// A join whose start is refused (a reset begun meanwhile) after its
	// member-add fails (exit 1), saying the join is done and what to run,
	// never a refusal claiming nothing changed; `stratum up` then starts it.
	code, out, errOut = runCLI(t, on(cp1), "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	join = printedCommandLines(out)[0]
	cp3 := c.Hosts()[2]
	d3 := cp3.Handle()
	// A signal the command took before the join listened for its own (in
	// the supervisor's checks): the join does not begin.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	var stoppedOut, stoppedErr strings.Builder
	if code := Run(stopped, strings.Fields(join)[1:], &stoppedOut, &stoppedErr, on(cp3)); code != ExitRefused || !strings.Contains(stoppedErr.String(), "control-plane join stopped before it began") {
		t.Fatalf("the join command on cp3, its signal taken before the join: exit %d, want %d saying it did not begin\n%s\n%s", code, ExitRefused, stoppedOut.String(), stoppedErr.String())
	}
	if _, err := nodestate.Load(d3); !errors.Is(err, nodestate.ErrNoState) {
		t.Fatalf("a join stopped before it began left cp3 a node state (%v)", err)
	}
	opts3 := Options{Host: func() (host.Host, error) { return d3, nil }, Checkpoint: func(ctx context.Context, name string) error {
		if name == ha.CheckpointAfterStateSave {
			if err := d3.WriteFile(ha.ResetJournalPath(), []byte("{}"), 0o600); err != nil {
				return err
			}
		}
		return d3.Checkpoint(ctx, name)
	}}
	code, _, errOut = runCLI(t, opts3, strings.Fields(join)[1:]...)
	if code != ExitFail || !strings.Contains(errOut, "a reset of this node is under way") || !strings.Contains(errOut, "The join before this start is done") {
		t.Fatalf("a join whose start a reset refused: exit %d, want %d saying the join is done:\n%s", code, ExitFail, errOut)
	}
	if err := d3.Remove(ha.ResetJournalPath()); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, on(cp3), "up"); code != ExitOK {
		t.Fatalf("up after the join's refused start: exit %d\n%s\n%s", code, out, errOut)
	}
}

// upOneControlPlane starts a fresh simulated host with a real apiserver and
// brings it up as the first control plane of a cluster with a VIP, through
// the CLI; it returns the cluster, the host and the options that run the CLI
// on it.
func upOneControlPlane(t testing.TB, spareHosts int) (*sim.Cluster, *sim.Host, Options) {
	t.Helper()
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: max(spareHosts, 1), APIServers: true, VIP: true})
	cp1 := c.Hosts()[0]
	d := cp1.Handle()
	opts := Options{Host: func() (host.Host, error) { return d, nil }, Checkpoint: d.Checkpoint}
	if code, out, errOut := runCLI(t, opts, "up", "--vip", c.VIPAddress().String()); code != ExitOK {
		t.Fatalf("up: exit %d\n%s\n%s", code, out, errOut)
	}
	return c, cp1, opts
}

// mintedID is the token ID in `token create`'s first line ("control-plane
// join grant <id>, expires ..." / "worker token <id>, expires ...").
func mintedID(out string) string {
	head, _, _ := strings.Cut(out, ",")
	f := strings.Fields(head)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// TestDocsNameEveryJSONField: every field of every -o json report (and of
// the MCP tools' results) is named in docs/cli.md.
func TestDocsNameEveryJSONField(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var check func(reflect.Type, string)
	check = func(typ reflect.Type, report string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeOf(time.Time{}) {
			return
		}
		seen[typ] = true
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).Match(doc) {
				t.Errorf("docs/cli.md does not name %s's JSON field %q (%s.%s)", report, name, typ.Name(), f.Name)
			}
			check(f.Type, report)
		}
	}
	for report, v := range map[string]any{
		"etcd members":          memberRow{},
		"etcd health":           healthReport{},
		"certs check":           certsReport{},
		"token list":            token.Info{},
		"token create":          mintedReport{},
		"grants list":           ha.GrantsReport{},
		"status":                statusReport{},
		"etcd rejoin --dry-run": ha.RejoinPlanReport{},
		"reset --dry-run":       ha.ResetPlanReport{},
		"sim_events":            simEventsOut{},
		"upgrade plan":          planReport{},
	} {
		check(reflect.TypeOf(v), report)
	}
}
