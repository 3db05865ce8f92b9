package tfcheck

// This file holds the allowlists: the only names a workspace may use. Everything not listed here is
// refused. The lists are data, not logic, so a review can read them in one place.

// resourceTypes are the managed resource types of the kubernetes provider v1.13.4 (its provider.go
// ResourcesMap), less those refused below.
var resourceTypes = setOf(
	"kubernetes_api_service",
	"kubernetes_cluster_role",
	"kubernetes_cluster_role_binding",
	"kubernetes_config_map",
	"kubernetes_cron_job",
	"kubernetes_csi_driver",
	"kubernetes_daemonset",
	"kubernetes_default_service_account",
	"kubernetes_deployment",
	"kubernetes_endpoints",
	"kubernetes_horizontal_pod_autoscaler",
	"kubernetes_ingress",
	"kubernetes_job",
	"kubernetes_limit_range",
	"kubernetes_namespace",
	"kubernetes_network_policy",
	"kubernetes_persistent_volume",
	"kubernetes_persistent_volume_claim",
	"kubernetes_pod",
	"kubernetes_pod_disruption_budget",
	"kubernetes_pod_security_policy",
	"kubernetes_priority_class",
	"kubernetes_replication_controller",
	"kubernetes_role_binding",
	"kubernetes_resource_quota",
	"kubernetes_role",
	"kubernetes_service",
	"kubernetes_stateful_set",
	"kubernetes_storage_class",
	"kubernetes_validating_webhook_configuration",
	"kubernetes_mutating_webhook_configuration",
)

// refusedResourceTypes are kubernetes provider resource types that exist but are refused anyway, with why.
var refusedResourceTypes = map[string]string{
	// A Secret resource puts secret values into the plan and the state, which the MCP server reads back.
	"kubernetes_secret": "it puts secret values into the plan and the state, which leave the sandbox",
	// Provider 1.13.4 approves the request it creates: a way to mint a cluster credential.
	"kubernetes_certificate_signing_request": "it creates and approves a certificate signing request, which mints a credential",
	// Its state exposes the names of token Secrets, and in 1.13.4 it waits for a token Secret that
	// current Kubernetes no longer creates.
	"kubernetes_service_account": "it exposes the names of service account token Secrets",
}

// dataSourceTypes are the data sources of the kubernetes provider v1.13.4 (its provider.go
// DataSourcesMap), less those refused below.
var dataSourceTypes = setOf(
	"kubernetes_all_namespaces",
	"kubernetes_config_map",
	"kubernetes_ingress",
	"kubernetes_namespace",
	"kubernetes_service",
	"kubernetes_storage_class",
	"kubernetes_persistent_volume_claim",
)

// refusedDataSourceTypes are kubernetes provider data sources that exist but are refused anyway, with why.
var refusedDataSourceTypes = map[string]string{
	"kubernetes_secret":          "it reads secret values into the plan, which leaves the sandbox",
	"kubernetes_service_account": "it exposes the names of service account token Secrets",
	"kubernetes_pod":             "it reads a pod's whole spec, environment values included, into the plan",
}

// functions are Terraform's built-in functions that only compute a value from their arguments (or
// the clock): no file system, no template rendering of strings not in the configuration, no
// unwrapping of sensitive values. Terraform v1.11 internal/lang/functions.go lists them all; those
// missing here (file*, templatefile, templatestring, abspath, pathexpand, nonsensitive, type,
// ephemeralasnull, provider:: and core:: names) are refused.
var functions = setOf(
	// numeric
	"abs", "ceil", "floor", "log", "max", "min", "parseint", "pow", "signum",
	// string
	"chomp", "endswith", "format", "formatlist", "indent", "join", "lower", "regex", "regexall",
	"replace", "split", "startswith", "strcontains", "strrev", "substr", "title", "trim",
	"trimprefix", "trimspace", "trimsuffix", "upper",
	// collection
	"alltrue", "anytrue", "chunklist", "coalesce", "coalescelist", "compact", "concat", "contains",
	"distinct", "element", "flatten", "index", "keys", "length", "lookup", "matchkeys", "merge",
	"one", "range", "reverse", "setintersection", "setproduct", "setsubtract", "setunion", "slice",
	"sort", "sum", "transpose", "values", "zipmap",
	// encoding
	"base64decode", "base64encode", "base64gzip", "csvdecode", "jsondecode", "jsonencode",
	"textdecodebase64", "textencodebase64", "urlencode", "yamldecode", "yamlencode",
	// path strings (pure: they never touch the file system)
	"basename", "dirname",
	// date and time
	"formatdate", "plantimestamp", "timeadd", "timecmp", "timestamp",
	// hash and crypto
	"base64sha256", "base64sha512", "bcrypt", "md5", "rsadecrypt", "sha1", "sha256", "sha512",
	"uuid", "uuidv5",
	// network
	"cidrhost", "cidrnetmask", "cidrsubnet", "cidrsubnets",
	// type conversion
	"can", "issensitive", "sensitive", "tobool", "tolist", "tomap", "tonumber", "toset",
	"tostring", "try",
)

// refusedFunctions say why well-known functions are refused; any other function not in functions is
// refused as unknown.
var refusedFunctions = map[string]string{
	"file":             "it reads a file of the sandbox (the credential is a file)",
	"fileexists":       "it probes the sandbox's file system",
	"fileset":          "it lists the sandbox's file system",
	"filebase64":       "it reads a file of the sandbox (the credential is a file)",
	"filebase64sha256": "it reads a file of the sandbox",
	"filebase64sha512": "it reads a file of the sandbox",
	"filemd5":          "it reads a file of the sandbox",
	"filesha1":         "it reads a file of the sandbox",
	"filesha256":       "it reads a file of the sandbox",
	"filesha512":       "it reads a file of the sandbox",
	"templatefile":     "it reads a file of the sandbox and renders it as code",
	"templatestring":   "it renders a string that is not in the configuration as code (which may call file functions)",
	"abspath":          "it reveals the sandbox's file system layout",
	"pathexpand":       "it reveals the sandbox's home folder",
	"nonsensitive":     "it unwraps sensitive values so they show in plan output",
	"ephemeralasnull":  "ephemeral values are not allowed",
	"type":             "it exists only in terraform console",
}

// typeFunctions and typeKeywords make up variable type constraints (list(string), optional(...));
// they are not calls.
var (
	typeFunctions = setOf("list", "set", "map", "object", "tuple", "optional")
	typeKeywords  = setOf("string", "number", "bool", "any")
)

// refusedTopBlocks say why well-known top-level blocks are refused.
var refusedTopBlocks = map[string]string{
	"module":    "a workspace is one flat folder; a module (remote or local) would pull in code that is not checked",
	"import":    "import blocks are not allowed (they adopt objects that the workspace does not describe)",
	"check":     "check blocks are not allowed (their nested data sources escape the resource rules)",
	"removed":   "removed blocks are not allowed",
	"ephemeral": "ephemeral resources are not allowed",
	"action":    "actions are not allowed (they run provider operations outside the plan)",
}

// allowedProviderSources are the spellings of the kubernetes provider's source address.
var allowedProviderSources = setOf("hashicorp/kubernetes", "registry.terraform.io/hashicorp/kubernetes")

// lockProviderAddress is the only provider a lock file may name.
const lockProviderAddress = "registry.terraform.io/hashicorp/kubernetes"

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
