package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/token"
)

// TestMCPServer lists and calls every tool with the SDK's own client against
// a simulated control plane (real etcd, real apiserver), and checks each
// answer against etcd and the apiserver; every guarded write refuses without
// confirm and changes nothing.
func TestMCPServer(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := &app{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer), opts: opts, log: slog.New(slog.DiscardHandler)}
	cs := connectMCP(ctx, t, a, mcpAllow{ControlPlaneGrants: true})

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.InputSchema == nil || tl.Description == "" {
			t.Errorf("tool %s has no input schema or description", tl.Name)
		}
	}
	slices.Sort(names)
	want := []string{"certs_check", "etcd_health", "etcd_members", "etcd_rejoin", "grants_list", "grants_prune", "node_state", "sim_events", "token_create", "token_list"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	call := func(name string, args map[string]any, out any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out != nil && !res.IsError {
			raw, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(raw, out); err != nil {
				t.Fatalf("%s: structured content %s: %v", name, raw, err)
			}
		}
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	var members membersOut
	call("etcd_members", nil, &members)
	if len(members.Members) != 1 || members.Members[0].Name != "cp1" || !members.Members[0].Leader || members.Members[0].Health != "healthy" {
		t.Fatalf("etcd_members: %+v", members)
	}
	var health healthReport
	call("etcd_health", nil, &health)
	if !health.Healthy || len(health.Members) != 1 || health.Members[0] != cp1.IP().String() {
		t.Fatalf("etcd_health: %+v", health)
	}
	var node statusReport
	call("node_state", nil, &node)
	if node.Node == nil || node.Node.NodeName != "cp1" || node.Node.VIP != c.VIPAddress().String() || node.JoinIntentSurvives || node.Problem != "" {
		t.Fatalf("node_state: %+v", node)
	}
	if !node.Supervisor || len(node.Services) != 3 || !slices.ContainsFunc(node.Services, func(s serviceReport) bool { return s.Name == "etcd" && s.Running }) {
		t.Fatalf("node_state services: %+v", node)
	}
	var certs certsReport
	call("certs_check", nil, &certs)
	if len(certs.Certificates) < 5 {
		t.Fatalf("certs_check: %+v", certs)
	}

	admin, err := adminClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	secrets := func() int {
		l, err := admin.CoreV1().Secrets(token.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Items)
	}
	before := secrets()
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"token_create", map[string]any{"controlPlane": true}},
		{"grants_prune", nil},
		{"etcd_rejoin", map[string]any{"server": "127.0.0.99"}},
	} {
		res := call(tc.name, tc.args, nil)
		if !res.IsError || !strings.Contains(text(res), "confirm: true") {
			t.Fatalf("%s without confirm: error %v, %q", tc.name, res.IsError, text(res))
		}
	}
	if got := secrets(); got != before {
		t.Fatalf("unconfirmed writes changed the token Secrets: %d -> %d", before, got)
	}

	// A server started without --allow-control-plane-grants mints no
	// control-plane grant, whatever the agent confirms.
	refused, err := connectMCP(ctx, t, a, mcpAllow{}).CallTool(ctx, &mcp.CallToolParams{Name: "token_create", Arguments: map[string]any{"controlPlane": true, "confirm": true}})
	if err != nil || !refused.IsError || !strings.Contains(text(refused), "--allow-control-plane-grants") || secrets() != before {
		t.Fatalf("token_create of a control-plane grant on a server without --allow-control-plane-grants: %v, %q, %d token Secrets (were %d)", err, text(refused), secrets(), before)
	}

	var minted mintedReport
	if res := call("token_create", map[string]any{"controlPlane": true, "ttl": "30m", "confirm": true}, &minted); res.IsError {
		t.Fatalf("token_create: %s", text(res))
	}
	if !strings.HasPrefix(minted.JoinCommand, "stratum server ") || secrets() != before+1 {
		t.Fatalf("token_create: %+v, %d token Secrets", minted, secrets())
	}
	if _, err := admin.CoreV1().Secrets(token.Namespace).Get(ctx, token.SecretPrefix+minted.ID, metav1.GetOptions{}); err != nil {
		t.Fatalf("the minted token's Secret: %v", err)
	}
	var tokens tokensOut
	call("token_list", nil, &tokens)
	if len(tokens.Tokens) != before+1 || !slices.ContainsFunc(tokens.Tokens, func(i token.Info) bool { return i.ID == minted.ID && i.Kind == "control-plane" }) {
		t.Fatalf("token_list: %+v", tokens)
	}
	var grants ha.GrantsReport
	call("grants_list", nil, &grants)
	if !grants.Published || !slices.ContainsFunc(grants.Grants, func(g ha.Grant) bool { return g.TokenID == minted.ID && g.Live && g.TokenExists }) {
		t.Fatalf("grants_list lacks the live grant %s: %+v", minted.ID, grants)
	}
	s, err := admin.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Data["certs-"+minted.ID]; !ok || grants.Generation == 0 {
		t.Fatalf("grants_list reports %+v; the Secret's entries: %v", grants, slices.Collect(maps.Keys(s.Data)))
	}
	var done doneOut
	if res := call("grants_prune", map[string]any{"confirm": true}, &done); res.IsError || done.Done == "" {
		t.Fatalf("grants_prune: %s", text(res))
	}
	// The simulation's own event log, as `sim up --events` writes it.
	evFile := filepath.Join(t.TempDir(), "events.json")
	live := startLiveEvents(evFile, c.Events(), slog.New(slog.DiscardHandler))
	if err := live.stop(); err != nil {
		t.Fatal(err)
	}
	var evs simEventsOut
	call("sim_events", map[string]any{"file": evFile, "host": "cp1", "kind": "service"}, &evs)
	wantEvs := 0
	for _, e := range c.Events().Events() {
		if e.Host == "cp1" && e.Kind == "service" {
			wantEvs++
		}
	}
	if evs.Total == 0 || len(evs.Events) != wantEvs || wantEvs == 0 {
		t.Fatalf("sim_events host cp1 kind service: %d of %d events, want %d", len(evs.Events), evs.Total, wantEvs)
	}
	call("sim_events", map[string]any{"file": evFile, "last": 2}, &evs)
	if len(evs.Events) != 2 {
		t.Fatalf("sim_events last 2: %d events", len(evs.Events))
	}
	if res := call("sim_events", map[string]any{"file": filepath.Join(t.TempDir(), "none.json")}, nil); !res.IsError {
		t.Fatal("sim_events on a missing file did not fail")
	}
	if res := call("sim_events", map[string]any{"file": evFile, "kind": "faults"}, nil); !res.IsError || !strings.Contains(text(res), "want one of action") {
		t.Fatalf("sim_events with a misspelled kind: %v %q, want it refused naming the kinds", res.IsError, text(res))
	}
	// What is not an event log is refused, never read as events: a device
	// that never ends (it would fill memory), a pipe no one writes (an open
	// would block), a JSON null, events without a time or kind.
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"/dev/zero":                              "not a regular file",
		fifo:                                     "not a regular file",
		writeTemp(t, "null.json", "null"):        "JSON null",
		writeTemp(t, "empty-event.json", "[{}]"): "has no time or no kind",
		writeTemp(t, "other.json", `[{"foo": 1}]`): "has no time or no kind",
	} {
		if res := call("sim_events", map[string]any{"file": file}, nil); !res.IsError || !strings.Contains(text(res), want) {
			t.Fatalf("sim_events on %s: %v %q, want it refused saying %q", file, res.IsError, text(res), want)
		}
	}
	// A call that cannot succeed says why, not to confirm it.
	if res := call("token_create", map[string]any{"ttl": "bogus"}, nil); !res.IsError || !strings.Contains(text(res), `ttl "bogus"`) {
		t.Fatalf("token_create with ttl bogus, unconfirmed: %v %q, want the ttl refused", res.IsError, text(res))
	}

	// A control-plane grant longer than a day is refused, confirmed or not.
	if res := call("token_create", map[string]any{"controlPlane": true, "ttl": "25h", "confirm": true}, nil); !res.IsError || !strings.Contains(text(res), "lives at most 24h0m0s") {
		t.Fatalf("token_create of a 25h control-plane grant: %v %q, want it refused", res.IsError, text(res))
	}

	// A server that is no address is refused before the confirm is asked.
	if res := call("etcd_rejoin", map[string]any{"server": "cp1"}, nil); !res.IsError || !strings.Contains(text(res), `server "cp1" is not an IP address`) {
		t.Fatalf("etcd_rejoin with server cp1: %v %q", res.IsError, text(res))
	}
	// A dry run needs no confirm; this node is not a rejoin target of itself.
	res := call("etcd_rejoin", map[string]any{"server": cp1.IP().String(), "dryRun": true}, nil)
	if !res.IsError || !strings.Contains(text(res), "is this node") {
		t.Fatalf("etcd_rejoin dry run naming this node: %v %q", res.IsError, text(res))
	}
	// A forced rejoin (this node's data removed while its old cluster may
	// have a quorum) runs only on a server started with
	// --allow-forced-rejoin, whatever the agent confirms: refused before
	// the rejoin judges anything, etcd left serving. Its dry run needs no
	// flag, and with the flag the rejoin itself judges the call.
	forced := map[string]any{"server": cp1.IP().String(), "force": true, "confirm": true}
	if res := call("etcd_rejoin", forced, nil); !res.IsError || !strings.Contains(text(res), "--allow-forced-rejoin") || !strings.Contains(text(res), "nothing was changed") || !cp1.EtcdRunning() {
		t.Fatalf("a forced etcd_rejoin on a server without --allow-forced-rejoin: %v %q (etcd running %v)", res.IsError, text(res), cp1.EtcdRunning())
	}
	if res := call("etcd_rejoin", map[string]any{"server": cp1.IP().String(), "force": true, "dryRun": true}, nil); !res.IsError || !strings.Contains(text(res), "is this node") {
		t.Fatalf("a forced etcd_rejoin's dry run without --allow-forced-rejoin: %v %q, want the plan judged", res.IsError, text(res))
	}
	allowed, err := connectMCP(ctx, t, a, mcpAllow{ForcedRejoin: true}).CallTool(ctx, &mcp.CallToolParams{Name: "etcd_rejoin", Arguments: forced})
	if err != nil || !allowed.IsError || !strings.Contains(text(allowed), "is this node") {
		t.Fatalf("a forced etcd_rejoin naming this node on a server with --allow-forced-rejoin: %v, %q, want the rejoin's own refusal", err, text(allowed))
	}
}

