package timeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"stratum.dev/stratum/sim"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// ev is an event sec seconds after t0.
func ev(sec float64, host, kind, what string) sim.Event {
	return sim.Event{Time: t0.Add(time.Duration(sec * float64(time.Second))), Host: host, Kind: kind, What: what}
}

// spansOf renders a model's spans as "host kind[/service] start-end", times
// in seconds since t0, "..." for a span open at the end of the log.
func spansOf(m model, kinds ...string) []string {
	var out []string
	for _, s := range m.spans {
		if len(kinds) > 0 && !contains(kinds, s.kind) {
			continue
		}
		kind := s.kind
		if s.service != "" {
			kind += "/" + s.service
		}
		end := fmt.Sprintf("%.1f", s.end.Sub(t0).Seconds())
		if s.toEnd {
			end += "..."
		}
		out = append(out, fmt.Sprintf("%s %s %.1f-%s", s.host, kind, s.start.Sub(t0).Seconds(), end))
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hosts3 gives cp1..cp3 lanes (a log names every host it has).
var hosts3 = []sim.Event{
	ev(0, "", "action", "cluster of 3 hosts on 127.1.2.0/24, VIP 127.1.2.10, in /tmp/x"),
	ev(0, "cp1", "service", "etcd started (embedded etcd 3.7.3, state=new) in 120ms"),
	ev(0, "cp2", "service", "etcd started (embedded etcd 3.7.3, state=new) in 121ms"),
	ev(0, "cp3", "service", "etcd started (embedded etcd 3.7.3, state=new) in 122ms"),
}

func logOf(events ...sim.Event) []sim.Event {
	return append(append([]sim.Event(nil), hosts3...), events...)
}

func TestDeriveSpans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   []sim.Event
		kinds []string
		want  []string
	}{
		{
			name: "crash then reboot: crashed, and etcd down until it starts",
			log: logOf(
				ev(1, "cp2", "crash", "host crashed (incarnation 1)"),
				ev(1.1, "cp2", "fault", "etcd crashed"),
				ev(3, "cp2", "action", "reboot"),
				ev(3.5, "cp2", "service", "etcd started (embedded etcd 3.7.3, state=existing) in 400ms"),
				ev(4, "", "action", "cluster closed"),
			),
			kinds: []string{SpanCrashed, SpanDown},
			want:  []string{"cp2 crashed 1.0-3.0", "cp2 down/etcd 1.1-3.5"},
		},
		{
			name: "a crash with no restart lasts to the end; a checkpoint reached ends another's",
			log: logOf(
				ev(1, "cp1", "crash", "host crashed (incarnation 1)"),
				ev(1.5, "cp3", "crash", "host crashed (incarnation 1)"),
				ev(2, "cp3", "checkpoint", "join-start"),
				ev(5, "", "action", "cluster closed"),
			),
			kinds: []string{SpanCrashed},
			want:  []string{"cp1 crashed 1.0-5.0...", "cp3 crashed 1.5-2.0"},
		},
		{
			name: "crash ends at a service start, not at the stops the crash itself records",
			log: logOf(
				ev(1, "cp1", "crash", "host crashed (incarnation 2)"),
				ev(1.1, "cp1", "service", "kube-vip stopped"),
				ev(1.2, "cp1", "fault", "kube-apiserver killed (SIGKILL)"),
				ev(2, "cp1", "service", "kube-apiserver ready in 900ms"),
			),
			kinds: []string{SpanCrashed, SpanDown},
			want:  []string{"cp1 crashed 1.0-2.0", "cp1 down/kube-apiserver 1.2-2.0"},
		},
		{
			name: "apiserver stopped (killed after SIGTERM) until ready; etcd removed",
			log: logOf(
				ev(1, "cp3", "service", "kube-apiserver stopped (killed: it did not stop within 5s of SIGTERM)"),
				ev(2, "cp3", "service", "etcd member removed from the cluster; stopped"),
				ev(3, "cp3", "service", "kube-apiserver ready in 1s"),
				ev(4, "cp3", "service", "etcd start cancelled by its caller; stopped"),
			),
			kinds: []string{SpanDown},
			want:  []string{"cp3 down/kube-apiserver 1.0-3.0", "cp3 down/etcd 2.0-4.0..."},
		},
		{
			name: "partition then heal: every host cut from another side",
			log: logOf(
				ev(2, "", "fault", "partition {cp1} | {cp2,cp3}"),
				ev(4, "", "heal", "network healed"),
			),
			kinds: []string{SpanPartitioned},
			want:  []string{"cp1 partitioned 2.0-4.0", "cp2 partitioned 2.0-4.0", "cp3 partitioned 2.0-4.0"},
		},
		{
			name: "hosts in no group form one more side",
			log: logOf(
				ev(2, "", "fault", "partition {cp1,cp2}"),
				ev(4, "", "heal", "network healed"),
			),
			kinds: []string{SpanPartitioned},
			want:  []string{"cp1 partitioned 2.0-4.0", "cp2 partitioned 2.0-4.0", "cp3 partitioned 2.0-4.0"},
		},
		{
			name: "one group holding everyone cuts nothing",
			log: logOf(
				ev(2, "", "fault", "partition {cp1,cp2,cp3}"),
				ev(4, "", "heal", "network healed"),
			),
			kinds: []string{SpanPartitioned},
		},
		{
			name: "a cut link partitions its two ends only; isolation one host; services mended is no network heal",
			log: logOf(
				ev(1, "", "fault", "cut cp1 <-> cp3"),
				ev(2, "cp2", "fault", "isolated"),
				ev(2.5, "cp2", "heal", "services mended"),
				ev(3, "", "heal", "network healed"),
			),
			kinds: []string{SpanPartitioned},
			// An isolation is the isolated host's: the others' spans go on
			// as they were.
			want: []string{"cp1 partitioned 1.0-3.0", "cp3 partitioned 1.0-3.0", "cp2 partitioned 2.0-3.0"},
		},
		{
			name: "a partition replaces earlier cuts",
			log: logOf(
				ev(1, "", "fault", "cut cp1 <-> cp2"),
				ev(2, "", "fault", "partition {cp3}"),
				ev(3, "", "heal", "network healed"),
			),
			kinds: []string{SpanPartitioned},
			want:  []string{"cp1 partitioned 1.0-2.0", "cp2 partitioned 1.0-2.0", "cp1 partitioned 2.0-3.0", "cp2 partitioned 2.0-3.0", "cp3 partitioned 2.0-3.0"},
		},
		{
			name: "VIP: one holder at a time; released or kube-vip stopped ends it",
			log: logOf(
				ev(1, "cp1", "vip", "holds the VIP 127.1.2.10"),
				ev(2, "cp2", "vip", "holds the VIP 127.1.2.10"),
				ev(3, "cp2", "vip", "released the VIP"),
				ev(4, "cp3", "vip", "holds the VIP 127.1.2.10"),
				ev(5, "cp3", "service", "kube-vip stopped"),
				ev(6, "cp1", "vip", "holds the VIP 127.1.2.10"),
				ev(7, "", "action", "cluster closed"),
			),
			kinds: []string{SpanVIP},
			want:  []string{"cp1 vip 1.0-2.0", "cp2 vip 2.0-3.0", "cp3 vip 4.0-5.0", "cp1 vip 6.0-7.0..."},
		},
		{
			name: "leader: what a majority of the reporting members name",
			log: logOf(
				ev(1, "cp1", "leader", "etcd leader is now cp1 (term 2)"),
				ev(1.1, "cp2", "leader", "etcd leader is now cp1 (term 2)"),
				ev(1.2, "cp3", "leader", "etcd leader is now cp1 (term 2)"),
				// cp3 cut off: it knows no leader; the other two still
				// follow cp1.
				ev(2, "", "fault", "partition {cp3}"),
				ev(2.5, "cp3", "leader", "etcd has no leader"),
				ev(3, "", "heal", "network healed"),
				ev(3.1, "cp3", "leader", "etcd leader is now cp1 (term 2)"),
				// The leader stops: its own view is gone and its span ends
				// at once; the others elect cp2.
				ev(4, "cp1", "service", "etcd stopped"),
				ev(4.3, "cp2", "leader", "etcd leader is now cp2 (term 3)"),
				ev(4.4, "cp3", "leader", "etcd leader is now cp2 (term 3)"),
				// cp1 is back and follows cp2: still cp2's, a term
				// moves it on.
				ev(5, "cp1", "service", "etcd started (embedded etcd 3.7.3, state=existing) in 80ms"),
				ev(5.1, "cp1", "leader", "etcd leader is now cp2 (term 3)"),
				ev(6, "cp2", "leader", "etcd leader is now cp2 (term 4)"),
				ev(7, "", "action", "cluster closed"),
			),
			kinds: []string{SpanLeader},
			want:  []string{"cp1 leader 1.0-4.0", "cp2 leader 4.4-6.0", "cp2 leader 6.0-7.0..."},
		},
		{
			name: "leader: a member whose etcd stopped no longer counts",
			log: logOf(
				ev(1, "cp1", "leader", "etcd leader is now cp1 (term 2)"),
				ev(1.1, "cp2", "leader", "etcd leader is now cp1 (term 2)"),
				ev(1.2, "cp3", "leader", "etcd leader is now cp1 (term 2)"),
				ev(2, "cp3", "service", "etcd stopped"),
				// One of the two running members knows no leader: no
				// majority names cp1.
				ev(2.5, "cp2", "leader", "etcd has no leader"),
				ev(3, "cp2", "leader", "etcd leader is now cp1 (term 2)"),
			),
			kinds: []string{SpanLeader},
			want:  []string{"cp1 leader 1.0-2.5", "cp1 leader 3.0-3.0..."},
		},
		{
			name: "leader: a report naming a leader no majority names draws nothing",
			log: logOf(
				ev(1, "cp1", "leader", "etcd leader is now cp1 (term 2)"),
				ev(1.1, "cp2", "leader", "etcd leader is now cp2 (term 3)"),
				ev(1.2, "cp3", "leader", "etcd has no leader"),
				ev(2, "cp3", "leader", "etcd leader is now cp2 (term 3)"),
			),
			kinds: []string{SpanLeader},
			want:  []string{"cp1 leader 1.0-1.1", "cp2 leader 2.0-2.0..."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := spansOf(derive(tc.log), tc.kinds...)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("spans (-want +got):\n%s", d)
			}
		})
	}
}

