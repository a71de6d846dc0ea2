// Package faultfs is a fault layer under a host.Dir, in the manner of
// Pebble's vfs/errorfs: it wraps a host.FS, asks an Injector before each
// operation whether it fails (with EIO, ENOSPC, ...), and keeps lazyfs's
// model of what is durable, so a simulated crash can lose what was written
// but never made durable.
//
// The model: a file's contents are durable once the file was fsync'd; a
// name created, renamed or removed in a directory (a file, a directory made
// by Mkdir) is durable once that directory was fsync'd. Until then the layer
// keeps the name's last durable state: absent, or what the name held, saved
// aside in a trash directory (a hard link to a replaced file, a removed file
// or tree moved there) so nothing is copied. LoseUnsynced rolls every name
// back to that state and truncates every file written through the layer to
// what its last fsync covered (files are only appended to, so that is a
// prefix). Only names changed since their directory's last fsync, and files
// written since their last fsync, are tracked: a correct writer leaves
// nothing.
//
// The layer works on a real file system: the inner FS must be host.OS (or a
// layer over it), and the trash directory must be on the same file system as
// the host's root, outside it. Files written by other means (an etcd
// member's own data) are outside the model and always durable.
package faultfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"stratum.dev/stratum/internal/host"
)

// Op is a kind of file-system operation the layer can fail.
type Op string

// The operations, in the order host.Dir's WriteFrom makes them (mkdir only
// for a missing directory), then the removals.
const (
	OpMkdir     Op = "mkdir"
	OpCreate    Op = "create"
	OpWrite     Op = "write"
	OpSync      Op = "fsync"
	OpRename    Op = "rename"
	OpSyncDir   Op = "fsync-dir"
	OpRemove    Op = "remove"
	OpRemoveAll Op = "remove-all"
)

// Ops are every operation kind the layer can fail. Reads, Chmod and Close
// are passed through and never fail by injection.
var Ops = []Op{OpMkdir, OpCreate, OpWrite, OpSync, OpRename, OpSyncDir, OpRemove, OpRemoveAll}

// ErrInjected matches every error the layer injects.
var ErrInjected = errors.New("injected disk fault")

// ErrDirRename matches a rename of a directory, which the model does not
// cover (host.Dir renames only files).
var ErrDirRename = errors.New("faultfs: renaming a directory is not modelled")

// Error is an injected fault: the operation, the path inside the host it
// was asked of, and the errno it failed with. errors.Is matches both the
// errno and ErrInjected.
type Error struct {
	Op    Op
	Path  string
	Errno syscall.Errno
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %v (%v)", e.Op, e.Path, e.Errno, ErrInjected)
}

// Unwrap makes errors.Is match the errno and ErrInjected.
func (e *Error) Unwrap() []error { return []error{e.Errno, ErrInjected} }

// Injector decides, for each operation on a path inside the host, whether
// it fails: it returns the errno to fail with, or 0 to let it through. It is
// called before the operation, outside the layer's lock, so it may block or
// crash the host (the simulator's crash at a disk operation does both).
type Injector interface {
	MaybeFail(op Op, path string) syscall.Errno
}

// InjectorFunc is a function as an Injector.
type InjectorFunc func(op Op, path string) syscall.Errno

// MaybeFail calls f.
func (f InjectorFunc) MaybeFail(op Op, path string) syscall.Errno { return f(op, path) }

// Config is where a layer works.
type Config struct {
	// Root is the host's root directory (host.Dir's Root): faults and
	// Unsynced name paths inside the host.
	Root string
	// Trash is a directory on Root's file system, outside Root, that keeps
	// what a crash would bring back until it is durably gone. It is created
	// when first needed and emptied by LoseUnsynced.
	Trash string
	// OnFault, when set, hears every injected fault as it is returned.
	OnFault func(*Error)
}

// FS is the fault layer: a host.FS over another.
type FS struct {
	inner host.FS
	cfg   Config

	injMu sync.Mutex
	inj   Injector

	mu sync.Mutex
	// was is the durable state of each name changed since its directory's
	// last fsync, keyed by real path. The children of a tree saved to the
	// trash are re-keyed under its trash path.
	was map[string]entry
	// nodes are the files created through the layer that are open or hold
	// unsynced data, by real path (a saved one under its trash path).
	nodes map[string]*node
	seq   int
}

var _ host.FS = (*FS)(nil)

