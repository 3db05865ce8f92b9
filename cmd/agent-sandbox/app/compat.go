package app

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
)

// The names below are the ones mcp.go and kubeconfig.go used before the commands were split
// by trust role; they forward to package cli. Once those files say cli.IO, cli.Usage, cli.UsageError,
// cli.NotFoundError, cli.LogLevelHelp and cli.ParseLogLevel themselves, this file goes.

// IO is cli.IO.
type IO = cli.IO

// usage is cli.Usage.
func usage(check cobra.PositionalArgs) cobra.PositionalArgs { return cli.Usage(check) }

// usageError is a cli.UsageError: it unwraps to one, so cli.Main exits 2 for it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return cli.UsageError{Err: e.err} }

// notFoundError is a cli.NotFoundError: it unwraps to one, so cli.Main exits 3 for it.
type notFoundError struct{ err error }

func (e notFoundError) Error() string { return e.err.Error() }
func (e notFoundError) Unwrap() error { return cli.NotFoundError{Err: e.err} }

// logLevelHelp is cli.LogLevelHelp.
const logLevelHelp = cli.LogLevelHelp

// parseLogLevel is cli.ParseLogLevel.
func parseLogLevel(s string) (slog.Level, error) { return cli.ParseLogLevel(s) }
