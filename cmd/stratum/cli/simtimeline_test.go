package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"stratum.dev/stratum/sim"
	"stratum.dev/stratum/sim/timeline"
)

// writeEventLog writes events as `sim up --events` does and returns the path.
func writeEventLog(t *testing.T, dir, name string, events []sim.Event) string {
	t.Helper()
	data, err := json.MarshalIndent(events, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func sampleEvents() []sim.Event {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return []sim.Event{
		{Time: at(0), Kind: "action", What: "cluster of 3 hosts on 127.1.2.0/24, VIP 127.1.2.10, in /tmp/x"},
		{Time: at(100), Host: "cp1", Kind: "leader", What: "etcd leader is now cp1 (term 2)"},
		{Time: at(500), Kind: "fault", What: "partition {cp1} | {cp2,cp3}"},
		{Time: at(900), Host: "cp2", Kind: "crash", What: "host crashed (incarnation 1)"},
		{Time: at(1500), Kind: "heal", What: "network healed"},
		{Time: at(2000), Host: "cp3", Kind: "client", What: "put k1=v3 ok"},
	}
}

func TestSimTimelineWritesThePage(t *testing.T) {
	dir := t.TempDir()
	in := writeEventLog(t, dir, "run.json", sampleEvents())

	code, out, errOut := runCLI(t, Options{}, "sim", "timeline", in)
	page := filepath.Join(dir, "run.html")
	if code != ExitOK || !strings.Contains(out, page) {
		t.Fatalf("sim timeline %s: exit %d, stdout %q, stderr %q; want exit 0 naming %s", in, code, out, errOut, page)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatalf("the default output beside the log: %v", err)
	}
	for _, want := range []string{timeline.Marker, `<g class="lane" data-host="cp3">`, `class="span span-crashed" data-host="cp2"`, `class="mark mark-fault"`, "</svg>"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("%s lacks %q", page, want)
		}
	}
	if i := strings.Index(string(html), timeline.Marker); i < 0 || i+len(timeline.Marker) > timeline.MarkerWithin {
		t.Errorf("%s holds timeline.Marker at %d, not within its first %d bytes", page, i, timeline.MarkerWithin)
	}
	// Drawn again, the page it wrote is replaced.
	if code, _, errOut := runCLI(t, Options{}, "sim", "timeline", in, "--title", "again"); code != ExitOK {
		t.Fatalf("sim timeline %s over its own page: exit %d, stderr %q", in, code, errOut)
	}
	if html, _ := os.ReadFile(page); !strings.Contains(string(html), "<title>again</title>") {
		t.Errorf("%s was not replaced by the second run", page)
	}

	// An empty file (made by mktemp, say) is written over.
	other := filepath.Join(dir, "other.html")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, Options{}, "sim", "timeline", in, "-o", other,
		"--failure", "split leadership reported <healthy>", "--title", "TestSplitBrain check 3", "--replay", "go test ./scenarios -run '^TestSplitBrain$'")
	if code != ExitOK {
		t.Fatalf("sim timeline -o %s: exit %d, stderr %q", other, code, errOut)
	}
	html, err = os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`class="failure"`, "split leadership reported &lt;healthy&gt;", "TestSplitBrain check 3", "-run &#39;^TestSplitBrain$&#39;"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("%s lacks %q", other, want)
		}
	}

	code, out, errOut = runCLI(t, Options{}, "sim", "timeline", in, "-o", "-")
	if code != ExitOK || !strings.HasPrefix(out, "<!DOCTYPE html>") || !strings.HasSuffix(strings.TrimSpace(out), "</html>") {
		t.Fatalf("sim timeline -o -: exit %d, stderr %q, stdout starts %.40q", code, errOut, out)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("after four runs %s holds %d files, want run.json, run.html, other.html (no temporary file left)", dir, len(entries))
	}
}