// entry is a name's durable state: absent (saved == ""), or what is saved
// at the trash path saved.
type entry struct{ saved string }

// node is a file written through the layer: how long it is, how much of it
// its last fsync covered, and whether a handle on it is open.
type node struct {
	size, synced int64
	open         bool
}

func (n *node) dirty() bool { return n.synced < n.size }

// New is a fault layer over inner with nothing armed.
func New(inner host.FS, cfg Config) *FS {
	cfg.Root = filepath.Clean(cfg.Root)
	cfg.Trash = filepath.Clean(cfg.Trash)
	return &FS{inner: inner, cfg: cfg, was: map[string]entry{}, nodes: map[string]*node{}}
}

// Arm makes inj decide every later operation, replacing what was armed.
func (f *FS) Arm(inj Injector) {
	f.injMu.Lock()
	f.inj = inj
	f.injMu.Unlock()
}

// Disarm lets every later operation through.
func (f *FS) Disarm() { f.Arm(nil) }

// hostPath is real as a path inside the host.
func (f *FS) hostPath(real string) string {
	rel, err := filepath.Rel(f.cfg.Root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return real
	}
	return filepath.Join("/", rel)
}

// fail asks the injector about op on real.
func (f *FS) fail(op Op, real string) error {
	f.injMu.Lock()
	inj := f.inj
	f.injMu.Unlock()
	if inj == nil {
		return nil
	}
	p := f.hostPath(real)
	errno := inj.MaybeFail(op, p)
	if errno == 0 {
		return nil
	}
	e := &Error{Op: op, Path: p, Errno: errno}
	if f.cfg.OnFault != nil {
		f.cfg.OnFault(e)
	}
	return e
}

func (f *FS) ReadFile(name string) ([]byte, error)       { return f.inner.ReadFile(name) }
func (f *FS) Open(name string) (io.ReadCloser, error)    { return f.inner.Open(name) }
func (f *FS) Stat(name string) (fs.FileInfo, error)      { return f.inner.Stat(name) }
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) { return f.inner.ReadDir(name) }

// Mkdir creates a directory, durable once its parent is fsync'd.
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	if err := f.fail(OpMkdir, name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.inner.Mkdir(name, perm); err != nil {
		return err
	}
	f.noteCreated(name)
	return nil
}

// CreateTemp creates a file, durable once its directory is fsync'd, whose
// contents are durable once it is fsync'd. A fault names the pattern.
func (f *FS) CreateTemp(dir, pattern string) (host.File, error) {
	if err := f.fail(OpCreate, filepath.Join(dir, pattern)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	file, err := f.inner.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	f.noteCreated(file.Name())
	n := &node{open: true}
	f.nodes[file.Name()] = n
	return &tempFile{File: file, fs: f, node: n}, nil
}

// noteCreated records that name was absent until now, unless its durable
// state is already recorded.
func (f *FS) noteCreated(name string) {
	if _, ok := f.was[name]; !ok {
		f.was[name] = entry{}
	}
}

// Rename renames a file over another; both names are durable once their
// directories are fsync'd. A fault names the new path.
func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.fail(OpRename, newpath); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fi, err := os.Lstat(oldpath); err == nil && fi.IsDir() {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: ErrDirRename}
	}
	if fi, err := os.Lstat(newpath); err == nil && fi.IsDir() {
		// A file cannot replace a directory: let the rename refuse.
		return f.inner.Rename(oldpath, newpath)
	}
	if err := f.saveOnce(newpath); err != nil {
		return err
	}
	if err := f.saveOnce(oldpath); err != nil {
		return err
	}
	if err := f.inner.Rename(oldpath, newpath); err != nil {
		// Nothing moved: what was saved is what the names hold, so the
		// entries stay true.
		return err
	}
	delete(f.nodes, newpath) // the replaced file's node, if any, is its save's
	if n, ok := f.nodes[oldpath]; ok {
		f.nodes[newpath] = n
		delete(f.nodes, oldpath)
	}
	return nil
}

