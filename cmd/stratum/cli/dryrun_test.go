package cli

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// TestReportsAndDryRunsChangeNothing, against a real etcd and apiserver:
// each report's -o json and -o yaml carry the documented fields, and each
// dry run (certs rekey / reupload, repoint, snapshot restore) prints its
// plan, exits as its operation would, and leaves the node's files, the node
// state, the shared-certificate Secret and etcd as they were.
func TestReportsAndDryRunsChangeNothing(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, cp1, opts := upOneControlPlane(t, 2)
	d := cp1.Handle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vip := c.VIPAddress().String()
	unused := c.VIPAddress().As4()
	unused[3] = 250 // on the cluster's subnet, served by nothing
	unusedIP := netip.AddrFrom4(unused).String()

	// token create -o json: the grant, with what the joiner needs.
	code, out, errOut := runCLI(t, opts, "token", "create", "--control-plane", "-o", "json")
	var m mintedReport
	if code != ExitOK || json.Unmarshal([]byte(out), &m) != nil {
		t.Fatalf("token create -o json: exit %d\n%s%s", code, out, errOut)
	}
	if m.Kind != "control-plane" || len(m.CertificateKey) != 64 || !strings.Contains(m.JoinCommand, m.Token) ||
		!strings.Contains(m.JoinCommand, m.CertificateKey) || m.Server != "https://"+vip+":6443" || !strings.HasPrefix(m.CAHash, "sha256:") {
		t.Fatalf("token create -o json: %+v", m)
	}

	// grants list: the grant, live, in the table, JSON and YAML alike.
	var fromJSON, fromYAML ha.GrantsReport
	for format, dst := range map[string]*ha.GrantsReport{"json": &fromJSON, "yaml": &fromYAML} {
		code, out, errOut := runCLI(t, opts, "grants", "list", "-o", format)
		if code != ExitOK {
			t.Fatalf("grants list -o %s: exit %d\n%s", format, code, errOut)
		}
		if err := yaml.Unmarshal([]byte(out), dst); err != nil {
			t.Fatalf("grants list -o %s: %v\n%s", format, err, out)
		}
	}
	if len(fromJSON.Grants) != 1 || fromJSON.Grants[0].TokenID != m.ID || !fromJSON.Grants[0].Live || !fromJSON.Published {
		t.Fatalf("grants list -o json: %+v", fromJSON)
	}
	if fromYAML.Grants[0].TokenID != m.ID || fromYAML.Generation != fromJSON.Generation {
		t.Fatalf("grants list -o yaml %+v differs from -o json %+v", fromYAML, fromJSON)
	}
	if code, out, _ := runCLI(t, opts, "grants", "list"); code != ExitOK || !strings.Contains(out, m.ID) {
		t.Fatalf("grants list: exit %d\n%s", code, out)
	}

	// status -o json: the node and its services.
	code, out, errOut = runCLI(t, opts, "status", "-o", "json")
	var st statusReport
	if code != ExitOK || json.Unmarshal([]byte(out), &st) != nil || st.Node == nil || st.Node.NodeName != "cp1" || st.Node.VIP != vip || !st.Supervisor || st.Problem != "" || st.ResetUnderWay {
		t.Fatalf("status -o json: exit %d\n%s%s", code, out, errOut)
	}
	if i := slices.IndexFunc(st.Services, func(s serviceReport) bool { return s.Name == ha.ServiceEtcd }); i < 0 || st.Services[i].Version != version.Etcd {
		t.Fatalf("status -o json names no etcd version %s among its services: %+v", version.Etcd, st.Services)
	}
	if code, out, _ := runCLI(t, opts, "status"); code != ExitOK || !regexp.MustCompile(`(?m)^etcd +`+regexp.QuoteMeta(version.Etcd)+` +running`).MatchString(out) {
		t.Fatalf("status names no etcd version %s in its table: exit %d\n%s", version.Etcd, code, out)
	}

	// status on a machine that is no control plane says so, and how to join
	// it; never only "start it with stratum up", which would make a second
	// cluster there.
	code, out, errOut = runCLI(t, on(c.Hosts()[1]), "status")
	if code != ExitFail || !strings.Contains(errOut, "this machine is not a control plane") || !strings.Contains(errOut, "stratum server") || strings.Contains(errOut, "files written so far") {
		t.Fatalf("status on a machine with no node state: exit %d\n%s%s", code, out, errOut)
	}
	// The JSON (and the MCP tool node_state, the same document) carries it.
	code, out, errOut = runCLI(t, on(c.Hosts()[1]), "status", "-o", "json")
	st = statusReport{}
	if code != ExitFail || json.Unmarshal([]byte(out), &st) != nil || st.Node != nil || !strings.Contains(st.Problem, "this machine is not a control plane") {
		t.Fatalf("status -o json on a machine with no node state: exit %d\n%s%s", code, out, errOut)
	}
	// A machine a join left without state (stopped between its discovery
	// and its journal, with the cluster's certificates downloaded): status
	// says so and what to do, and `stratum up` refuses to bootstrap a second
	// cluster under those CAs, which it once did.
	half := c.Hosts()[1]
	if err := half.Files().WriteFile(version.Kubeconfig("bootstrap"), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, on(half), "status")
	if code != ExitFail || !strings.Contains(errOut, "a control-plane join stopped on this machine before it saved its state") || !strings.Contains(errOut, "stratum reset --force") || strings.Contains(errOut, "start a NEW cluster") {
		t.Fatalf("status on a machine a join left without state: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, on(half), "up")
	if code != ExitRefused || !strings.Contains(errOut, version.Kubeconfig("bootstrap")) {
		t.Fatalf("stratum up on a machine a join left without state: exit %d, want %d (refused)\n%s%s", code, ExitRefused, out, errOut)
	}
	if _, err := half.Files().ReadFile(nodestate.Path); err == nil {
		t.Fatal("stratum up on a machine a join left without state saved a node state")
	}
	// What the refusal advises clears the machine.
	code, out, errOut = runCLI(t, on(half), "reset", "--force")
	if _, err := half.Files().ReadFile(version.Kubeconfig("bootstrap")); code != ExitOK || err == nil {
		t.Fatalf("stratum reset --force on a machine a join left without state: exit %d, bootstrap.conf still there: %t\n%s%s", code, err == nil, out, errOut)
	}

	cs, err := adminClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	secretRV := func() string {
		t.Helper()
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.ResourceVersion
	}
	confDir := cp1.Path(version.K8sConfDir)
	unchanged := func(what string, files map[string]string, state []byte, rv string) {
		t.Helper()
		if got := filesUnder(t, confDir); !maps.Equal(got, files) {
			t.Errorf("%s changed the files under %s", what, version.K8sConfDir)
		}
		if got, _ := d.ReadFile(nodestate.Path); string(got) != string(state) {
			t.Errorf("%s changed the node state", what)
		}
		if got := secretRV(); got != rv {
			t.Errorf("%s changed stratum-certs (resourceVersion %s -> %s)", what, rv, got)
		}
		if !cp1.EtcdRunning() || !cp1.APIServerRunning() {
			t.Errorf("%s stopped etcd or the apiserver", what)
		}
	}
	files := filesUnder(t, confDir)
	state, err := d.ReadFile(nodestate.Path)
	if err != nil {
		t.Fatal(err)
	}
	rv := secretRV()

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"certs", "rekey", "--dry-run"}, ExitOK, []string{"would take the maintenance fence as rekey@cp1", "would retire 1 pending join grants", m.ID}},
		{[]string{"certs", "reupload", "--dry-run"}, ExitOK, []string{"would take the maintenance fence as reupload@cp1", m.ID}},
		{[]string{"repoint", "--vip", vip, "--dry-run"}, ExitOK, []string{"the VIP " + vip + " serves this cluster's apiserver", "already at https://" + vip + ":6443: admin.conf"}},
		{[]string{"repoint", "--vip", unusedIP, "--dry-run"}, ExitRefused, []string{"repoint would be refused", "does not serve"}},
		// Not dry runs, refused before anything changes: Cilium is checked
		// before this node's clients move (this cluster runs none), and a
		// control plane's own address is never taken for the VIP.
		{[]string{"repoint", "--vip", vip, "--cilium"}, ExitRefused, []string{"daemonset kube-system/cilium", "nothing was changed", "repoint without --cilium"}},
		{[]string{"repoint", "--vip", cp1.IP().String()}, ExitRefused, []string{"the VIP " + cp1.IP().String() + " is this node's own address", "nothing was changed"}},
	} {
		code, out, errOut := runCLI(t, opts, tc.args...)
		if code != tc.code {
			t.Fatalf("%v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("%v lacks %q:\n%s%s", tc.args, w, out, errOut)
			}
		}
		unchanged(strings.Join(tc.args, " "), files, state, rv)
	}

	// snapshot restore --dry-run: a real snapshot restores in scratch and
	// the plan names the stop; a file that is not one is refused.
	snap := filepath.Join(t.TempDir(), "backup.db")
	// A destination no rename could reach is refused before the dump.
	for _, bad := range []struct {
		path string
		code int
		want string
	}{
		{"", ExitUsage, "the file name is empty"},
		{filepath.Dir(snap), ExitRefused, "is a directory"},
		{filepath.Join(filepath.Dir(snap), "missing", "x.db"), ExitRefused, "does not exist"},
	} {
		if code, out, errOut := runCLI(t, opts, "snapshot", "save", bad.path); code != bad.code || !strings.Contains(errOut, bad.want) || !strings.Contains(errOut, "nothing was saved") {
			t.Errorf("snapshot save %q: exit %d, want %d naming %q\n%s%s", bad.path, code, bad.code, bad.want, out, errOut)
		}
	}
	if code, out, errOut := runCLI(t, opts, "snapshot", "save", snap); code != ExitOK {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, out, errOut)
	}
	ids := func() string {
		t.Helper()
		rows, err := etcdMembers(ctx, ha.NewNode(ha.Env{Host: d}), cp1.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rows {
			names = append(names, r.Name+"="+r.PeerURL)
		}
		slices.Sort(names)
		return strings.Join(names, ",")
	}
	before := ids()
	code, out, errOut = runCLI(t, opts, "snapshot", "restore", snap, "--dry-run")
	if code != ExitOK || !strings.Contains(out, "its hash verified") || !strings.Contains(out, "would stop") || !strings.Contains(out, "etcd") ||
		!strings.Contains(out, "stratum etcd rejoin --server "+cp1.IP().String()) {
		t.Fatalf("snapshot restore --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	unchanged("snapshot restore --dry-run", files, state, rv)
	bad := filepath.Join(t.TempDir(), "not-a-snapshot.db")
	if err := os.WriteFile(bad, []byte("not an etcd snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"snapshot", "restore", bad, "--dry-run"}, {"snapshot", "restore", bad}} {
		if code, out, errOut := runCLI(t, opts, args...); code != ExitRefused || !strings.Contains(errOut, "is not a readable etcd snapshot") {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, ExitRefused, out, errOut)
		}
		unchanged(strings.Join(args, " "), files, state, rv)
	}
	if after := ids(); after != before {
		t.Fatalf("the dry runs changed the etcd members: %s -> %s", before, after)
	}

	// A reset killed after it stopped the apiserver, the node state still
	// here: status says the reset is unfinished and to run it again. It
	// once said only which services were down, pointing to `stratum up`,
	// which refuses until the reset is finished.
	armed := c.CrashCommandAt(cp1.Name(), ha.CheckpointResetAfterStopAPIServer)
	returned := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, on(cp1), "reset", "--force") // forced: cp1 is the last voter
		returned <- code
	}()
	select {
	case <-armed.Reached():
	case code := <-returned:
		t.Fatalf("reset --force returned (exit %d) without reaching %s", code, ha.CheckpointResetAfterStopAPIServer)
	case <-ctx.Done():
		t.Fatalf("reset --force never reached %s", ha.CheckpointResetAfterStopAPIServer)
	}
	code, out, errOut = runCLI(t, on(cp1), "status")
	if code != ExitFail || !strings.Contains(out, "reset unfinished") || !strings.Contains(errOut, "has not finished") || !strings.Contains(errOut, "run `stratum reset` again") {
		t.Fatalf("status after a reset killed at %s: exit %d, want 1 naming the unfinished reset and `stratum reset`\n%s%s", ha.CheckpointResetAfterStopAPIServer, code, out, errOut)
	}
	code, out, errOut = runCLI(t, on(cp1), "status", "-o", "json")
	st = statusReport{}
	if code != ExitFail || json.Unmarshal([]byte(out), &st) != nil || st.Node == nil || !st.ResetUnderWay || !strings.Contains(st.Problem, "stratum reset") {
		t.Fatalf("status -o json after a reset killed at %s: exit %d, want 1 with the node, resetUnderWay and the problem\n%s%s", ha.CheckpointResetAfterStopAPIServer, code, out, errOut)
	}
	if code, out, errOut := runCLI(t, on(cp1), "reset", "--force"); code != ExitOK {
		t.Fatalf("reset --force again, as status says: exit %d\n%s%s", code, out, errOut)
	}
}
