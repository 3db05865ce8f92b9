// Package scripts tests the shell scripts in scripts/ without a cluster: the plan scripts/deploy.sh prints
// in a dry run and what it refuses, and what scripts/install-client.sh installs, as the user it is for.
// Anything that needs a live cluster is proven by make verify and make e2e instead.
package scripts
