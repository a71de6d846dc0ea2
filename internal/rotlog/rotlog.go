// Package rotlog is a service's log file that rotates itself by size. A
// node's supervisor runs etcd and kube-apiserver for the machine's life; with
// their output appended to one file each, /var/log would fill in the end.
// A File keeps a log at most about MaxBytes, the Keep files before it beside
// it (name.log.1 the newest), and drops the oldest: (Keep+1)*MaxBytes in all.
//
// Rotation happens at a line end, so no line is split across two files: the
// file is written up to the first line end at or past the limit, and the
// rest starts the new one.
package rotlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Defaults for a service's log: 64 MiB, three old files kept (256 MiB per
// service at most).
const (
	DefaultMaxBytes = 64 << 20
	DefaultKeep     = 3
)

// File is an append-only log file at one path that rotates by size. It is
// safe for concurrent writers.
type File struct {
	path     string
	maxBytes int64
	keep     int

	mu   sync.Mutex
	f    *os.File
	size int64
	// atLineEnd: the last byte written ends a line (taken as so for a
	// file opened as it was).
	atLineEnd bool
	// movedAside: the file written is already renamed to name.log.1 and
	// a new name.log could not be opened yet.
	movedAside bool
	closed     bool
}

// Open opens path for appending, creating it (mode 0640) if need be. A file
// already at or past maxBytes rotates before the first write. maxBytes <= 0
// takes DefaultMaxBytes, keep <= 0 takes DefaultKeep.
func Open(path string, maxBytes int64, keep int) (*File, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if keep <= 0 {
		keep = DefaultKeep
	}
	l := &File{path: path, maxBytes: maxBytes, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// openFile is os.OpenFile; a test makes it fail.
var openFile = os.OpenFile

func (l *File) open() error {
	f, err := openFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if errors.Is(err, fs.ErrNotExist) {
		// Its directory removed from outside (a cleanup of /var/log):
		// made again, as the supervisor makes it at its start.
		if merr := os.MkdirAll(filepath.Dir(l.path), 0o750); merr == nil {
			f, err = openFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		}
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size, l.atLineEnd = f, fi.Size(), true
	return nil
}

// Path is the current log file's path.
func (l *File) Path() string { return l.path }

// Write appends p. A file at the size limit whose last line is complete
// rotates first; a write that would pass the limit is written up to the
// first line end at or past it, and the rest goes on the same way. A line
// still unfinished at twice the limit is cut there, so a log that never ends
// a line is bounded too. A failed rotation keeps appending to the current
// file and reports the error.
func (l *File) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, fs.ErrClosed
	}
	written := 0
	for {
		if l.size >= l.maxBytes && (l.atLineEnd || l.size >= 2*l.maxBytes) {
			if err := l.rotate(); err != nil {
				n, _ := l.append(p)
				return written + n, fmt.Errorf("rotate %s: %w", l.path, err)
			}
		}
		room := l.maxBytes - l.size
		if int64(len(p)) <= room {
			n, err := l.append(p)
			return written + n, err
		}
		cut := lineEndFrom(p, max(room-1, 0))
		if cut < 0 && l.size+int64(len(p)) < 2*l.maxBytes {
			n, err := l.append(p)
			return written + n, err
		}
		if limit := int(max(2*l.maxBytes-l.size, 0)); cut < 0 || cut > limit {
			cut = limit // a line unfinished at twice the limit
		}
		n, err := l.append(p[:cut])
		written += n
		if err != nil || cut == len(p) {
			// Nothing left: the next write rotates, so no rotation
			// leaves an empty log behind the last line (a service's
			// exit line, say).
			return written, err
		}
		p = p[cut:]
	}
}

// lineEndFrom is the index just past the first newline in p at or after
// from, or -1.
func lineEndFrom(p []byte, from int64) int {
	if from >= int64(len(p)) {
		return -1
	}
	i := bytes.IndexByte(p[from:], '\n')
	if i < 0 {
		return -1
	}
	return int(from) + i + 1
}

func (l *File) append(p []byte) (int, error) {
	n, err := l.f.Write(p)
	l.size += int64(n)
	if n > 0 {
		l.atLineEnd = p[n-1] == '\n'
	}
	return n, err
}

// rotate renames name.log.k to name.log.k+1 (the one at Keep is replaced,
// so dropped), name.log to name.log.1, and opens a new name.log. A file
// truncated from outside (logrotate's copytruncate) is not rotated again:
// its real size is read first. A file removed from outside (an rm of
// name.log, or of its directory), or replaced, is not name.log any more:
// nothing is moved aside, the old files stay as they are, and a new
// name.log is opened, so the removed one, whose space the disk gets back
// only once it is closed, grows no further than the limit.
func (l *File) rotate() error {
	cur, err := l.f.Stat()
	if err == nil && cur.Size() < l.maxBytes {
		l.size = cur.Size()
		return nil
	}
	if !l.movedAside && err == nil {
		if fi, serr := os.Stat(l.path); errors.Is(serr, fs.ErrNotExist) || serr == nil && !os.SameFile(fi, cur) {
			l.movedAside = true
		}
	}
	if !l.movedAside {
		for k := l.keep - 1; k >= 1; k-- {
			err := os.Rename(l.old(k), l.old(k+1))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := os.Rename(l.path, l.old(1)); err != nil {
			return err
		}
		l.movedAside = true
	}
	old := l.f
	if err := l.open(); err != nil {
		// The current file is name.log.1 now; it is written on rather
		// than the output lost, and the next rotation only retries this
		// open, so the old files are not shifted again.
		return err
	}
	l.movedAside = false
	old.Close()
	return nil
}

func (l *File) old(k int) string { return fmt.Sprintf("%s.%d", l.path, k) }

// Close closes the current file; later writes fail with fs.ErrClosed.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}
