package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/policy"
)

func NewPolicyCommand(streams cli.IO) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect and check agent-sandbox policies",
	}
	cmd.AddCommand(newPolicyCheckCommand(streams), newPolicyGetCommand(streams), newPolicyPlaceCommand(streams))
	return cmd
}

// policyCheckOptions are the inputs of `agent-sandbox policy check`.
type policyCheckOptions struct {
	Files []string
}

func newPolicyCheckCommand(streams cli.IO) *cobra.Command {
	o := &policyCheckOptions{}
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Decode, validate and compile policy files; print every problem with its path",
		Long: `Decode a policy strictly (an unknown field is an error), validate it and compile its CEL
admission rules. Every problem is printed with its path in the document, e.g.
  spec.admissionRules[3].expression: ...
Exits 1 if any file has a problem. The webhook and the MCP server refuse such a policy too.`,
		Example: "  agent-sandbox policy check policy/policy.yaml",
		Args:    cli.Usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Files = args
			return o.Run(streams)
		},
	}
}

// Run checks each file and reports on stdout (good) or stderr (problems).
func (o *policyCheckOptions) Run(streams cli.IO) error {
	failed := 0
	for _, f := range o.Files {
		c, err := policy.LoadFile(f)
		if err != nil {
			failed++
			var pe *policy.Error
			if errors.As(err, &pe) {
				fmt.Fprintf(streams.ErrOut, "%s: %d problem(s):\n", f, len(pe.Problems))
				for _, p := range pe.Problems {
					fmt.Fprintf(streams.ErrOut, "  %s\n", p)
				}
			} else {
				fmt.Fprintf(streams.ErrOut, "%s: %v\n", f, err)
			}
			continue
		}
		fmt.Fprintf(streams.Out, "%s: OK (policy %q version %s: %d tools, %d scopes, %d admission rules, %d plan rules, %d destructive signals)\n",
			f, c.Metadata.Name, c.Version, len(c.Spec.Tools), len(c.Spec.Scopes), len(c.Spec.AdmissionRules), len(c.Spec.PlanRules), len(c.Spec.DestructiveSignals))
	}
	if failed > 0 {
		return cli.ExitError{Code: 1}
	}
	return nil
}

// policyGetOptions are the inputs of `agent-sandbox policy get`.
type policyGetOptions struct {
	Field  string
	Policy string

	path    []pathStep
	streams cli.IO
}

func newPolicyGetCommand(streams cli.IO) *cobra.Command {
	o := &policyGetOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "get FIELD --policy FILE",
		Short: "Print one field of a policy, as the webhook and the MCP server read it",
		Long: `Load the policy (decoded strictly, defaulted, validated and compiled, as policy check does) and print the
value at FIELD, a path in the document written as policy check writes its problems:
  spec.sandbox.namespace, spec.tools[0].name, spec.approval.tokenTTL
A string prints as it is, without quotes; any other value prints as JSON. A policy with a problem, or a
FIELD that is not in it, prints nothing on stdout and fails. For scripts: never read a policy with awk.`,
		Example: `  agent-sandbox policy get spec.sandbox.namespace --policy policy/policy.yaml
  agent-sandbox policy get spec.clusterID --policy policy/policy.yaml`,
		Args: cli.Usage(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			o.Field = args[0]
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.Policy, "policy", "", "the policy file (required)")
	return cmd
}

// Validate parses FIELD and requires --policy.
func (o *policyGetOptions) Validate() error {
	var errs []error
	if o.Policy == "" {
		errs = append(errs, errors.New("--policy is required"))
	}
	path, err := parseFieldPath(o.Field)
	if err != nil {
		errs = append(errs, err)
	}
	o.path = path
	return errors.Join(errs...)
}

// Run loads the policy and prints the field.
func (o *policyGetOptions) Run() error {
	if _, err := os.Stat(o.Policy); errors.Is(err, fs.ErrNotExist) {
		return cli.NotFoundError{Err: fmt.Errorf("--policy %s: no such file", o.Policy)}
	}
	c, err := policy.LoadFile(o.Policy)
	if err != nil {
		return err
	}
	// The decoded policy through its JSON names: the same names and defaults everything else reads.
	data, err := json.Marshal(c.Policy)
	if err != nil {
		return fmt.Errorf("encode policy: %w", err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("encode policy: %w", err)
	}
	for i, step := range o.path {
		if v, err = step.in(v); err != nil {
			return fmt.Errorf("%s: %s: %w", o.Policy, formatFieldPath(o.path[:i+1]), err)
		}
	}
	if s, ok := v.(string); ok {
		fmt.Fprintln(o.streams.Out, s)
		return nil
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", o.Field, err)
	}
	fmt.Fprintln(o.streams.Out, string(out))
	return nil
}

// pathStep is one step of a field path: a member name, or an index into a list.
type pathStep struct {
	name  string
	index int // when name is ""
}

// in returns the value this step names inside v.
func (s pathStep) in(v any) (any, error) {
	if s.name != "" {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("not an object")
		}
		got, ok := m[s.name]
		if !ok {
			return nil, errors.New("no such field in the policy")
		}
		return got, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, errors.New("not a list")
	}
	if s.index >= len(l) {
		return nil, fmt.Errorf("the list has %d item(s)", len(l))
	}
	return l[s.index], nil
}