// The span details say what began them.
func TestSpanDetails(t *testing.T) {
	m := derive(logOf(
		ev(1, "", "fault", "partition {cp1} | {cp2,cp3}"),
		ev(2, "cp3", "fault", "isolated"),
	))
	var got []string
	for _, s := range m.spans {
		got = append(got, s.host+": "+s.detail)
	}
	want := []string{
		`cp1: cut off from cp2, cp3 (after "partition {cp1} | {cp2,cp3}")`,
		`cp2: cut off from cp1 (after "partition {cp1} | {cp2,cp3}")`,
		`cp3: cut off from cp1 (after "partition {cp1} | {cp2,cp3}")`,
		`cp3: isolated (after "isolated")`,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("span details (-want +got):\n%s", d)
	}
}

// Lanes: each host named, in natural order; marks: every event but the
// leader and VIP reports the spans show, unknown texts and kinds included.
func TestDeriveLanesAndMarks(t *testing.T) {
	log := []sim.Event{
		ev(0, "cp10", "action", "reboot"),
		ev(1, "cp2", "checkpoint", "after-member-add"),
		ev(2, "cp1", "leader", "etcd leader is now cp1 (term 2)"),
		ev(3, "cp1", "leader", "etcd leader changed its mind"),
		ev(4, "cp2", "vip", "holds the VIP 127.1.2.10"),
		ev(5, "", "client", "put k1=v3 ok"),
		ev(6, "cp2", "client", "cas k1 v2->v3 unknown"),
		ev(7, "", "linearizability", "history not linearizable"),
		ev(8, "cp1", "error", "etcd start failed: boom"),
	}
	m := derive(log)
	if d := cmp.Diff([]string{"cp1", "cp2", "cp10"}, m.hosts); d != "" {
		t.Errorf("lanes (-want +got):\n%s", d)
	}
	var marks []string
	for _, mk := range m.marks {
		marks = append(marks, laneName(mk.host)+" "+mk.kind+" "+mk.what)
	}
	want := []string{
		"cp10 action reboot",
		"cp2 checkpoint after-member-add",
		"cp1 leader etcd leader changed its mind",
		"cluster client put k1=v3 ok",
		"cp2 client cas k1 v2->v3 unknown",
		"cluster linearizability history not linearizable",
		"cp1 error etcd start failed: boom",
	}
	if d := cmp.Diff(want, marks); d != "" {
		t.Errorf("marks (-want +got):\n%s", d)
	}
	if !m.start.Equal(t0) || !m.end.Equal(t0.Add(8*time.Second)) {
		t.Errorf("log from %v to %v, want t0 to t0+8s", m.start, m.end)
	}
}

