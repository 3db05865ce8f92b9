package sandboxed

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/agent-sandbox/agent-sandbox/cmd/agent-sandbox/app/cli"
	"github.com/agent-sandbox/agent-sandbox/internal/toolrun"
)

// This file holds the read tools' entry points: each reads one kind of thing in one namespace with the
// per-action read-only credential, and writes one bounded JSON result.

// runReadOptions are the flags every read tool has.
type runReadOptions struct {
	Namespace string
	clusterTool
}

func (o *runReadOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Namespace, "namespace", "", "namespace to read in")
	o.bindKubeconfig(cmd)
}

// readCommand builds a read tool's command: validate, protect the process, build the client, read, write
// the result (or the error line).
func readCommand(o *runReadOptions, use, short string, validate func() error, read func(context.Context, kubernetes.Interface) (any, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := validate(); err != nil {
				return o.fail(err)
			}
			return o.runWithClient(cmd.Context(), read)
		},
	}
	o.bind(cmd)
	return cmd
}

func newRunPodLogsCommand(streams cli.IO) *cobra.Command {
	o := &runReadOptions{clusterTool: clusterTool{streams: streams}}
	lo := toolrun.PodLogsOptions{}
	cmd := readCommand(o, "pod-logs", "The newest lines of one container's log, bounded and scrubbed of secrets",
		func() error { lo.Namespace = o.Namespace; return lo.Validate() },
		func(ctx context.Context, c kubernetes.Interface) (any, error) {
			// Scrub by the exact values of this credential too, in case a log echoes them.
			sc, err := toolrun.KubeconfigScrubber(o.Kubeconfig)
			if err != nil {
				return nil, err
			}
			lo.Scrubber = sc
			return toolrun.PodLogs(ctx, c, lo)
		})
	f := cmd.Flags()
	f.StringVar(&lo.Pod, "pod", "", "the Pod")
	f.StringVar(&lo.Container, "container", "", "the container (default: the Pod's default or only container)")
	f.Int64Var(&lo.TailLines, "tail-lines", 100, "how many of the newest lines")
	f.Int64Var(&lo.SinceSeconds, "since-seconds", 0, "only lines newer than this many seconds (0: no limit)")
	f.BoolVar(&lo.Previous, "previous", false, "the previous run of a restarted container")
	return cmd
}

func newRunEventsCommand(streams cli.IO) *cobra.Command {
	o := &runReadOptions{clusterTool: clusterTool{streams: streams}}
	eo := toolrun.EventsOptions{}
	cmd := readCommand(o, "events", "The newest events of a namespace, or of one object in it",
		func() error { eo.Namespace = o.Namespace; return eo.Validate() },
		func(ctx context.Context, c kubernetes.Interface) (any, error) { return toolrun.ListEvents(ctx, c, eo) })
	f := cmd.Flags()
	f.StringVar(&eo.Kind, "kind", "", "only events of objects of this kind (Pod, Deployment...)")
	f.StringVar(&eo.Name, "name", "", "only events of the object with this name")
	f.StringVar(&eo.Type, "type", "", "only Normal or Warning events")
	f.IntVar(&eo.Limit, "limit", 50, "how many of the newest events")
	return cmd
}

func newRunDescribeCommand(streams cli.IO) *cobra.Command {
	o := &runReadOptions{clusterTool: clusterTool{streams: streams}}
	do := toolrun.DescribeOptions{}
	cmd := readCommand(o, "describe", "Describe Deployments, StatefulSets, Services, Ingresses or ConfigMaps (never Secrets)",
		func() error { do.Namespace = o.Namespace; return do.Validate() },
		func(ctx context.Context, c kubernetes.Interface) (any, error) { return toolrun.Describe(ctx, c, do) })
	f := cmd.Flags()
	f.StringVar(&do.Kind, "kind", "", "deployment, statefulset, service, ingress or configmap")
	f.StringVar(&do.Name, "name", "", "one object (default: every object of the kind)")
	return cmd
}

func newRunRolloutStatusCommand(streams cli.IO) *cobra.Command {
	o := &runReadOptions{clusterTool: clusterTool{streams: streams}}
	ro := toolrun.RolloutOptions{}
	cmd := readCommand(o, "rollout-status", "Where the rollout of a Deployment or StatefulSet stands now",
		func() error { ro.Namespace = o.Namespace; return ro.Validate() },
		func(ctx context.Context, c kubernetes.Interface) (any, error) {
			return toolrun.RolloutStatus(ctx, c, ro)
		})
	f := cmd.Flags()
	f.StringVar(&ro.Kind, "kind", "deployment", "deployment or statefulset")
	f.StringVar(&ro.Name, "name", "", "the Deployment or StatefulSet")
	return cmd
}

// runTerraformShowOptions are the flags of `run terraform-show`.
type runTerraformShowOptions struct {
	PlanFile       string
	PlanID         string
	ProviderMirror string

	streams cli.IO
	log     *slog.Logger
}

func newRunTerraformShowCommand(streams cli.IO) *cobra.Command {
	o := &runTerraformShowOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "terraform-show",
		Short: "Describe a saved plan with terraform show (no cluster access)",
		Long: `terraform-show reads the saved plan in --plan-file (the mounted ConfigMap tfplan-<plan ID>), refuses it
unless its bytes hash to --plan-id and it passes the allowlist, and describes it with terraform show, using
the kubernetes provider from the image's mirror. It talks to no cluster.`,
		Args: cli.Usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.log = runLogger(o.streams)
			if err := toolrun.ValidatePlanID(o.PlanID); err != nil {
				return runFail(o.streams, o.log, err)
			}
			runProtect(o.log)
			res, err := toolrun.ShowSaved(cmd.Context(), o.PlanFile, o.PlanID, toolrun.ShowOptions{ProviderMirror: o.ProviderMirror, Stderr: o.streams.ErrOut})
			if err != nil {
				return runFail(o.streams, o.log, err)
			}
			return runSucceed(o.streams, o.log, res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.PlanFile, "plan-file", "/plan/tfplan", "the saved plan (the mounted ConfigMap)")
	f.StringVar(&o.PlanID, "plan-id", "", "SHA-256 of the saved plan")
	f.StringVar(&o.ProviderMirror, "provider-mirror", toolrun.ImageProviderMirror, "filesystem mirror of the kubernetes provider")
	return cmd
}
