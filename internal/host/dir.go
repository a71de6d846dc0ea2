package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dir implements Files over a directory of the real file system: the host's
// path "/etc/x" is Root+"/etc/x". Local uses Root "/"; a simulated host its own
// directory. Its file calls go through FS (the operating system's when nil),
// so the simulator can put a fault layer under this same code. Locks are
// flock(2) locks on files under the lock directory, so they exclude other
// processes as well as other Dirs in this one, and the kernel drops them when
// the holding process dies.
type Dir struct {
	Root string
	// LockDir is where lock files live, inside the host ("/run/stratum").
	LockDir string
	// FS is what the file calls go through; nil is OS.
	FS FS

	mu    sync.Mutex
	locks map[string]*os.File
}

// Path maps a host path to the real file system path under Root.
func (d *Dir) Path(p string) string {
	if !filepath.IsAbs(p) {
		p = "/" + p
	}
	return filepath.Join(d.Root, filepath.Clean(p))
}

func (d *Dir) fs() FS {
	if d.FS == nil {
		return OS
	}
	return d.FS
}

func (d *Dir) ReadFile(p string) ([]byte, error) { return d.fs().ReadFile(d.Path(p)) }

func (d *Dir) Open(p string) (io.ReadCloser, error) { return d.fs().Open(d.Path(p)) }

func (d *Dir) Stat(p string) (fs.FileInfo, error) { return d.fs().Stat(d.Path(p)) }

func (d *Dir) ReadDir(p string) ([]fs.DirEntry, error) { return d.fs().ReadDir(d.Path(p)) }

// MkdirAll creates the directory and its missing parents, durably: see
// mkdirAll.
func (d *Dir) MkdirAll(p string, perm fs.FileMode) error {
	if err := d.mkdirAll(d.Path(p), perm); err != nil {
		return fmt.Errorf("create directory %s: %w", p, err)
	}
	return nil
}

// mkdirAll is os.MkdirAll on real paths, durable: the parent of each
// directory it creates is fsync'd before the next step, so a file later
// made durable inside it is not lost with a directory entry that never
// reached the disk. A directory whose parent cannot be fsync'd is removed
// again, so a retry creates and syncs it afresh instead of finding it and
// building on an entry a crash may lose.
func (d *Dir) mkdirAll(real string, perm fs.FileMode) error {
	fsys := d.fs()
	fi, err := fsys.Stat(real)
	if err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: real, Err: syscall.ENOTDIR}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(real)
	if parent != real {
		if err := d.mkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := fsys.Mkdir(real, perm); err != nil {
		// Made meanwhile by someone else, who syncs its parent.
		if fi, serr := fsys.Stat(real); serr == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	if err := fsys.SyncDir(parent); err != nil {
		_ = fsys.Remove(real)
		return err
	}
	return nil
}

// Remove removes a file or an empty directory and fsyncs its directory. A
// missing path is not an error, but the directory is still fsync'd: an
// earlier removal whose fsync failed is made durable by the retry.
func (d *Dir) Remove(p string) error {
	real := d.Path(p)
	if err := d.fs().Remove(real); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if err := d.syncParent(real); err != nil {
		return fmt.Errorf("remove %s: fsync its directory (the removal may not survive a crash): %w", p, err)
	}
	return nil
}

// RemoveAll removes p and everything under it, then fsyncs its directory.
func (d *Dir) RemoveAll(p string) error {
	real := d.Path(p)
	if real == filepath.Clean(d.Root) || real == "/" {
		return fmt.Errorf("refusing to remove the host root %s", real)
	}
	if err := d.fs().RemoveAll(real); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if err := d.syncParent(real); err != nil {
		return fmt.Errorf("remove %s: fsync its directory (the removal may not survive a crash): %w", p, err)
	}
	return nil
}

// syncParent fsyncs the directory holding real. When that directory is gone
// it fsyncs the nearest ancestor within the root that exists: the directory
// may have been removed by an earlier call whose fsync failed, and the
// ancestor's entry for it is what a crash could still bring back, with real
// inside it.
func (d *Dir) syncParent(real string) error {
	root := filepath.Clean(d.Root)
	dir := filepath.Dir(real)
	for {
		err := d.fs().SyncDir(dir)
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		up := filepath.Dir(dir)
		if dir == root || up == dir {
			return nil
		}
		dir = up
	}
}

func (d *Dir) WriteFile(p string, data []byte, perm fs.FileMode) error {
	return d.WriteFrom(p, bytes.NewReader(data), perm)
}

// WriteFrom streams r into a temporary file beside p (io.Copy: a 32 KiB
// buffer, or copy_file_range when r is a file), fsyncs it, renames it over p
// and fsyncs the directory, as WriteFile. A failure before the rename
// removes the temporary file and leaves p as it was; its error names the
// step that failed.
func (d *Dir) WriteFrom(p string, r io.Reader, perm fs.FileMode) error {
	fsys := d.fs()
	real := d.Path(p)
	dir := filepath.Dir(real)
	// Parents are private: the directories a node writes hold keys and
	// kubeconfigs; Dirs makes the shared layout with its own modes first.
	if err := d.mkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: create its directory: %w", p, err)
	}
	tmp, err := fsys.CreateTemp(dir, "."+filepath.Base(real)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: create a temporary file: %w", p, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = fsys.Remove(tmp.Name())
		}
	}()
	step := func(what string, err error) error {
		tmp.Close()
		return fmt.Errorf("write %s: %s: %w; it was left as it was", p, what, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return step("set the temporary file's mode", err)
	}
	if _, err := io.Copy(tmp, r); err != nil {
		return step("copy the contents into a temporary file", err)
	}
	if err := tmp.Sync(); err != nil {
		return step("fsync the temporary file", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: close the temporary file: %w; it was left as it was", p, err)
	}
	if err := fsys.Rename(tmp.Name(), real); err != nil {
		return fmt.Errorf("write %s: rename the temporary file over it: %w; it was left as it was", p, err)
	}
	renamed = true
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: fsync its directory (the new contents are in place but may not survive a crash): %w", p, err)
	}
	return nil
}

func (d *Dir) Lock(name, holder string) (func() error, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("bad lock name %q", name)
	}
	lockDir := d.LockDir
	if lockDir == "" {
		lockDir = "/run/stratum"
	}
	real := d.Path(filepath.Join(lockDir, name+".lock"))
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	f, err := os.OpenFile(real, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who, _ := os.ReadFile(real)
			return nil, &LockedError{Lock: name, Holder: strings.TrimSpace(string(who))}
		}
		return nil, fmt.Errorf("lock %q: %w", name, err)
	}
	// The holder is written after the lock is ours, so a reader that saw
	// EWOULDBLOCK reads the name of whoever holds it (or, in a tiny window, "").
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(holder+"\n"), 0)
	}
	d.mu.Lock()
	if d.locks == nil {
		d.locks = map[string]*os.File{}
	}
	d.locks[name] = f
	d.mu.Unlock()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			d.mu.Lock()
			if d.locks[name] == f {
				delete(d.locks, name)
			}
			d.mu.Unlock()
			_ = f.Truncate(0)
			err = f.Close() // closing the descriptor drops the flock
		})
		return err
	}, nil
}

// DropLocks releases every lock this Dir holds without its holder's consent:
// what the kernel does when the holding process dies. The simulator calls it on
// a crash.
func (d *Dir) DropLocks() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, f := range d.locks {
		f.Close()
		delete(d.locks, name)
	}
}
