package timeline

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"stratum.dev/stratum/sim"
)

// chromium finds headless Chromium (`chromium` or `chromium-browser` on
// PATH; `make timeline-deps` installs it). Without it the test is skipped,
// unless CI is set: there it fails, so CI never passes without the browser
// check.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("neither chromium nor chromium-browser is on PATH, and CI=%q makes that a failure: run `make timeline-deps` (apt-get install chromium)", os.Getenv("CI"))
	}
	t.Skip("neither chromium nor chromium-browser is on PATH: run `make timeline-deps` (apt-get install chromium); CI fails here instead of skipping")
	return ""
}

// runChromium runs headless Chromium on the page with extra arguments and
// returns its stdout.
func runChromium(t *testing.T, bin, page string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}, args...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v; stderr:\n%s", bin, strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

// node is an element of the DOM a browser built.
type node struct {
	name     string
	attr     map[string]string
	children []*node
	text     string // every text inside it, its children's included
}

func (n *node) hasClass(c string) bool { return slices.Contains(strings.Fields(n.attr["class"]), c) }

// title is the text of the node's <title> child.
func (n *node) title() string {
	for _, c := range n.children {
		if c.name == "title" {
			return c.text
		}
	}
	return ""
}

// all lists the nodes under n (n included) for which keep holds.
func (n *node) all(keep func(*node) bool) []*node {
	var out []*node
	if keep(n) {
		out = append(out, n)
	}
	for _, c := range n.children {
		out = append(out, c.all(keep)...)
	}
	return out
}

// parseDOM reads the HTML serialization of Chromium's --dump-dom.
func parseDOM(t *testing.T, dom []byte) *node {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(dom))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	root := &node{name: "#document", attr: map[string]string{}}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parse the DOM Chromium dumped: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{name: strings.ToLower(tok.Name.Local), attr: map[string]string{}}
			for _, a := range tok.Attr {
				n.attr[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			for _, n := range stack {
				n.text += string(tok)
			}
		}
	}
	return root
}

// checkDOM renders events, has Chromium build its DOM, and checks the DOM
// against the log: one lane per host and one for the cluster, in natural
// order; one mark per fault and per client event, on its host's lane with its
// text as the tooltip; one span per span the log derives; the failure text.
// It returns the DOM's root and the page's path.
func checkDOM(t *testing.T, bin string, events []sim.Event, opts Options) (*node, string) {
	t.Helper()
	jsonPath, htmlPath, err := WriteFiles(t.TempDir(), t.Name(), events, opts)
	if err != nil {
		t.Fatal(err)
	}
	if base := filepath.Base(htmlPath); strings.ContainsAny(strings.TrimSuffix(base, ".timeline.html"), "/ ") {
		t.Errorf("WriteFiles named the page %q: its base keeps a character it should replace", base)
	}
	var back []sim.Event
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &back); err != nil || len(back) != len(events) {
		t.Fatalf("%s does not read back as the %d events: %d events, %v", jsonPath, len(events), len(back), err)
	}
	dom := parseDOM(t, runChromium(t, bin, htmlPath, "--dump-dom"))

	hosts := map[string]bool{}
	for _, e := range events {
		if e.Host != "" {
			hosts[e.Host] = true
		}
	}
	wantLanes := []string{""}
	for h := range hosts {
		wantLanes = append(wantLanes, h)
	}
	slices.SortFunc(wantLanes[1:], naturalCompare)
	var lanes []string
	for _, l := range dom.all(func(n *node) bool { return n.name == "g" && n.hasClass("lane") }) {
		lanes = append(lanes, l.attr["data-host"])
	}
	if d := cmp.Diff(wantLanes, lanes); d != "" {
		t.Errorf("lanes (data-host; -want +got):\n%s", d)
	}

	for _, kind := range []string{"fault", "client"} {
		var want, got []string
		for _, e := range events {
			if e.Kind == kind {
				want = append(want, e.Host+" | "+e.What)
			}
		}
		for _, m := range dom.all(func(n *node) bool { return n.name == "g" && n.hasClass("mark") && n.hasClass("mark-"+kind) }) {
			// The tooltip is "<seconds>  <lane>  <kind>: <text>".
			_, what, _ := strings.Cut(m.title(), "  "+kind+": ")
			got = append(got, m.attr["data-host"]+" | "+what)
		}
		slices.Sort(want)
		slices.Sort(got)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s marks (host | tooltip text; -want +got):\n%s", kind, d)
		}
	}

	count := func(spans []string) map[string]int {
		out := map[string]int{}
		for _, s := range spans {
			out[s]++
		}
		return out
	}
	var want, got []string
	for _, s := range derive(events).spans {
		want = append(want, s.host+" "+s.kind+" "+s.service)
	}
	for _, r := range dom.all(func(n *node) bool { return n.name == "rect" && n.hasClass("span") }) {
		kind := ""
		for _, c := range strings.Fields(r.attr["class"]) {
			if k, ok := strings.CutPrefix(c, "span-"); ok {
				kind = k
			}
		}
		if r.title() == "" {
			t.Errorf("span %s %s on %s has no tooltip", kind, r.attr["data-service"], r.attr["data-host"])
		}
		got = append(got, r.attr["data-host"]+" "+kind+" "+r.attr["data-service"])
	}
	if d := cmp.Diff(count(want), count(got)); d != "" {
		t.Errorf("spans (host kind service: count; -want +got):\n%s", d)
	}

	if opts.Failure != "" {
		boxes := dom.all(func(n *node) bool { return n.name == "div" && n.hasClass("failure") })
		if len(boxes) != 1 || !strings.Contains(boxes[0].text, opts.Failure) {
			t.Errorf("the page has %d failure boxes; want one holding %q", len(boxes), opts.Failure)
		}
	}
	if opts.Replay != "" && !strings.Contains(dom.text, opts.Replay) {
		t.Errorf("the page lacks the replay command %q", opts.Replay)
	}
	return dom, htmlPath
}