func TestClientOutcome(t *testing.T) {
	for what, want := range map[string]string{
		"put k1=v3 ok":          "ok",
		"get k1 -> v3":          "ok",
		"cas k1 v2->v3 unknown": "unknown",
		"put k2=v1 failed":      "failed",
		"":                      "ok",
		"vip-2 put k1 v3: outcome unknown (context deadline exceeded)":                                          "unknown",
		"vip-1 get k1: failed (connection refused)":                                                             "failed",
		"vip workload: 40 operations (2 writes of unknown outcome kept, 0 failed without effect): linearizable": "ok",
		"vip workload: 40 operations (2 writes of unknown outcome kept): NOT linearizable":                      "failed",
		"vip workload: 40 operations: inconclusive (the checker's 60 s ran out)":                                "unknown",
		"get k1 -> (none)": "ok",
	} {
		if got := clientOutcome(what); got != want {
			t.Errorf("clientOutcome(%q) = %q, want %q", what, got, want)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"cp2", "cp10", true},
		{"cp10", "cp2", false},
		{"cp1", "cp1a", true},
		{"a", "b", true},
		{"cp02", "cp3", true},
	} {
		if got := naturalCompare(tc.a, tc.b) < 0; got != tc.less {
			t.Errorf("naturalCompare(%q, %q) < 0 = %v, want %v", tc.a, tc.b, got, tc.less)
		}
	}
}

