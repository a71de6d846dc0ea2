package faultfs

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Rule is the common Injector: it fails the Nth operation matching its
// kinds and path prefix, once, or every matching operation from the Nth on
// (Sticky). Use it by pointer; it counts.
type Rule struct {
	// Ops are the kinds it matches; none matches every kind.
	Ops []Op
	// Prefix is a prefix of the paths inside the host it matches
	// ("/etc/stratum/pki/"); "" matches every path.
	Prefix string
	// Nth is the first matching operation that fails, counted from 1; 0 is 1.
	Nth int
	// Sticky fails every matching operation from the Nth on; otherwise only
	// the Nth fails.
	Sticky bool
	// Errno is what it fails with (syscall.EIO, syscall.ENOSPC).
	Errno syscall.Errno

	mu    sync.Mutex
	seen  int
	fired int
}

// Match counts op on path when it matches the rule, and reports whether it
// is one the rule fails.
func (r *Rule) Match(op Op, path string) bool {
	if len(r.Ops) > 0 && !slices.Contains(r.Ops, op) || !strings.HasPrefix(path, r.Prefix) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	nth := max(r.Nth, 1)
	if r.seen == nth || r.Sticky && r.seen > nth {
		r.fired++
		return true
	}
	return false
}

// MaybeFail is Errno for an operation the rule fails, 0 otherwise.
func (r *Rule) MaybeFail(op Op, path string) syscall.Errno {
	if r.Match(op, path) {
		return r.Errno
	}
	return 0
}

// Seen is how many operations matched so far.
func (r *Rule) Seen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// Fired is how many operations the rule failed so far.
func (r *Rule) Fired() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fired
}

// String describes the rule: "fsync under /etc/stratum/pki/, match 3 and
// every later one: input/output error".
func (r *Rule) String() string {
	ops := "any operation"
	if len(r.Ops) > 0 {
		names := make([]string, len(r.Ops))
		for i, op := range r.Ops {
			names[i] = string(op)
		}
		ops = strings.Join(names, "|")
	}
	where := "anywhere"
	if r.Prefix != "" {
		where = "under " + r.Prefix
	}
	which := fmt.Sprintf("match %d", max(r.Nth, 1))
	if r.Sticky {
		which += " and every later one"
	}
	return fmt.Sprintf("%s %s, %s: %v", ops, where, which, r.Errno)
}