// spansIn lists the DOM's spans of a kind as "host service".
func spansIn(dom *node, kind string) []string {
	var out []string
	for _, r := range dom.all(func(n *node) bool { return n.name == "rect" && n.hasClass("span") && n.hasClass("span-"+kind) }) {
		out = append(out, strings.TrimSpace(r.attr["data-host"]+" "+r.attr["data-service"]))
	}
	return out
}

// A hand-written log with every span kind, client operations and texts that
// would break the page if they were not escaped.
func TestBrowserDOMOfAWrittenLog(t *testing.T) {
	bin := chromium(t)
	log := logOf(
		ev(0.5, "cp1", "leader", "etcd leader is now cp1 (term 2)"),
		ev(0.6, "cp2", "leader", "etcd leader is now cp1 (term 2)"),
		ev(0.7, "cp1", "vip", "holds the VIP 127.1.2.10"),
		ev(1, "", "client", "put k1=v1 ok"),
		ev(1.5, "", "fault", "partition {cp1} | {cp2,cp3}"),
		ev(1.6, "cp2", "client", `put k1=</title><g class="mark mark-fault">v2 unknown`),
		ev(2, "cp2", "leader", "etcd leader is now cp2 (term 3)"),
		ev(2.1, "cp3", "leader", "etcd leader is now cp2 (term 3)"),
		ev(2.2, "cp2", "vip", "holds the VIP 127.1.2.10"),
		ev(3, "", "heal", "network healed"),
		ev(3.5, "cp3", "crash", "host crashed (incarnation 1)"),
		ev(3.6, "cp3", "fault", "kube-apiserver killed (SIGKILL)"),
		ev(3.7, "cp3", "fault", `etcd crashed <script>alert("x")</script>`),
		ev(5, "cp3", "action", "reboot"),
		ev(5.5, "cp3", "service", "etcd started (embedded etcd 3.7.3, state=existing) in 200ms"),
		ev(6, "cp3", "service", "kube-apiserver ready in 500ms"),
		ev(6.5, "", "client", "get k1 -> v1"),
		ev(7, "", "action", "cluster closed"),
	)
	opts := Options{
		Title:   "TestClientsThroughVIP check 2",
		Failure: `clients through the VIP: cp1's admin kubeconfig cannot read </pre> & "the sentinel"`,
		Replay:  `go test ./scenarios -run '^TestClientsThroughVIP$' -rapid.seed=42`,
	}
	dom, _ := checkDOM(t, bin, log, opts)
	for kind, want := range map[string][]string{
		SpanLeader:      {"cp1", "cp2"},
		SpanVIP:         {"cp1", "cp2"},
		SpanPartitioned: {"cp1", "cp2", "cp3"},
		SpanCrashed:     {"cp3"},
		SpanDown:        {"cp3 etcd", "cp3 kube-apiserver"},
	} {
		got := spansIn(dom, kind)
		slices.Sort(got)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s spans (-want +got):\n%s", kind, d)
		}
	}
	if len(dom.all(func(n *node) bool { return n.name == "script" })) != 0 {
		t.Error("an event's text became a <script> element")
	}
}

