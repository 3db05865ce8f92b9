package approver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/approval"
)

type keygenOptions struct {
	Out            string
	PublicOut      string
	KeyID          string
	Force          bool
	PassphraseFile string
}

func (o *keygenOptions) Complete() error {
	if o.Out == "" {
		p, err := approval.DefaultKeyPath()
		if err != nil {
			return err
		}
		o.Out = p
	}
	if o.PublicOut == "" {
		o.PublicOut = o.Out + ".jwks.json"
	}
	return nil
}

func (o *keygenOptions) Validate() error {
	var errs []error
	if o.KeyID != "" {
		if err := approval.ValidateKeyID(o.KeyID); err != nil {
			errs = append(errs, cli.UsageError{Err: fmt.Errorf("--key-id: %w", err)})
		}
	}
	if o.Out == o.PublicOut {
		errs = append(errs, cli.UsageError{Err: errors.New("--out and --public-out must differ")})
	}
	if !o.Force {
		for _, p := range []string{o.Out, o.PublicOut} {
			if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("%s already exists; use --force to replace it", p))
			}
		}
	}
	return errors.Join(errs...)
}

// passphrase reads the new key's passphrase from --passphrase-file, or twice from the terminal.
func (o *keygenOptions) passphrase(ctx context.Context, streams cli.IO) ([]byte, error) {
	var pass []byte
	if o.PassphraseFile != "" {
		data, err := os.ReadFile(o.PassphraseFile)
		if err != nil {
			return nil, fmt.Errorf("--passphrase-file: %w", err)
		}
		s := strings.TrimSuffix(string(data), "\n")
		pass = []byte(strings.TrimSuffix(s, "\r"))
		clear(data)
	} else {
		tty, ok := terminalOf(streams.In)
		if !ok {
			return nil, errors.New("keygen needs an interactive terminal to ask for the passphrase (or --passphrase-file FILE, for automation)")
		}
		first, err := readPassphrase(ctx, tty, streams.Out, "Passphrase for the new approver key: ")
		if err != nil {
			return nil, err
		}
		again, err := readPassphrase(ctx, tty, streams.Out, "Same passphrase again: ")
		if err != nil {
			return nil, err
		}
		same := string(first) == string(again)
		clear(again)
		if !same {
			clear(first)
			return nil, errors.New("the passphrases differ")
		}
		pass = first
	}
	if utf8.RuneCount(pass) < approval.MinPassphraseLength {
		clear(pass)
		return nil, fmt.Errorf("the passphrase must be at least %d characters", approval.MinPassphraseLength)
	}
	return pass, nil
}

func (o *keygenOptions) Run(ctx context.Context, streams cli.IO) error {
	pass, err := o.passphrase(ctx, streams)
	if err != nil {
		return err
	}
	defer clear(pass)
	key, err := approval.GenerateKey(o.KeyID)
	if err != nil {
		return err
	}
	if err := key.WriteFile(o.Out, pass, approval.WithOverwrite(o.Force)); err != nil {
		return err
	}
	if err := key.KeySet().WritePublicFile(o.PublicOut, o.Force); err != nil {
		return err
	}
	_, err = fmt.Fprintf(streams.Out, `generated approver key %s
  private key: %s (encrypted with your passphrase, mode 0600; it never needs to leave this machine)
  public key:  %s (a JWK set)

Give the public key to the admission webhook: it accepts approvals signed by the keys in its approver
JWK set. A JWK set is just {"keys": [...]}, so to trust several approvers put all their keys in one array:
  jq -s '{keys: map(.keys[])}' alice.jwks.json bob.jwks.json > approvers.jwks.json
`, key.KeyID(), o.Out, o.PublicOut)
	return err
}

func NewKeygenCommand(streams cli.IO) *cobra.Command {
	o := &keygenOptions{}
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create an approver key pair (ed25519, private key encrypted with a passphrase)",
		Long: `Keygen creates the key a person approves requests with. The private key is encrypted with a
passphrase (age, scrypt) and written with mode 0600; the public key is written as a JWK set for the
admission webhook.

The passphrase is asked twice on the terminal. For automation (provisioning a key non-interactively),
--passphrase-file reads it from a file instead; this is allowed because creating a key approves nothing:
approving still needs a person at a terminal who knows the passphrase.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context(), streams)
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "private key file (default $"+approval.EnvApproverKey+", else ~/.config/agent-sandbox/approver.key)")
	cmd.Flags().StringVar(&o.PublicOut, "public-out", "", "public key JWK set file (default the private key file + \".jwks.json\")")
	cmd.Flags().StringVar(&o.KeyID, "key-id", "", "key ID (default \"approver-\" and 16 hex digits of the public key's SHA-256)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "replace existing key files")
	cmd.Flags().StringVar(&o.PassphraseFile, "passphrase-file", "", "read the passphrase from this file instead of the terminal (for automation)")
	return cmd
}
