package quietlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestARepeatIsSaidOnce: ten identical failures give one Warn line, a
// different one a second, and the first again after Reset a third.
func TestARepeatIsSaidOnce(t *testing.T) {
	var buf bytes.Buffer
	r := &Repeats{Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for range 10 {
		r.Warn("operator pass", errors.New("forbidden"))
	}
	if !r.Repeating() {
		t.Error("ten identical failures: not repeating")
	}
	r.Warn("operator pass", errors.New("conflict"))
	if r.Repeating() {
		t.Error("a different failure: repeating")
	}
	r.Reset()
	r.Warn("operator pass", errors.New("conflict"))
	if got := strings.Count(buf.String(), "level=WARN"); got != 3 {
		t.Fatalf("%d Warn lines, want 3 (the first, the different one, the one after Reset):\n%s", got, buf.String())
	}
}