// Remove removes a file or an empty directory, durably once its directory
// is fsync'd.
func (f *FS) Remove(name string) error {
	if err := f.fail(OpRemove, name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Lstat(name)
	if err != nil {
		return f.inner.Remove(name) // its own error for a missing path
	}
	if fi.IsDir() {
		d, err := os.Open(name)
		if err != nil {
			return err
		}
		names, err := d.Readdirnames(1)
		d.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if len(names) > 0 {
			return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
		}
	}
	return f.removeTracked(name, func() error { return f.inner.Remove(name) })
}

// RemoveAll removes a tree, durably once its directory is fsync'd.
func (f *FS) RemoveAll(name string) error {
	if err := f.fail(OpRemoveAll, name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	return f.removeTracked(name, func() error { return f.inner.RemoveAll(name) })
}

// removeTracked removes name: with its durable state already recorded, for
// real (remove); otherwise by moving it to the trash, which saves it.
func (f *FS) removeTracked(name string, remove func() error) error {
	if _, ok := f.was[name]; !ok {
		return f.save(name, true)
	}
	if err := remove(); err != nil {
		return err
	}
	// What was under the name is gone for good; its durable state is
	// the recorded one.
	drop(f.nodes, name)
	f.forgetUnder(name)
	return nil
}

// save records the durable state of name, which has none recorded, before
// a change destroys it: absent, or what it holds saved to the trash, moved
// there (move: this removes it, and the nodes and entries under it follow)
// or hard-linked (a file about to be replaced or renamed away: its node is
// then at both paths).
func (f *FS) save(name string, move bool) error {
	if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
		f.was[name] = entry{}
		return nil
	} else if err != nil {
		return err
	}
	if err := os.MkdirAll(f.cfg.Trash, 0o700); err != nil {
		return fmt.Errorf("faultfs: trash: %w", err)
	}
	f.seq++
	saved := filepath.Join(f.cfg.Trash, strconv.Itoa(f.seq))
	if move {
		if err := os.Rename(name, saved); err != nil {
			return fmt.Errorf("faultfs: save %s: %w", name, err)
		}
		rekey(f.nodes, name, saved)
		rekeyUnder(f.was, name, saved)
	} else {
		if err := os.Link(name, saved); err != nil {
			return fmt.Errorf("faultfs: save %s: %w", name, err)
		}
		if n, ok := f.nodes[name]; ok {
			f.nodes[saved] = n
		}
	}
	f.was[name] = entry{saved: saved}
	return nil
}

// saveOnce is save for a name whose durable state may be recorded already.
func (f *FS) saveOnce(name string) error {
	if _, ok := f.was[name]; ok {
		return nil
	}
	return f.save(name, false)
}

// SyncDir fsyncs a directory and makes its changed entries durable: their
// saved states are dropped.
func (f *FS) SyncDir(name string) error {
	if err := f.fail(OpSyncDir, name); err != nil {
		return err
	}
	if err := f.inner.SyncDir(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = filepath.Clean(name)
	for p, e := range f.was {
		if filepath.Dir(p) == name {
			delete(f.was, p)
			f.discard(e)
		}
	}
	return nil
}

// discard drops a saved state that can no longer come back, with the
// entries and nodes kept under it.
func (f *FS) discard(e entry) {
	if e.saved == "" {
		return
	}
	os.RemoveAll(e.saved)
	drop(f.nodes, e.saved)
	f.forgetUnder(e.saved)
}

// forgetUnder discards the entries strictly under p.
func (f *FS) forgetUnder(p string) {
	for k, e := range f.was {
		if under(k, p) {
			delete(f.was, k)
			f.discard(e)
		}
	}
}

// Unsynced lists the paths inside the host that a crash now would change,
// sorted: names whose change is not durable, and files with unsynced data.
func (f *FS) Unsynced() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for p, e := range f.was {
		if under(p, f.cfg.Trash) {
			continue
		}
		if _, err := os.Lstat(p); e.saved == "" && errors.Is(err, fs.ErrNotExist) {
			continue // absent, and absent after a crash
		}
		out = append(out, f.hostPath(p))
	}
	for p, n := range f.nodes {
		if n.dirty() && !under(p, f.cfg.Trash) {
			out = append(out, f.hostPath(p))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// LoseUnsynced is what a crash does to the host's files under the model:
// every name whose directory was not fsync'd since it changed goes back to
// its durable state, and every file written through the layer keeps only
// what its last fsync covered. The tracking starts afresh. Call it with the
// host's writers stopped (the simulator crashes the host first); a handle
// opened before it writes outside the model.
func (f *FS) LoseUnsynced() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, p := range f.tops("") {
		e := f.was[p]
		delete(f.was, p)
		errs = append(errs, f.restore(p, e))
	}
	for p, n := range f.nodes {
		if n.dirty() && !under(p, f.cfg.Trash) {
			if err := os.Truncate(p, n.synced); err != nil {
				errs = append(errs, fmt.Errorf("faultfs: lose unsynced data of %s: %w", f.hostPath(p), err))
			}
		}
	}
	f.was = map[string]entry{}
	f.nodes = map[string]*node{}
	if err := os.RemoveAll(f.cfg.Trash); err != nil {
		errs = append(errs, fmt.Errorf("faultfs: empty the trash: %w", err))
	}
	return errors.Join(errs...)
}

// tops are the recorded names under within ("" for all, the trash's
// excluded) with no recorded ancestor below within, sorted.
func (f *FS) tops(within string) []string {
	var out []string
	for p := range f.was {
		if within == "" && under(p, f.cfg.Trash) || within != "" && !under(p, within) {
			continue
		}
		top := true
		for d := filepath.Dir(p); d != within && d != filepath.Dir(d); d = filepath.Dir(d) {
			if _, ok := f.was[d]; ok {
				top = false
				break
			}
		}
		if top {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// restore puts name back to its durable state e: what is there now goes,
// the saved state comes back, with the entries saved under it restored in
// turn.
func (f *FS) restore(name string, e entry) error {
	if err := os.RemoveAll(name); err != nil {
		return fmt.Errorf("faultfs: roll back %s: %w", f.hostPath(name), err)
	}
	drop(f.nodes, name)
	for k := range f.was {
		if under(k, name) {
			delete(f.was, k) // about what was there now
		}
	}
	if e.saved == "" {
		return nil
	}
	if err := os.Rename(e.saved, name); err != nil {
		return fmt.Errorf("faultfs: roll back %s: %w", f.hostPath(name), err)
	}
	rekey(f.nodes, e.saved, name)
	rekeyUnder(f.was, e.saved, name)
	var errs []error
	for _, p := range f.tops(name) {
		e := f.was[p]
		delete(f.was, p)
		errs = append(errs, f.restore(p, e))
	}
	return errors.Join(errs...)
}

// tempFile is a file created through the layer.
type tempFile struct {
	host.File
	fs   *FS
	node *node
}

// Write appends p. An injected fault writes the first half of p before it
// fails, as a disk that fills up part-way does.
func (t *tempFile) Write(p []byte) (int, error) {
	if ferr := t.fs.fail(OpWrite, t.Name()); ferr != nil {
		n, err := t.write(p[:len(p)/2])
		if err != nil {
			return n, err
		}
		return n, ferr
	}
	return t.write(p)
}

func (t *tempFile) write(p []byte) (int, error) {
	t.fs.mu.Lock()
	defer t.fs.mu.Unlock()
	n, err := t.File.Write(p)
	t.node.size += int64(n)
	return n, err
}

// Sync fsyncs the file: what it holds is durable.
func (t *tempFile) Sync() error {
	if err := t.fs.fail(OpSync, t.Name()); err != nil {
		return err
	}
	t.fs.mu.Lock()
	defer t.fs.mu.Unlock()
	if err := t.File.Sync(); err != nil {
		return err
	}
	t.node.synced = t.node.size
	t.fs.untrack(t.node)
	return nil
}

func (t *tempFile) Close() error {
	t.fs.mu.Lock()
	defer t.fs.mu.Unlock()
	t.node.open = false
	t.fs.untrack(t.node)
	return t.File.Close()
}

// untrack stops tracking a node that is closed and has nothing unsynced.
func (f *FS) untrack(n *node) {
	if n.open || n.dirty() {
		return
	}
	for p, m := range f.nodes {
		if m == n {
			delete(f.nodes, p)
		}
	}
}

// under reports whether p is strictly under dir.
func under(p, dir string) bool {
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// rekey moves the key from, and every key under it, to to.
func rekey[V any](m map[string]V, from, to string) {
	if v, ok := m[from]; ok {
		delete(m, from)
		m[to] = v
	}
	rekeyUnder(m, from, to)
}

// rekeyUnder moves every key strictly under from to the same place under to.
func rekeyUnder[V any](m map[string]V, from, to string) {
	for k, v := range m {
		if under(k, from) {
			delete(m, k)
			m[to+k[len(from):]] = v
		}
	}
}

// drop deletes the key p and every key under it.
func drop[V any](m map[string]V, p string) {
	delete(m, p)
	for k := range m {
		if under(k, p) {
			delete(m, k)
		}
	}
}
