package main

import (
	"fmt"
	"regexp"
	"strings"
)

// mutant is one planted bug: in File (relative to the repository's root),
// the one occurrence of Old replaced by New; Tests are the go test argument
// lists that should catch it, run in order until one fails.
type mutant struct {
	Name     string
	File     string
	Old, New string
	Tests    [][]string
}

// apply returns src with m's one occurrence of Old replaced by New. An Old
// that occurs nowhere, or more than once, is an error: the code it was
// written against has changed, and the mutant must be rewritten, not
// silently skipped or applied somewhere else.
func (m mutant) apply(src string) (string, error) {
	switch n := strings.Count(src, m.Old); n {
	case 1:
		return strings.Replace(src, m.Old, m.New, 1), nil
	case 0:
		return "", fmt.Errorf("mutant %s: %s no longer holds the code it replaces (%q): rewrite it against the current code", m.Name, m.File, firstLine(m.Old))
	default:
		return "", fmt.Errorf("mutant %s: %s holds the code it replaces %d times (%q): make it unique", m.Name, m.File, n, firstLine(m.Old))
	}
}

// compileError matches a compiler's error line: file.go:line:column: message.
var compileError = regexp.MustCompile(`^[^\s:]+\.go:\d+:\d+: `)

// failures picks the lines of a go test run's output that say what failed:
// the failing tests and the lines of test output that came with them, or
// the compiler's errors.
func failures(out string, max int) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.Contains(t, "_test.go:") && !strings.Contains(t, "[rapid] draw") || compileError.MatchString(t) {
			got = append(got, t)
			if len(got) == max {
				break
			}
		}
	}
	return got
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
