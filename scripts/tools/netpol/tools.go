//go:build tools

// Package tools pins kube-network-policies, the NetworkPolicy enforcer of the local cluster.
package tools

import _ "sigs.k8s.io/kube-network-policies/cmd"