// runExample drives a small etcd-only simulated cluster (no apiservers, so a
// few seconds) through the faults a scenario draws, with real client
// operations recorded as "client" events, and returns its event log: a
// partition of the leader, a heal, a host's crash and reboot, an isolation,
// and a crash of the leader's etcd, restarted.
func runExample(t *testing.T) (events []sim.Event, crashed, isolated string) {
	t.Helper()
	c := sim.Start(t, sim.Config{ControlPlanes: 3, Etcd: sim.FastEtcdTiming})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// leader is the leader the members' reports name, as the timeline
	// draws it.
	leader := func() string {
		m := derive(c.Events().Events())
		for _, s := range m.spans {
			if s.kind == SpanLeader && s.toEnd {
				return s.host
			}
		}
		return ""
	}
	waitLeader := func(what string, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if l := leader(); l != "" && ok(l) {
				return l
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: the members' leader reports do not show it within 10s:\n%s", what, c.Events())
		return ""
	}
	anyLeader := func(string) bool { return true }
	put := func(via *sim.Host, key, val string, timeout time.Duration) {
		t.Helper()
		cli, err := via.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		outcome := "ok"
		if _, err := cli.Put(pctx, key, val); err != nil {
			outcome = "unknown"
		}
		c.Events().Record(via.Name(), "client", "put %s=%s %s", key, val, outcome)
	}
	get := func(via *sim.Host, key string) {
		t.Helper()
		cli, err := via.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := cli.Get(gctx, key)
		switch {
		case err != nil:
			c.Events().Record(via.Name(), "client", "get %s failed", key)
		case len(resp.Kvs) == 0:
			c.Events().Record(via.Name(), "client", "get %s -> (none)", key)
		default:
			c.Events().Record(via.Name(), "client", "get %s -> %s", key, resp.Kvs[0].Value)
		}
	}
	other := func(not ...string) *sim.Host {
		for _, h := range c.Hosts() {
			if !slices.Contains(not, h.Name()) {
				return h
			}
		}
		t.Fatalf("no host but %v", not)
		return nil
	}

	l := waitLeader("a first leader", anyLeader)
	put(c.Host("cp1"), "k1", "v1", 2*time.Second)
	c.Partition([]string{l})
	l2 := waitLeader("a new leader on the majority side", func(n string) bool { return n != l })
	put(c.Host(l2), "k1", "v2", 2*time.Second)
	put(c.Host(l), "k1", "v3", 300*time.Millisecond) // the minority cannot commit it
	c.Heal()
	l = waitLeader("one leader after the heal", anyLeader)

	crashed = other(l).Name()
	c.Host(crashed).Crash()
	time.Sleep(300 * time.Millisecond)
	if err := c.Host(crashed).Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	isolated = other(l, crashed).Name()
	c.Isolate(isolated)
	get(other(isolated), "k1")
	time.Sleep(300 * time.Millisecond)
	c.Heal()

	old := c.Host(waitLeader("a leader before its crash", anyLeader))
	old.CrashEtcd()
	waitLeader("a new leader after the leader's etcd crashed", func(n string) bool { return n != old.Name() })
	if err := old.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	get(old, "k1")
	c.Close()
	return c.Events().Events(), crashed, isolated
}

// A real event log, of an etcd-only simulated cluster through faults,
// rendered and checked in a browser. With TIMELINE_EXAMPLE_PNG set to a
// path it also writes a screenshot there (docs/timeline-example.png is made
// so: see docs/faults.md).
func TestBrowserDOMOfASimulation(t *testing.T) {
	bin := chromium(t)
	events, crashed, isolated := runExample(t)
	opts := Options{
		Title:   "example: three etcd members through a partition, a crash, an isolation and the leader's crash",
		Failure: "example (no invariant broke in this run): split leadership: cp1, cp2 name cp1 & cp3 names cp3 <while the gate passed>",
		Replay:  "go test ./sim/timeline -run '^TestBrowserDOMOfASimulation$'",
	}
	dom, page := checkDOM(t, bin, events, opts)

	leaders := spansIn(dom, SpanLeader)
	if len(leaders) < 3 {
		t.Errorf("leader spans %v: want at least three (the leader changes at the partition and at its crash)", leaders)
	}
	if got := spansIn(dom, SpanCrashed); !slices.Equal(got, []string{crashed}) {
		t.Errorf("crashed spans on %v, want on %s alone", got, crashed)
	}
	if got := spansIn(dom, SpanPartitioned); !slices.Contains(got, isolated) || len(got) < 4 {
		t.Errorf("partitioned spans on %v: want the three hosts' of the partition and %s's of its isolation", got, isolated)
	}
	if got := spansIn(dom, SpanDown); !slices.Contains(got, crashed+" etcd") {
		t.Errorf("down spans %v: want etcd down on %s, which crashed", got, crashed)
	}
	if n := len(dom.all(func(n *node) bool { return n.hasClass("outcome-unknown") && n.hasClass("mark") })); n != 1 {
		t.Errorf("%d client marks with an unknown outcome, want 1 (the put on the minority side)", n)
	}

	if png := os.Getenv("TIMELINE_EXAMPLE_PNG"); png != "" {
		abs, err := filepath.Abs(png)
		if err != nil {
			t.Fatal(err)
		}
		runChromium(t, bin, page, "--hide-scrollbars", "--window-size=1400,700", "--screenshot="+abs)
		if fi, err := os.Stat(abs); err != nil || fi.Size() == 0 {
			t.Fatalf("screenshot %s not written: %v", abs, err)
		}
		t.Logf("screenshot written to %s", abs)
	}
}
