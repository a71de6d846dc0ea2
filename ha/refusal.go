package ha

import (
	"context"
	"errors"
	"fmt"
)

// ErrRefused matches an error an operation returned before it changed
// anything: the node and the cluster are as they were, and the error's text
// says why and what to do. Callers branch on it through IsRefusal: the CLI
// exits with its own code (3) for a refusal, apart from a failure midway
// (1), after which a re-run of the same command resumes.
var ErrRefused = errors.New("refused; nothing was changed")

// IsRefusal reports whether err is a refusal (ErrRefused) that no later
// Midway mark overrides: a refusal of a step an operation ran after it had
// already changed something does not make the operation's outcome one.
func IsRefusal(err error) bool {
	return errors.Is(err, ErrRefused) && !errors.Is(err, errMidway)
}

// Midway marks err as a failure after the operation changed something,
// whatever refusal of a later step it wraps. A nil err stays nil.
func Midway(err error) error {
	if err == nil {
		return nil
	}
	return midway{err}
}

var errMidway = errors.New("failed midway")

type midway struct{ err error }

func (m midway) Error() string        { return m.err.Error() }
func (m midway) Unwrap() error        { return m.err }
func (m midway) Is(target error) bool { return target == errMidway }

// Refusal marks err as a refusal (errors.Is(err, ErrRefused)), keeping its
// text and its own chain. A nil err stays nil.
func Refusal(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

type refusal struct{ err error }

func (r refusal) Error() string        { return r.err.Error() }
func (r refusal) Unwrap() error        { return r.err }
func (r refusal) Is(target error) bool { return target == ErrRefused }

// refuseUntilChanged marks *errp a refusal unless *changed, and Midway once
// it is. An operation with a named error result defers it and sets changed
// right before its first mutation, so every return above that point is a
// refusal, and none below it, without each one saying so.
func refuseUntilChanged(errp *error, changed *bool) {
	switch {
	case *errp == nil:
	case *changed:
		*errp = Midway(*errp)
	default:
		*errp = Refusal(*errp)
	}
}

// stoppedRefusal is err, the refusal of op's checks, said as the stop it is
// when ctx has ended (Ctrl-C): questions cut short read as members that do
// not answer, and their advice (--force, wait for a recovery) is not what a
// stop calls for. A refusal met before ctx ended is err unchanged.
func stoppedRefusal(ctx context.Context, op string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("%s stopped before it changed anything: %w; nothing was changed: re-run the same command", op, context.Cause(ctx))
}
