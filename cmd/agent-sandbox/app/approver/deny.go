package approver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

type denyOptions struct {
	storeFlags
	ID     string
	Reason string
	by     string
	now    func() time.Time
}

func (o *denyOptions) Complete(args []string) error {
	o.ID = args[0]
	if o.by == "" {
		o.by = currentUser()
	}
	return o.complete()
}

func (o *denyOptions) Validate() error {
	if len(o.Reason) > 1024 {
		return errors.New("--reason is longer than 1024 bytes")
	}
	return nil
}

func (o *denyOptions) Run(ctx context.Context, streams cli.IO) error {
	store, err := o.openExisting(o.now)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Deny(ctx, o.ID, o.by, o.Reason); err != nil {
		return err
	}
	_, err = fmt.Fprintf(streams.Out, "denied %s\n", o.ID)
	return err
}

// currentUser names who denied a request, for the record.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

func NewDenyCommand(streams cli.IO) *cobra.Command {
	o := &denyOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "deny ID",
		Short: "Deny a pending request",
		Long: `Deny refuses a pending request for good. Unlike approve it needs no terminal and no key: refusing
is always safe, so scripts may do it.`,
		Args:              cli.Usage(cobra.ExactArgs(1)),
		ValidArgsFunction: completeRequestIDs(approval.StatusPending),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return o.Run(cmd.Context(), streams)
		},
	}
	o.bind(cmd)
	cmd.Flags().StringVar(&o.Reason, "reason", "", "why the request is denied (recorded with it)")
	return cmd
}
