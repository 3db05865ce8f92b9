//go:build tools

// Package tools pins hashicorp/terraform-provider-kubernetes v1.13.4, the only release the module proxy serves.
package tools

import _ "github.com/hashicorp/terraform-provider-kubernetes"
