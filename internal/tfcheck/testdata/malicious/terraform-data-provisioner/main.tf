resource "terraform_data" "x" {
  input = "x"
  provisioner "local-exec" {
    command = "id"
  }
}