// parseFieldPath parses "spec.tools[0].name".
func parseFieldPath(field string) ([]pathStep, error) {
	bad := func(why string) ([]pathStep, error) {
		return nil, fmt.Errorf("FIELD %q: %s (write it as spec.sandbox.namespace or spec.tools[0].name)", field, why)
	}
	if field == "" {
		return bad("empty")
	}
	var steps []pathStep
	for _, part := range strings.Split(field, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name == "" {
			return bad("an empty name")
		}
		steps = append(steps, pathStep{name: name})
		for rest != "" {
			num, after, ok := strings.Cut(rest, "]")
			n, err := strconv.Atoi(num)
			if !ok || err != nil || n < 0 || (after != "" && after[0] != '[') {
				return bad("an index is [N], N a whole number")
			}
			steps = append(steps, pathStep{index: n})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return steps, nil
}

// formatFieldPath writes steps back as a field path.
func formatFieldPath(steps []pathStep) string {
	var b strings.Builder
	for i, s := range steps {
		switch {
		case s.name == "":
			fmt.Fprintf(&b, "[%d]", s.index)
		case i > 0:
			b.WriteString("." + s.name)
		default:
			b.WriteString(s.name)
		}
	}
	return b.String()
}

// policyPlaceOptions are the inputs of `agent-sandbox policy place`.
type policyPlaceOptions struct {
	Policy       string
	Out          string
	NodeSelector []string
	Tolerations  []string

	placement policy.Placement
	streams   cli.IO
}

func newPolicyPlaceCommand(streams cli.IO) *cobra.Command {
	o := &policyPlaceOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "place --policy FILE [--node-selector KEY=VALUE]... [--toleration KEY=VALUE:EFFECT]... [--out FILE]",
		Short: "Write a policy whose sandbox Pods run on the given nodes (spec.sandbox.nodeSelector and tolerations)",
		Long: `Write the policy FILE with spec.sandbox.nodeSelector and spec.sandbox.tolerations replaced by the ones given,
everything else (comments included) as it is; with neither flag, both are removed. Every sandbox Pod gets
them and admission requires them, exactly. A toleration is written as the taint it tolerates, as kubectl
taint writes one: KEY=VALUE:EFFECT tolerates that taint (operator Equal), KEY:EFFECT any value of KEY
(operator Exists). The result is checked as policy check does before it is written (--out, else stdout).
make up PROFILE=gke derives the local cluster's GKE-shaped policy from policy/policy.yaml with it.`,
		Example: `  agent-sandbox policy place --policy policy/policy.yaml --node-selector sandbox.gke.io/runtime=gvisor \
    --toleration sandbox.gke.io/runtime=gvisor:NoSchedule --out gke-policy.yaml`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.Policy, "policy", "", "the policy file to start from (required)")
	cmd.Flags().StringVar(&o.Out, "out", "", "where to write the policy (default: stdout)")
	cmd.Flags().StringArrayVar(&o.NodeSelector, "node-selector", nil, "KEY=VALUE: a node label every sandbox Pod selects (repeatable)")
	cmd.Flags().StringArrayVar(&o.Tolerations, "toleration", nil, "KEY=VALUE:EFFECT or KEY:EFFECT: a taint every sandbox Pod tolerates (repeatable)")
	return cmd
}

// Validate parses the flags into the placement.
func (o *policyPlaceOptions) Validate() error {
	var errs []error
	if o.Policy == "" {
		errs = append(errs, errors.New("--policy is required"))
	}
	for _, s := range o.NodeSelector {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("--node-selector %q: write it as KEY=VALUE", s))
			continue
		}
		if _, dup := o.placement.NodeSelector[k]; dup {
			errs = append(errs, fmt.Errorf("--node-selector %q: %s is given twice", s, k))
			continue
		}
		if o.placement.NodeSelector == nil {
			o.placement.NodeSelector = map[string]string{}
		}
		o.placement.NodeSelector[k] = v
	}
	for _, s := range o.Tolerations {
		t, err := parseToleration(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o.placement.Tolerations = append(o.placement.Tolerations, t)
	}
	return errors.Join(errs...)
}

// parseToleration reads a toleration written as the taint it tolerates (kubectl taint's KEY[=VALUE]:EFFECT).
func parseToleration(s string) (corev1.Toleration, error) {
	bad := func(why string) (corev1.Toleration, error) {
		return corev1.Toleration{}, fmt.Errorf("--toleration %q: %s (write it as KEY=VALUE:EFFECT or KEY:EFFECT)", s, why)
	}
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return bad("no effect")
	}
	switch e := corev1.TaintEffect(effect); e {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return bad("the effect is NoSchedule, PreferNoSchedule or NoExecute")
	}
	key, value, hasValue := strings.Cut(kv, "=")
	if key == "" {
		return bad("no key")
	}
	t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(effect)}
	if hasValue {
		t.Operator, t.Value = corev1.TolerationOpEqual, value
	}
	return t, nil
}

// Run writes the placed policy.
func (o *policyPlaceOptions) Run() error {
	data, err := os.ReadFile(o.Policy)
	if errors.Is(err, fs.ErrNotExist) {
		return cli.NotFoundError{Err: fmt.Errorf("--policy %s: no such file", o.Policy)}
	}
	if err != nil {
		return err
	}
	out, err := policy.WithPlacement(data, o.placement)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Policy, err)
	}
	if o.Out == "" {
		_, err := o.streams.Out.Write(out)
		return err
	}
	// Written whole or not at all: a reader never sees half a policy.
	tmp, err := os.CreateTemp(filepath.Dir(o.Out), ".policy-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), o.Out)
}
