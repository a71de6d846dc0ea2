package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestApplyReplacesTheOneOccurrence(t *testing.T) {
	m := mutant{Name: "m", File: "f.go", Old: "a < b", New: "a <= b"}
	got, err := m.apply("if a < b {\n}\n")
	if err != nil || got != "if a <= b {\n}\n" {
		t.Fatalf("apply = %q, %v", got, err)
	}
	for src, want := range map[string]string{
		"if a > b {}":             "no longer holds",
		"if a < b {} if a < b {}": "2 times",
	} {
		if _, err := m.apply(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("apply to %q: %v, want an error saying %q", src, err, want)
		}
	}
}

// TestEveryMutantAppliesToTheTree: each mutant's code is in its file once,
// and its replacement changes it; a mutant the code has moved away from
// fails here, in make test, not only when make mutate runs.
func TestEveryMutantAppliesToTheTree(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	for _, m := range mutants {
		if seen[m.Name] {
			t.Errorf("two mutants named %s", m.Name)
		}
		seen[m.Name] = true
		if m.Old == m.New || len(m.Tests) == 0 {
			t.Errorf("mutant %s changes nothing or names no tests", m.Name)
		}
		src, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("mutant %s: %v", m.Name, err)
			continue
		}
		if _, err := m.apply(string(src)); err != nil {
			t.Error(err)
		}
	}
}

func TestFailuresPicksWhatFailed(t *testing.T) {
	out := "=== RUN   TestX\n    x_test.go:12: got 1, want 2\n    x_test.go:9: [rapid] draw n: 3\n--- FAIL: TestX (0.00s)\nFAIL\nok  \tother\t0.1s\n"
	got := failures(out, 5)
	if strings.Join(got, "|") != "x_test.go:12: got 1, want 2|--- FAIL: TestX (0.00s)" {
		t.Fatalf("failures = %q", got)
	}
	build := "# stratum.dev/stratum/ha\nha/fence.go:131:2: declared and not used: acquired\nFAIL\tstratum.dev/stratum/ha [build failed]\n"
	if got := failures(build, 5); strings.Join(got, "|") != "ha/fence.go:131:2: declared and not used: acquired" {
		t.Fatalf("failures of a failed build = %q", got)
	}
}

func TestRanATest(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"ok  \tstratum.dev/stratum/ha\t12.3s\n", true},
		{"ok  \tstratum.dev/stratum/ha\t0.03s [no tests to run]\n", false},
		{"?   \tstratum.dev/stratum/internal/host/x\t[no test files]\nok  \tstratum.dev/stratum/internal/host\t1.2s\n", true},
		{"?   \tstratum.dev/stratum/internal/host/x\t[no test files]\n", false},
		{"", false},
	} {
		if got := ranATest(tc.out); got != tc.want {
			t.Errorf("ranATest(%q) = %t, want %t", tc.out, got, tc.want)
		}
	}
}
