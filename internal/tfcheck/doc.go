// Package tfcheck decides, by parsing, whether a Terraform workspace sent by the untrusted MCP
// server may be planned and applied inside a sandbox.
//
// A sandbox runs `terraform plan` and `terraform apply` with a credential for the target
// namespace. Terraform can run programs (provider exec credential plugins, provisioners, external
// data sources), read local files (file, templatefile, ...), reach the network (remote modules,
// other providers, remote backends) and behave differently at apply than at plan
// (terraform.applying). A workspace that could do any of that would turn the sandbox's credential
// into the MCP server's. So the checker admits only what it can show is harmless: an allowlist of
// block types, arguments, kubernetes resource types, functions and references. Everything else is
// refused, with the file, line and column of each problem and the reason.
//
// The checker reads both of Terraform's syntaxes. Native syntax is parsed with hclsyntax, the
// parser Terraform itself uses. JSON syntax is read by a small parser of its own that keeps key
// order, refuses duplicate keys and bounds nesting, so that no JSON trick (a repeated key, a "//"
// comment key, a \u escape) can show the checker something other than what Terraform will see;
// every JSON string is then parsed as a template, as Terraform does. Nesting depth is bounded
// before any parser sees the bytes, so hostile input cannot exhaust the stack; so are the parts of
// each string, heredoc and template (20,000 lines, escapes and sequences), which hclsyntax -- here
// and in Terraform -- melds in time that grows with their square.
//
// CheckPlan applies the same rules to a saved plan, which carries its own copy of the
// configuration (Terraform applies that copy, not the working directory) and the backend it will
// write state to.
package tfcheck