// TestMCPKeepsStdoutForTheProtocol: under `stratum mcp` a step's progress
// line goes to stderr, never into the JSON-RPC stream on stdout.
func TestMCPKeepsStdoutForTheProtocol(t *testing.T) {
	var out, errOut bytes.Buffer
	a := &app{stdout: &out, stderr: &errOut}
	a.protocolOwnsStdout()
	a.progress("etcd start: done in 1s")
	if out.Len() != 0 || !strings.Contains(errOut.String(), "etcd start: done in 1s") {
		t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// writeTemp writes content to a new file named name in a test directory and
// returns its path.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeMCPStopsCallsInFlightWhenItEnds: the command's end (its signal)
// cancels a tool call in flight, and the server returns; the SDK once kept
// `stratum mcp` running until the call finished by itself.
func TestServeMCPStopsCallsInFlightWhenItEnds(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	entered := make(chan struct{})
	stopped := make(chan error, 1)
	mcp.AddTool(s, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, struct{}, error) {
		close(entered)
		select {
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
			return nil, struct{}{}, ctx.Err()
		case <-time.After(time.Minute): // a failing run ends, not hangs
			stopped <- nil
			return nil, struct{}{}, nil
		}
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	st, ct := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- serveMCP(ctx, s, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	go func() {
		_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}})
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool call never reached its handler")
	}
	sig := errors.New("interrupted by terminated")
	cancel(sig)
	select {
	case cause := <-stopped:
		if !errors.Is(cause, sig) {
			t.Errorf("the call in flight ended with %v, want the command's cause %v", cause, sig)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command's end did not cancel the tool call in flight")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serveMCP after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serveMCP did not return after its context ended")
	}
}

// connectMCP is a client session on a's MCP server (allow its
// --allow-* flags) over in-memory transports, both closed
// when the test ends.
func connectMCP(ctx context.Context, t *testing.T, a *app, allow mcpAllow) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := a.mcpServer(allow).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
