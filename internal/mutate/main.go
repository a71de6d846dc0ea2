// Command mutate measures what stratum's tests catch: it plants each bug of
// its list (mutants.go) in a scratch git worktree of the tree as it stands
// (uncommitted changes and untracked files included), runs the tests meant
// to catch it in order, and stops at the first that fails. A mutant no test caught
// "survived": some check of stratum's is not tested, and a test that builds
// the state it guards belongs beside it (docs/faults.md, "What the
// properties catch"). `make mutate` runs it; it exits 1 when a mutant
// survived, no longer applies, or its test command ran no test.
//
// Usage: go run ./internal/mutate [-run REGEXP] [-logs DIR] [-list]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	run := flag.String("run", "", "run only the mutants whose names match this regular expression")
	logs := flag.String("logs", "", "write each mutant's test output to DIR/<name>.log (default: a new directory under $TMPDIR)")
	list := flag.Bool("list", false, "list the mutants and the tests meant to catch each, and exit")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), `Usage: go run ./internal/mutate [-run REGEXP] [-logs DIR] [-list]

Plants each bug of internal/mutate's list in a scratch git worktree of the
tree as it stands (uncommitted changes and untracked files included), runs
the tests meant to catch it, and exits 1 naming any mutant none caught, one
that no longer applies or compiles, or one whose test command ran no test.

Examples:
  # Every mutant (about 35 minutes on 2 cores), as make mutate runs it
  go run ./internal/mutate

  # Only the snapshot-restore mutants, their test output kept in ./mutate-logs
  go run ./internal/mutate -run restore -logs mutate-logs

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	picked, err := pick(*run)
	if err != nil {
		fail(err)
	}
	if *list {
		for _, m := range picked {
			fmt.Printf("%s (%s)\n", m.Name, m.File)
			for _, t := range m.Tests {
				fmt.Printf("  %s\n", goTestLine(t))
			}
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	survived, err := sweep(ctx, picked, *logs)
	if err != nil {
		fail(err)
	}
	if survived > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "mutate: %v\n", err)
	os.Exit(1)
}

// pick is the mutants whose names match expr (all of them for "").
func pick(expr string) ([]mutant, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("-run %q: %w", expr, err)
	}
	var out []mutant
	for _, m := range mutants {
		if re.MatchString(m.Name) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-run %q matches no mutant (-list names them)", expr)
	}
	return out, nil
}

// sweep runs every mutant in one scratch worktree, reset between mutants,
// and returns how many survived or no longer apply. The worktree is removed
// at the end, interrupted or not.
func sweep(ctx context.Context, ms []mutant, logs string) (bad int, err error) {
	root, err := gitOut(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return 0, fmt.Errorf("find the repository: %w", err)
	}
	// The tree as it stands: a stash commit holds uncommitted changes to
	// tracked files; with none, HEAD. Untracked files git does not ignore
	// (a new test not yet committed) are copied in after each reset.
	untracked, err := gitOut(ctx, root, "ls-files", "--others", "--exclude-standard")
	if err != nil {
		return 0, fmt.Errorf("list the untracked files: %w", err)
	}
	base, err := gitOut(ctx, root, "stash", "create")
	if err != nil {
		return 0, fmt.Errorf("record the working tree: %w", err)
	}
	if base == "" {
		if base, err = gitOut(ctx, root, "rev-parse", "HEAD"); err != nil {
			return 0, err
		}
	}
	if logs == "" {
		if logs, err = os.MkdirTemp("", "stratum-mutate-logs-"); err != nil {
			return 0, err
		}
	} else if err := os.MkdirAll(logs, 0o755); err != nil {
		return 0, err
	}
	scratch, err := os.MkdirTemp("", "stratum-mutate-")
	if err != nil {
		return 0, err
	}
	wt := filepath.Join(scratch, "tree")
	if _, err := gitOut(ctx, root, "worktree", "add", "--detach", wt, base); err != nil {
		os.RemoveAll(scratch)
		return 0, fmt.Errorf("make the scratch worktree: %w", err)
	}
	defer func() {
		_, _ = gitOut(context.Background(), root, "worktree", "remove", "--force", wt)
		_, _ = gitOut(context.Background(), root, "worktree", "prune")
		os.RemoveAll(scratch)
	}()
	fmt.Printf("mutate: %d mutants on %.12s in %s; test output in %s\n", len(ms), base, wt, logs)
	var survivors []string
	for i, m := range ms {
		verdict, err := runMutant(ctx, scratchTree{root, wt, strings.Fields(untracked)}, m, filepath.Join(logs, m.Name+".log"))
		if ctx.Err() != nil {
			return 0, fmt.Errorf("interrupted at mutant %s", m.Name)
		}
		if err != nil {
			verdict = "DOES NOT APPLY: " + err.Error()
		}
		if err != nil || strings.HasPrefix(verdict, "SURVIVED") {
			survivors = append(survivors, m.Name)
		}
		fmt.Printf("[%d/%d] %s: %s\n", i+1, len(ms), m.Name, verdict)
	}
	fmt.Printf("mutate: %d of %d caught", len(ms)-len(survivors), len(ms))
	if len(survivors) > 0 {
		fmt.Printf("; not caught or not applied: %s", strings.Join(survivors, ", "))
	}
	fmt.Println()
	return len(survivors), nil
}

// scratchTree is the worktree the mutants run in (wt), and the untracked
// files of the repository at root it gets a copy of.
type scratchTree struct {
	root, wt  string
	untracked []string
}

// reset puts the worktree back to the tree as it stood: tracked files as
// recorded, nothing else, then the untracked files copied in.
func (s scratchTree) reset(ctx context.Context) error {
	if _, err := gitOut(ctx, s.wt, "checkout", "-q", "--", "."); err != nil {
		return err
	}
	if _, err := gitOut(ctx, s.wt, "clean", "-q", "-f", "-d"); err != nil {
		return err
	}
	for _, f := range s.untracked {
		b, err := os.ReadFile(filepath.Join(s.root, f))
		if err != nil {
			return fmt.Errorf("copy the untracked %s: %w", f, err)
		}
		dst := filepath.Join(s.wt, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runMutant resets the worktree, plants m and runs its tests in order, and
// returns its verdict: which test command caught it and what it said, or
// that none did. An error means the mutant could not be planted, or one of
// its test commands ran no test (a test it names is gone or renamed): such
// a mutant would otherwise pass as a survivor that nothing was asked to
// catch.
func runMutant(ctx context.Context, tree scratchTree, m mutant, logPath string) (string, error) {
	if err := tree.reset(ctx); err != nil {
		return "", err
	}
	wt := tree.wt
	path := filepath.Join(wt, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	mutated, err := m.apply(string(src))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return "", err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer log.Close()
	began := time.Now()
	for _, args := range m.Tests {
		cmdline := goTestLine(args)
		out, err := goTest(ctx, wt, args)
		fmt.Fprintf(log, "$ %s\n%s\n", cmdline, out)
		if err == nil {
			if !ranATest(out) {
				return "", fmt.Errorf("%s ran no test: a test its -run names is gone, renamed or not in the tree", cmdline)
			}
			continue
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			return "", fmt.Errorf("run %s: %w", cmdline, err)
		}
		if strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") {
			return "", fmt.Errorf("the planted code does not compile (%s): %s", cmdline, strings.Join(failures(out, 3), " | "))
		}
		said := failures(out, 3)
		return fmt.Sprintf("caught in %s by %s: %s", time.Since(began).Round(time.Second), cmdline, strings.Join(said, " | ")), nil
	}
	return fmt.Sprintf("SURVIVED %d test runs (%s)", len(m.Tests), time.Since(began).Round(time.Second)), nil
}

// ranATest reports whether a passing go test run's output shows a package
// that ran a test: an "ok" line not marked "[no tests to run]" or "[no test
// files]".
func ranATest(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ok ") && !strings.Contains(l, "[no test") {
			return true
		}
	}
	return false
}

// goTestArgs is the go command line a mutant's test arguments run as:
// uncached, one package at a time.
func goTestArgs(args []string) []string {
	return append([]string{"test", "-count=1", "-p", "1"}, args...)
}

// goTestLine is goTestArgs as printed.
func goTestLine(args []string) string {
	return "go " + strings.Join(goTestArgs(args), " ")
}

// goTest runs go test in dir in a process group of its own, so an
// interrupt stops the test binaries and the servers they started too.
func goTest(ctx context.Context, dir string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", goTestArgs(args)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}