// The page escapes every text and keeps one element per lane, span and mark
// (the browser test checks the DOM a browser builds from it).
func TestWriteEscapes(t *testing.T) {
	log := logOf(
		ev(1, "cp1", "fault", `</title></g><g class="mark mark-fault"><script>alert(1)</script>`),
		ev(2, "cp2", "crash", "host crashed (incarnation 1)"),
	)
	var b strings.Builder
	if err := Write(&b, log, Options{Title: "<b>t</b>", Failure: "x < y & \"z\"", Replay: "go test -run 'A|B'"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>", "<b>t</b>", `x < y`} {
		if strings.Contains(page, bad) {
			t.Errorf("page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{"&lt;/title&gt;", "x &lt; y &amp; &#34;z&#34;", "&lt;b&gt;t&lt;/b&gt;", `go test -run &#39;A|B&#39;`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if n := strings.Count(page, `<g class="mark mark-fault"`); n != 1 {
		t.Errorf("%d fault marks in the page, want 1", n)
	}
}

func TestWriteEmptyLog(t *testing.T) {
	var b strings.Builder
	if err := Write(&b, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "The event log is empty") || !strings.Contains(b.String(), `<g class="lane lane-cluster" data-host="">`) {
		t.Errorf("the page of an empty log does not say so, or lacks the cluster lane:\n%s", b.String())
	}
	// `stratum sim timeline` recognises a page it may replace by Marker in
	// its head.
	if i := strings.Index(b.String(), Marker); i < 0 || i+len(Marker) > MarkerWithin {
		t.Errorf("Marker at %d of the page, want it within its first %d bytes", i, MarkerWithin)
	}
}

// WriteFiles leaves the log and its page side by side under a name made
// safe, creating the directory, with no temporary file left.
func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "failures", "nested")
	log := logOf(ev(1, "cp2", "crash", "host crashed (incarnation 1)"))
	jsonPath, htmlPath, err := WriteFiles(dir, "TestSplitBrain/check 3", log, Options{Failure: "split leadership"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "TestSplitBrain_check_3.events.json"); jsonPath != want {
		t.Errorf("event log at %s, want %s", jsonPath, want)
	}
	if want := filepath.Join(dir, "TestSplitBrain_check_3.timeline.html"); htmlPath != want {
		t.Errorf("timeline at %s, want %s", htmlPath, want)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var back []sim.Event
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(log, back); d != "" {
		t.Errorf("the event log does not read back (-wrote +read):\n%s", d)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil || !strings.Contains(string(page), `<div class="failure">`) {
		t.Errorf("timeline page: %v; failure box present: %v", err, strings.Contains(string(page), `<div class="failure">`))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("%s holds %d entries, want the two files", dir, len(entries))
	}
	for _, base := range []string{"", ".", ".."} {
		if _, _, err := WriteFiles(dir, base, log, Options{}); err == nil {
			t.Errorf("WriteFiles with base %q: no error", base)
		}
	}
}
