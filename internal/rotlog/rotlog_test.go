package rotlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// files reads the log and its old files, oldest first, and fails if a
// numbered file beyond keep exists or the numbering has a gap.
func files(t interface {
	Helper()
	Fatalf(string, ...any)
}, path string, keep int) (names []string, data [][]byte) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(entries) > keep+1 {
		t.Fatalf("%d files beside the log, want at most %d", len(entries), keep+1)
	}
	for k := len(entries) - 1; k >= 0; k-- {
		name := path
		if k > 0 {
			name = fmt.Sprintf("%s.%d", path, k)
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("the log's files are %d, but: %v", len(entries), err)
		}
		names, data = append(names, name), append(data, b)
	}
	return names, data
}

// TestRotationKeepsWholeLinesInOrder: whatever the writes, the files (oldest
// first) read as the end of what was written, each old file ends a line,
// none is much past the limit, and at most keep old files remain.
func TestRotationKeepsWholeLinesInOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		dir, err := os.MkdirTemp(t.TempDir(), "log")
		if err != nil {
			rt.Fatalf("%v", err)
		}
		path := filepath.Join(dir, "etcd.log")
		maxBytes := rapid.Int64Range(16, 200).Draw(rt, "maxBytes")
		keep := rapid.IntRange(1, 4).Draw(rt, "keep")
		l, err := Open(path, maxBytes, keep)
		if err != nil {
			rt.Fatalf("%v", err)
		}
		defer l.Close()
		var all bytes.Buffer
		longestLine := 0
		for i, n := 0, rapid.IntRange(1, 60).Draw(rt, "writes"); i < n; i++ {
			// A write is a few whole or partial lines, as a child's
			// output reaches its pipe.
			line := rapid.IntRange(0, 80).Draw(rt, "len")
			p := []byte(strings.Repeat(string(rune('a'+i%26)), line))
			if rapid.Bool().Draw(rt, "newline") {
				p = append(p, '\n')
			}
			if rapid.Bool().Draw(rt, "another line") {
				p = append(p, []byte(fmt.Sprintf("line %d\n", i))...)
			}
			if _, err := l.Write(p); err != nil {
				rt.Fatalf("write %d: %v", i, err)
			}
			all.Write(p)
			for _, ln := range bytes.SplitAfter(all.Bytes(), []byte("\n")) {
				longestLine = max(longestLine, len(ln))
			}
		}
		names, data := files(rt, path, keep)
		joined := bytes.Join(data, nil)
		if !bytes.HasSuffix(all.Bytes(), joined) {
			rt.Fatalf("the files (%v) do not read as the end of what was written", names)
		}
		for i, b := range data[:len(data)-1] {
			if len(b) > 0 && b[len(b)-1] != '\n' && int64(len(b)) < 2*maxBytes {
				rt.Fatalf("%s does not end a line: %q", names[i], b)
			}
			// Up to the first line end past the limit, and never
			// past twice the limit.
			if limit := min(maxBytes+int64(longestLine), 2*maxBytes); int64(len(b)) > limit {
				rt.Fatalf("%s holds %d bytes, past %d", names[i], len(b), limit)
			}
		}
		if cur := data[len(data)-1]; int64(len(cur)) > min(maxBytes+int64(longestLine), 2*maxBytes) {
			rt.Fatalf("the current log holds %d bytes with a limit of %d", len(cur), maxBytes)
		}
	})
}

func TestALogAlreadyPastTheLimitRotatesBeforeTheNextWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-apiserver.log")
	if err := os.WriteFile(path, []byte(strings.Repeat("old\n", 10)), 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, 20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write([]byte("end of a line\nnew\n")); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if string(old) != strings.Repeat("old\n", 10) || string(cur) != "end of a line\nnew\n" {
		t.Fatalf("after the write: .1 = %q, current = %q", old, cur)
	}
}

// TestATruncatedLogIsNotRotated: a log truncated from outside (logrotate's
// copytruncate) starts over in place; it is not rotated as if it were full.
func TestATruncatedLogIsNotRotated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.log")
	l, err := Open(path, 30, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write([]byte("twenty-five bytes, a line\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write([]byte("ten bytes\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a truncated log was rotated: %v", err)
	}
	if cur, _ := os.ReadFile(path); string(cur) != "ten bytes\n" {
		t.Fatalf("current = %q", cur)
	}
}

// TestAFailedRotationLosesNothing: when the new log cannot be opened, the
// output goes on into the file already moved aside, the error is reported,
// and the next rotation only retries the open, not shifting the old files
// once more.
func TestAFailedRotationLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.log")
	l, err := Open(path, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write([]byte("first file\nsecond\n")); err != nil { // rotates: .1 = first file
		t.Fatal(err)
	}
	failing := errors.New("no space left on device")
	openFile = func(string, int, os.FileMode) (*os.File, error) { return nil, failing }
	defer func() { openFile = os.OpenFile }()
	if _, err := l.Write([]byte("third line\nfourth\n")); !errors.Is(err, failing) {
		t.Fatalf("write across a failed rotation: %v", err)
	}
	if _, err := l.Write([]byte("fifth line\nsixth\n")); !errors.Is(err, failing) {
		t.Fatalf("write across a second failed rotation: %v", err)
	}
	openFile = os.OpenFile
	if _, err := l.Write([]byte("seventh line\neighth\n")); err != nil {
		t.Fatal(err)
	}
	_, data := files(t, path, 3)
	got := string(bytes.Join(data, nil))
	if want := "first file\nsecond\nthird line\nfourth\nfifth line\nsixth\nseventh line\neighth\n"; got != want {
		t.Fatalf("the log's files read %q, want %q", got, want)
	}
	// .3 the first file, .2 the one written across the failures, .1 and
	// the current one after the open worked again: had a failed rotation
	// shifted the old files, the first would have been dropped.
	if len(data) != 4 || string(data[0]) != "first file\n" {
		t.Fatalf("the log's files are %q, want the first file kept as .3 and three after it", data)
	}
}

// TestALogRemovedFromOutsideIsOpenedAgain: a log removed from outside (an
// rm of it, or of its directory) is written on until the limit, then a new
// one is opened at its path, the old files left as they were: the removed
// file, whose space comes back only once it is closed, does not grow past
// the limit, and no rotation shifts the old files again and again.
func TestALogRemovedFromOutsideIsOpenedAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stratum")
	path := filepath.Join(dir, "etcd.log")
	l, err := Open(path, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write([]byte("first file\nsecond\n")); err != nil { // .1 = first file
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"third\n", "fourth\n"} { // third into the removed file, at the limit
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatalf("write after the log was removed: %v", err)
		}
	}
	if old, _ := os.ReadFile(path + ".1"); string(old) != "first file\n" {
		t.Fatalf("%s.1 holds %q after the log was removed, want the first file as it was", path, old)
	}
	if _, err := os.Stat(path + ".2"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old files were shifted after the log was removed: %v", err)
	}
	if cur, _ := os.ReadFile(path); string(cur) != "fourth\n" {
		t.Fatalf("the log opened again holds %q, want the lines after the removed one", cur)
	}
	// Its directory removed: made again at the next rotation.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"fifth\n", "sixth\n"} { // fifth into the removed directory's file
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatalf("write after the log's directory was removed: %v", err)
		}
	}
	if cur, _ := os.ReadFile(path); string(cur) != "sixth\n" {
		t.Fatalf("the log opened again in a new directory holds %q, want the line after the removed one", cur)
	}
}
