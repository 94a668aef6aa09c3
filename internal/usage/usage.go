// Package usage marks an error as the caller's: a flag, an argument or an
// input file that cannot be used. hone exits 2 on such an error (cmd/hone's
// usageError is this type), so a package that carries out a command (its
// cli.go) says "bad input" where it finds it, without knowing of exit codes.
package usage

import "fmt"

// Error is an error caused by the caller's input.
type Error struct{ Err error }

func (e Error) Error() string { return e.Err.Error() }
func (e Error) Unwrap() error { return e.Err }

// Errorf formats a usage error, as fmt.Errorf does (%w wraps).
func Errorf(format string, args ...any) error {
	return Error{fmt.Errorf(format, args...)}
}

// Wrap marks err as a usage error; nil stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return Error{err}
}

// Failed is a completed check whose verdict is negative (a regression,
// an SLO violation, no eligible config): hone exits 1. A package that
// carries out a command returns it where the check fails.
type Failed struct{ Msg string }

func (e Failed) Error() string { return e.Msg }

// Interrupted is a command stopped by SIGINT or SIGTERM (its context
// cancelled) before it finished: hone exits 130.
type Interrupted struct{ Err error }

func (e Interrupted) Error() string { return e.Err.Error() }
func (e Interrupted) Unwrap() error { return e.Err }
