package approver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
	"github.com/agent-sandbox/agent-sandbox/internal/atomicfile"
)

// maxKeySetFile bounds what a key set file may hold: a JWK set of a few hundred approvers is a few tens of
// kilobytes.
const maxKeySetFile = 1 << 20

// privateKeyHint is what a person who sent a private key must do instead.
const privateKeyHint = "send only the .jwks.json that agent-sandbox keygen writes beside the key"

func NewKeysCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Check, list and merge JWK sets of approver public keys",
		Long: `A JWK set of approver public keys is what the webhook trusts (the chart's approvers.jwks) and what
agent-sandbox keygen writes beside a new key (KEY.jwks.json). These commands read such sets exactly as the
webhook does: every key an Ed25519 public key with a valid, unique key ID, no private member anywhere.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeysCheckCommand(streams), newKeysIDsCommand(streams), newKeysMergeCommand(streams))
	return cmd
}

// loadKeySetFile reads one JWK set of approver public keys. A missing file is a cli.NotFoundError; a private key
// in it says so first, with what to send instead.
func loadKeySetFile(path string) (*approval.KeySet, error) {
	data, err := readBounded(path, maxKeySetFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, cli.NotFoundError{Err: fmt.Errorf("%s: no such file", path)}
		}
		return nil, err
	}
	set, err := approval.LoadKeySet(data)
	switch {
	case errors.Is(err, approval.ErrPrivateKeyMaterial):
		return nil, fmt.Errorf("%s holds a PRIVATE key (%w); %s", path, err, privateKeyHint)
	case err != nil:
		return nil, fmt.Errorf("%s is not a JWK set of approver public keys: %w", path, err)
	}
	return set, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// keysCheckOptions are the inputs of `agent-sandbox keys check`.
type keysCheckOptions struct {
	Files   []string
	streams cli.IO
}

func newKeysCheckCommand(streams cli.IO) *cobra.Command {
	o := &keysCheckOptions{streams: streams}
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Check that each file is a JWK set of approver public keys; print its key IDs",
		Long: `Check that each FILE is a JWK set the webhook would trust: at least one key, every key an Ed25519
("kty":"OKP","crv":"Ed25519") public key with a valid key ID ("kid"), no key ID twice, and no private member
("d" and the like) anywhere. Prints "FILE: N key(s): ID, ID" for a good file, the problem for a bad one,
and exits 1 if any file is bad (3 if the only problem is a missing file).`,
		Example: "  agent-sandbox keys check approvers.jwks.json",
		Args:    cli.Usage(cobra.MinimumNArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			o.Files = args
			return o.Run()
		},
	}
}

// Run checks every file and reports each one.
func (o *keysCheckOptions) Run() error {
	var missing, bad int
	for _, f := range o.Files {
		set, err := loadKeySetFile(f)
		if err != nil {
			if errors.As(err, new(cli.NotFoundError)) {
				missing++
			} else {
				bad++
			}
			fmt.Fprintf(o.streams.ErrOut, "error: %v\n", err)
			continue
		}
		fmt.Fprintf(o.streams.Out, "%s: %d key(s): %s\n", f, set.Len(), strings.Join(set.KeyIDs(), ", "))
	}
	switch {
	case bad > 0:
		return cli.ExitError{Code: 1}
	case missing > 0:
		return cli.ExitError{Code: cli.ExitNotFound}
	}
	return nil
}

// keysIDsOptions are the inputs of `agent-sandbox keys ids`.
type keysIDsOptions struct {
	File      string
	Separator string
	streams   cli.IO
}

func newKeysIDsCommand(streams cli.IO) *cobra.Command {
	o := &keysIDsOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "ids FILE",
		Short: "Print the key IDs of a JWK set of approver public keys, sorted",
		Long: `Print the key IDs of FILE, a JWK set of approver public keys, in sorted order: one a line, or joined by
--separator. FILE is checked as keys check does first; a bad file prints nothing on stdout.`,
		Example: `  agent-sandbox keys ids approvers.jwks.json
  agent-sandbox keys ids --separator ', ' approvers.jwks.json`,
		Args: cli.Usage(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			o.File = args[0]
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.Separator, "separator", "\n", "what to print between two key IDs")
	return cmd
}

// Run prints the key IDs.
func (o *keysIDsOptions) Run() error {
	set, err := loadKeySetFile(o.File)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.streams.Out, strings.Join(set.KeyIDs(), o.Separator))
	return nil
}

// keysMergeOptions are the inputs of `agent-sandbox keys merge`.
type keysMergeOptions struct {
	Files   []string
	Out     string
	streams cli.IO
}

func newKeysMergeCommand(streams cli.IO) *cobra.Command {
	o := &keysMergeOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "merge FILE...",
		Short: "Merge JWK sets of approver public keys into one",
		Long: `Merge the JWK sets FILE... into one set that trusts every key of each, and print it (or write it to --out,
atomically, mode 0644). Each FILE is checked as keys check does. The same key in two files counts once; one
key ID naming two different keys is refused, since the webhook could not tell which approver signed.`,
		Example: `  agent-sandbox keys merge alice.jwks.json bob.jwks.json > approvers.jwks.json
  agent-sandbox keys merge --out approvers.jwks.json alice.jwks.json bob.jwks.json`,
		Args: cli.Usage(cobra.MinimumNArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			o.Files = args
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "write the merged set to this file instead of stdout")
	return cmd
}

// Validate refuses an --out that is also an input: the merge would replace a set it has to read.
func (o *keysMergeOptions) Validate() error {
	if o.Out == "" {
		return nil
	}
	out := filepath.Clean(o.Out)
	for _, f := range o.Files {
		if filepath.Clean(f) == out {
			return fmt.Errorf("--out %s is also an input", o.Out)
		}
	}
	return nil
}

// Run merges the sets and writes the result.
func (o *keysMergeOptions) Run() error {
	var merged approval.KeySet
	for _, f := range o.Files {
		set, err := loadKeySetFile(f)
		if err != nil {
			return err
		}
		if err := merged.Merge(set); err != nil {
			return fmt.Errorf("merge %s: %w", f, err)
		}
	}
	out, err := merged.Encode()
	if err != nil {
		return err
	}
	if o.Out == "" {
		_, err := o.streams.Out.Write(out)
		return err
	}
	return atomicfile.Write(o.Out, out, 0o644)
}