// Every refusal names what failed, exits 3 (or 2 for usage) and writes
// nothing: an output file already there is left as it was.
func TestSimTimelineRefusesWritingNothing(t *testing.T) {
	dir := t.TempDir()
	good := writeEventLog(t, dir, "good.json", sampleEvents())
	empty := writeEventLog(t, dir, "empty.json", []sim.Event{})
	notLog := filepath.Join(dir, "not-a-log.json")
	if err := os.WriteFile(notLog, []byte(`{"time": "yesterday"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noTime := filepath.Join(dir, "no-time.json")
	if err := os.WriteFile(noTime, []byte(`[{"kind": "fault", "what": "x"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.html")
	if err := os.WriteFile(out, []byte("the page of an earlier run"), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty-file.json")
	if err := os.WriteFile(emptyFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.html")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	noDir := filepath.Join(dir, "no-dir")
	for _, tc := range []struct {
		name        string
		args        []string
		code        int
		says, lacks []string
	}{
		{"missing log", []string{missing, "-o", out}, ExitRefused, []string{missing, "does not exist", "nothing was written"}, nil},
		{"not a log", []string{notLog, "-o", out}, ExitRefused, []string{notLog + " is not a stratum event log (the JSON array of events `stratum sim up --events` writes): it holds a JSON object, not an array of events", "nothing was written"}, []string{"json:", "Go value", "sim.Event"}},
		{"empty file", []string{emptyFile, "-o", out}, ExitRefused, []string{emptyFile + " is not a stratum event log", "it is empty"}, []string{"json:", "unexpected end"}},
		{"output is another file", []string{good, "-o", out}, ExitRefused, []string{"-o " + out + ": the file exists and is not a timeline page `stratum sim timeline` wrote", "pass a new path, or remove the file", "nothing was written"}, nil},
		{"output is not a regular file", []string{good, "-o", fifo}, ExitRefused, []string{"-o " + fifo + ": it exists and is not a regular file"}, nil},
		{"empty log", []string{empty, "-o", out}, ExitRefused, []string{empty, "holds no events"}, nil},
		{"event without time", []string{noTime, "-o", out}, ExitRefused, []string{"event 1 of " + noTime, "no time"}, nil},
		{"output is the log", []string{good, "-o", good}, ExitRefused, []string{"is the event log itself"}, nil},
		{"output directory missing", []string{good, "-o", filepath.Join(noDir, "x.html")}, ExitRefused, []string{"-o " + filepath.Join(noDir, "x.html") + ": the directory " + noDir + " does not exist", "nothing was written"}, []string{".stratum-probe", "open "}},
		{"output is a directory", []string{good, "-o", dir}, ExitRefused, []string{"is a directory"}, nil},
		{"no log named", nil, ExitUsage, []string{"accepts 1 arg"}, nil},
		{"output named as a format", []string{good, "-o", "json"}, ExitUsage, []string{"-o json: here -o is the FILE the page is written to", "./json.html, or - for stdout"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadDir(dir)
			code, stdout, errOut := runCLI(t, Options{}, append([]string{"sim", "timeline"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errOut)
			}
			for _, s := range tc.says {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q does not say %q", errOut, s)
				}
			}
			for _, s := range tc.lacks {
				if strings.Contains(errOut, s) {
					t.Errorf("stderr %q says %q", errOut, s)
				}
			}
			if stdout != "" {
				t.Errorf("refused, yet printed %q", stdout)
			}
			after, _ := os.ReadDir(dir)
			if len(after) != len(before) {
				t.Errorf("%s held %d entries before and %d after: a refusal wrote something", dir, len(before), len(after))
			}
			if b, _ := os.ReadFile(out); string(b) != "the page of an earlier run" {
				t.Errorf("%s was overwritten: %.60q", out, b)
			}
			if b, _ := os.ReadFile(good); !strings.HasPrefix(string(b), "[") {
				t.Errorf("%s, the input, was changed", good)
			}
		})
	}
}
