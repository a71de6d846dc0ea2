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

	"golang.org/x/sys/unix"
)

// Dir implements Files over a directory of the real file system: the host's
// path "/etc/x" is Root+"/etc/x". Local uses Root "/"; a simulated host its own
// directory. Locks are flock(2) locks on files under the lock directory, so
// they exclude other processes as well as other Dirs in this one, and the
// kernel drops them when the holding process dies.
type Dir struct {
	Root string
	// LockDir is where lock files live, inside the host ("/run/stratum").
	LockDir string

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

func (d *Dir) ReadFile(p string) ([]byte, error) { return os.ReadFile(d.Path(p)) }

func (d *Dir) Stat(p string) (fs.FileInfo, error) { return os.Stat(d.Path(p)) }

func (d *Dir) MkdirAll(p string, perm fs.FileMode) error { return os.MkdirAll(d.Path(p), perm) }

func (d *Dir) ReadDir(p string) ([]fs.DirEntry, error) { return os.ReadDir(d.Path(p)) }

func (d *Dir) Remove(p string) error {
	err := os.Remove(d.Path(p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(d.Path(p)))
}

func (d *Dir) RemoveAll(p string) error {
	real := d.Path(p)
	if real == filepath.Clean(d.Root) || real == "/" {
		return fmt.Errorf("refusing to remove the host root %s", real)
	}
	if err := os.RemoveAll(real); err != nil {
		return err
	}
	return syncDir(filepath.Dir(real))
}

func (d *Dir) WriteFile(p string, data []byte, perm fs.FileMode) error {
	return d.WriteFrom(p, bytes.NewReader(data), perm)
}

// WriteFrom streams r into a temporary file beside p (io.Copy: a 32 KiB
// buffer, or copy_file_range when r is a file), fsyncs it and renames it
// over p, as WriteFile.
func (d *Dir) WriteFrom(p string, r io.Reader, perm fs.FileMode) error {
	real := d.Path(p)
	dir := filepath.Dir(real)
	// Parents are private: the directories a node writes hold keys and
	// kubeconfigs; Dirs makes the shared layout with its own modes first.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(real)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), real); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
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
