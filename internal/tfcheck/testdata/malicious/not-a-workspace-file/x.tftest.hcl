run "x" {}
